# SPDX-License-Identifier: Apache-2.0
"""Tikhonov inverses, the mid-band sharpness loss and the thin forward model of the optics family
(issue 15, specs/optics.md; the C++ implementations of ``include/fieldfuse/optics.h``).

Conventions: Fourier grids are unshifted (DC at [0, 0]), frequencies ``fftfreq(N, pixel_size)``;
real tensors are float32 or float64, their complex partners complex64 or complex128. CPU (Eigen's
FFT) and CUDA (cuFFT); results are deterministic (no atomics; CPU results do not depend on the
thread count).

Raw ops (each with a fake impl, so ``torch.compile(fullgraph=True)`` traces them):
``torch.ops.fieldfuse.tikhonov_filter``, ``tikhonov_inverse`` / ``_backward``,
``tikhonov_inverse_3d`` / ``_backward``, ``midband_power`` / ``_backward`` and
``thin_forward_model``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _registry
from .._backend import _C, check_tensor, dl, real_number, stream_of, workspace

__all__ = [
    "midband_power",
    "thin_forward_model",
    "tikhonov_filter",
    "tikhonov_inverse",
    "tikhonov_inverse_3d",
]

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _opt(t: Tensor | None):
    return None if t is None else dl(t)


def _none_if_empty(t: Tensor) -> Tensor | None:
    """Backward ops return 0-element tensors for gradients nobody asked for (a schema needs a
    tensor there); the binding takes None for them."""
    return None if t.numel() == 0 and t.dim() == 1 else t


def _empty(like: Tensor) -> Tensor:
    """An unrequested output: [0], never written."""
    return like.new_empty((0,))


# --- tikhonov_filter ---------------------------------------------------------------------------


def _filter_out(absorption_tf: Tensor, phase_tf: Tensor, regularization: float) -> Tensor:
    if absorption_tf.dim() != 4:
        return absorption_tf.new_empty((0,))  # the C++ front names the wrong shape
    B, Z, Y, X = absorption_tf.shape
    return absorption_tf.new_empty((B, 2, Z, Y, X))


def _filter(absorption_tf: Tensor, phase_tf: Tensor, regularization: float) -> Tensor:
    out = _filter_out(absorption_tf, phase_tf, regularization)  # every element is written
    _C.tikhonov_filter(dl(absorption_tf), dl(phase_tf), regularization, dl(out),
                       stream_of(absorption_tf))
    return out


# --- tikhonov_inverse --------------------------------------------------------------------------


def _inverse_out(data: Tensor, absorption_tf: Tensor, phase_tf: Tensor, regularization: float,
                 normalize: bool) -> tuple[Tensor, Tensor]:
    shape = (data.shape[0], data.shape[2], data.shape[3]) if data.dim() == 4 else (0,)
    return data.new_empty(shape), data.new_empty(shape)


def _inverse(data: Tensor, absorption_tf: Tensor, phase_tf: Tensor, regularization: float,
             normalize: bool) -> tuple[Tensor, Tensor]:
    absorption, phase = _inverse_out(data, absorption_tf, phase_tf, regularization, normalize)
    scratch = workspace(_C.tikhonov_inverse_workspace_size(dl(data), dl(absorption_tf)),
                        data.device)
    _C.tikhonov_inverse(dl(data), dl(absorption_tf), dl(phase_tf), regularization, normalize,
                        dl(absorption), dl(phase), dl(scratch), stream_of(data))
    return absorption, phase


def _inverse_grads_out(data, absorption_tf, phase_tf, regularization, normalize, grad_absorption,
                       grad_phase, output_mask):
    def make(needed: bool, like: Tensor, zero: bool) -> Tensor:
        if not needed:
            return _empty(like)
        # A shared transfer function's gradient sums over B; with B = 0 nothing writes it.
        return torch.zeros_like(like) if zero else torch.empty_like(like)

    none_written = data.dim() == 4 and data.shape[0] * data.shape[2] * data.shape[3] == 0
    return (make(output_mask[0], data, none_written),
            make(output_mask[1], absorption_tf, none_written),
            make(output_mask[2], phase_tf, none_written))


def _inverse_backward(data: Tensor, absorption_tf: Tensor, phase_tf: Tensor,
                      regularization: float, normalize: bool, grad_absorption: Tensor,
                      grad_phase: Tensor, output_mask: list[bool]) -> tuple[Tensor, Tensor, Tensor]:
    grads = _inverse_grads_out(data, absorption_tf, phase_tf, regularization, normalize,
                               grad_absorption, grad_phase, output_mask)
    scratch = workspace(
        _C.tikhonov_inverse_backward_workspace_size(dl(data), dl(absorption_tf)), data.device)
    _C.tikhonov_inverse_backward(
        dl(data), dl(absorption_tf), dl(phase_tf), regularization, normalize, dl(grad_absorption),
        dl(grad_phase), *(_opt(_none_if_empty(g)) for g in grads), dl(scratch), stream_of(data))
    return grads


def _inverse_setup(ctx, inputs, output):
    data, absorption_tf, phase_tf, regularization, normalize = inputs
    ctx.save_for_backward(data, absorption_tf, phase_tf)
    ctx.options = (regularization, normalize)


def _inverse_gradient(ctx, grad_absorption, grad_phase):
    data, absorption_tf, phase_tf = ctx.saved_tensors
    mask = _registry.wants_input_grad(ctx)[:3]
    grads = _registry.call_in_backward(
        ctx, _ops["tikhonov_inverse_backward"], data, absorption_tf, phase_tf, *ctx.options,
        grad_absorption, grad_phase, mask)
    return tuple(g if m else None for g, m in zip(grads, mask)) + (None, None)


# --- tikhonov_inverse_3d -----------------------------------------------------------------------


def _inverse_3d(data: Tensor, transfer_function: Tensor, regularization: float) -> Tensor:
    out = torch.empty_like(data, memory_format=torch.contiguous_format)
    scratch = workspace(_C.tikhonov_inverse_3d_workspace_size(dl(data), dl(transfer_function)),
                        data.device)
    _C.tikhonov_inverse_3d(dl(data), dl(transfer_function), regularization, dl(out), dl(scratch),
                           stream_of(data))
    return out


def _inverse_3d_fake(data: Tensor, transfer_function: Tensor, regularization: float) -> Tensor:
    return torch.empty_like(data, memory_format=torch.contiguous_format)


def _inverse_3d_grads_out(data, transfer_function, output_mask):
    return (torch.empty_like(data, memory_format=torch.contiguous_format) if output_mask[0]
            else _empty(data),
            torch.empty_like(transfer_function, memory_format=torch.contiguous_format)
            if output_mask[1] else _empty(transfer_function))


def _inverse_3d_backward(data: Tensor, transfer_function: Tensor, regularization: float,
                         grad_out: Tensor, output_mask: list[bool]) -> tuple[Tensor, Tensor]:
    grads = _inverse_3d_grads_out(data, transfer_function, output_mask)
    scratch = workspace(_C.tikhonov_inverse_3d_workspace_size(dl(data), dl(transfer_function)),
                        data.device)
    _C.tikhonov_inverse_3d_backward(dl(data), dl(transfer_function), regularization, dl(grad_out),
                                    *(_opt(_none_if_empty(g)) for g in grads), dl(scratch),
                                    stream_of(data))
    return grads


def _inverse_3d_backward_fake(data, transfer_function, regularization, grad_out, output_mask):
    return _inverse_3d_grads_out(data, transfer_function, output_mask)


def _inverse_3d_setup(ctx, inputs, output):
    data, transfer_function, regularization = inputs
    ctx.save_for_backward(data, transfer_function)
    ctx.regularization = regularization


def _inverse_3d_gradient(ctx, grad_out):
    data, transfer_function = ctx.saved_tensors
    mask = _registry.wants_input_grad(ctx)[:2]
    grads = _registry.call_in_backward(ctx, _ops["tikhonov_inverse_3d_backward"], data,
                                       transfer_function, ctx.regularization, grad_out, mask)
    return tuple(g if m else None for g, m in zip(grads, mask)) + (None,)


# --- midband_power -----------------------------------------------------------------------------


def _midband_out(images: Tensor, *options) -> Tensor:
    return images.new_empty((images.shape[0],) if images.dim() == 3 else (0,))


def _midband(images: Tensor, pixel_size: float, wavelength: float, na_detection: float,
             low: float, high: float) -> Tensor:
    out = _midband_out(images)
    scratch = workspace(_C.midband_power_workspace_size(dl(images)), images.device)
    _C.midband_power(dl(images), pixel_size, wavelength, na_detection, low, high, dl(out),
                     dl(scratch), stream_of(images))
    return out


def _midband_backward(images: Tensor, pixel_size: float, wavelength: float, na_detection: float,
                      low: float, high: float, grad_out: Tensor) -> Tensor:
    grad = torch.empty_like(images, memory_format=torch.contiguous_format)
    scratch = workspace(_C.midband_power_backward_workspace_size(dl(images)), images.device)
    _C.midband_power_backward(dl(images), pixel_size, wavelength, na_detection, low, high,
                              dl(grad_out), dl(grad), dl(scratch), stream_of(images))
    return grad


def _midband_backward_fake(images, pixel_size, wavelength, na_detection, low, high, grad_out):
    return torch.empty_like(images, memory_format=torch.contiguous_format)


def _midband_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.options = inputs[1:]


def _midband_gradient(ctx, grad_out):
    (images,) = ctx.saved_tensors
    grad = _registry.call_in_backward(ctx, _ops["midband_power_backward"], images, *ctx.options,
                                      grad_out)
    return (grad,) + (None,) * len(ctx.options)


# --- thin_forward_model ------------------------------------------------------------------------


def _model_out(absorption: Tensor, phase: Tensor, absorption_tf: Tensor, phase_tf: Tensor,
               background: float) -> Tensor:
    if absorption.dim() != 3 or absorption_tf.dim() != 4:
        return absorption.new_empty((0,))  # the C++ front names the wrong shape
    B, Y, X = absorption.shape
    return absorption.new_empty((B, absorption_tf.shape[1], Y, X))


def _model(absorption: Tensor, phase: Tensor, absorption_tf: Tensor, phase_tf: Tensor,
           background: float) -> Tensor:
    data = _model_out(absorption, phase, absorption_tf, phase_tf, background)
    scratch = workspace(_C.thin_forward_model_workspace_size(dl(absorption), dl(absorption_tf)),
                        absorption.device)
    _C.thin_forward_model(dl(absorption), dl(phase), dl(absorption_tf), dl(phase_tf), background,
                          dl(data), dl(scratch), stream_of(absorption))
    return data


_INVERSE_ARGS = "Tensor data, Tensor absorption_tf, Tensor phase_tf, float regularization, " \
                "bool normalize"
_MIDBAND_ARGS = "Tensor images, float pixel_size, float wavelength, float na_detection, " \
                "float low, float high"

# Note [op table]: every op of this module, registered once.
_ops = _registry.register([
    _registry.OpSpec("tikhonov_filter", _filter, _filter_out,
                     schema="(Tensor absorption_tf, Tensor phase_tf, float regularization) "
                            "-> Tensor"),
    _registry.OpSpec("tikhonov_inverse", _inverse, _inverse_out, _inverse_setup,
                     _inverse_gradient, schema=f"({_INVERSE_ARGS}) -> (Tensor, Tensor)"),
    _registry.OpSpec("tikhonov_inverse_backward", _inverse_backward, _inverse_grads_out,
                     schema=f"({_INVERSE_ARGS}, Tensor grad_absorption, Tensor grad_phase, "
                            "bool[] output_mask) -> (Tensor, Tensor, Tensor)"),
    _registry.OpSpec("tikhonov_inverse_3d", _inverse_3d, _inverse_3d_fake, _inverse_3d_setup,
                     _inverse_3d_gradient,
                     schema="(Tensor data, Tensor transfer_function, float regularization) -> "
                            "Tensor"),
    _registry.OpSpec("tikhonov_inverse_3d_backward", _inverse_3d_backward,
                     _inverse_3d_backward_fake,
                     schema="(Tensor data, Tensor transfer_function, float regularization, "
                            "Tensor grad_out, bool[] output_mask) -> (Tensor, Tensor)"),
    _registry.OpSpec("midband_power", _midband, _midband_out, _midband_setup, _midband_gradient,
                     schema=f"({_MIDBAND_ARGS}) -> Tensor"),
    _registry.OpSpec("midband_power_backward", _midband_backward, _midband_backward_fake,
                     schema=f"({_MIDBAND_ARGS}, Tensor grad_out) -> Tensor"),
    _registry.OpSpec("thin_forward_model", _model, _model_out,
                     schema="(Tensor absorption, Tensor phase, Tensor absorption_tf, "
                            "Tensor phase_tf, float background) -> Tensor"),
])


# --- public functions --------------------------------------------------------------------------


def _batched(op: str, arg: str, t: Tensor, dims: int, layout: str) -> Tensor:
    """t with a leading batch dim of 1 when it has `dims` − 1 dims (the op's unbatched form)."""
    check_tensor(op, arg, t)
    if t.dim() == dims - 1:
        return t.unsqueeze(0)
    if t.dim() != dims:
        raise ValueError(f"{op}(): expected {arg} to have {dims - 1} or {dims} dims {layout}, but "
                         f"got shape {list(t.shape)}")
    return t


def tikhonov_filter(absorption_tf: Tensor, phase_tf: Tensor,
                    regularization: float = 1e-3) -> Tensor:
    """The closed-form regularised inverse filter ``G = (M·Mᴴ + λI)⁻¹·M`` per frequency, with
    ``M = [Hu; Hp]`` (2 × Z); equal to waveorder's SVD filter ``U·diag(S/(S² + λ))·Vh``, rank
    deficient M included.

    Args:
        absorption_tf, phase_tf: ``[..., Z, Y, X]`` complex64 / complex128, the same shape.
        regularization: λ > 0.

    Returns:
        ``[..., 2, Z, Y, X]``: row 0 reconstructs absorption, row 1 phase. Applied unconjugated:
        ``Ŷ_s = Σ_z G[s, z]·FFT2[x̃_z]`` (see :func:`tikhonov_inverse`). Not differentiable.
    """
    op = "tikhonov_filter"
    check_tensor(op, "absorption_tf", absorption_tf)
    check_tensor(op, "phase_tf", phase_tf)
    lead = absorption_tf.shape[:-3]
    if absorption_tf.dim() < 3 or phase_tf.shape != absorption_tf.shape:
        raise ValueError(f"{op}(): expected absorption_tf and phase_tf of one shape [..., Z, Y, X],"
                         f" but got {list(absorption_tf.shape)} and {list(phase_tf.shape)}")
    zyx = absorption_tf.shape[-3:]
    out = _ops["tikhonov_filter"](absorption_tf.reshape(-1, *zyx), phase_tf.reshape(-1, *zyx),
                                  real_number(op, "regularization", regularization))
    return out.reshape(*lead, 2, *zyx)


def tikhonov_inverse(data: Tensor, absorption_tf: Tensor, phase_tf: Tensor,
                     regularization: float = 1e-3, *,
                     normalize: bool = True) -> tuple[Tensor, Tensor]:
    """The 2-D Tikhonov reconstruction of absorption and phase from a defocus stack.

    Per slice ``x̃ = x / max(mean_yx x, 1e−12) − 1`` (when ``normalize``), ``X̂ = FFT2[x̃]``,
    ``Ŷ_s = Σ_z G[s, z]·X̂_z`` with the filter of :func:`tikhonov_filter` applied **unconjugated**
    (as waveorder does in 2-D; the 3-D inverse conjugates), outputs ``real(IFFT2[Ŷ_s])``. G is
    never materialised: one fused pass per frequency solves the 2 × 2 system.

    Args:
        data: ``[Z, Y, X]`` or ``[B, Z, Y, X]`` real float32/float64 (any strides).
        absorption_tf, phase_tf: ``[Z, Y, X]`` or ``[1, Z, Y, X]`` (shared by every tile) or
            ``[B, Z, Y, X]``, the complex partner of data's dtype.
        regularization: λ > 0. normalize: apply the per-slice normalisation.

    Returns:
        ``(absorption, phase)``, each ``[Y, X]`` (unbatched data) or ``[B, Y, X]``. Differentiable
        to data and both transfer functions with the exact adjoint (no decoupled approximation).
    """
    op = "tikhonov_inverse"
    unbatched = isinstance(data, Tensor) and data.dim() == 3
    data = _batched(op, "data", data, 4, "[B, Z, Y, X]")
    absorption_tf = _batched(op, "absorption_tf", absorption_tf, 4, "[B, Z, Y, X]")
    phase_tf = _batched(op, "phase_tf", phase_tf, 4, "[B, Z, Y, X]")
    if not isinstance(normalize, bool):
        raise TypeError(f"{op}(): expected normalize to be a bool, but got "
                        f"{type(normalize).__name__}")
    absorption, phase = _ops["tikhonov_inverse"](
        data, absorption_tf, phase_tf, real_number(op, "regularization", regularization), normalize)
    if unbatched:
        return absorption[0], phase[0]
    return absorption, phase


def tikhonov_inverse_3d(data: Tensor, transfer_function: Tensor,
                        regularization: float = 1e-3) -> Tensor:
    """The 3-D Tikhonov reconstruction ``real(IFFT3[conj(H)·FFT3[x]/(|H|² + λ)])``.

    The transfer function is applied **conjugated** (waveorder's 3-D convention; the 2-D
    :func:`tikhonov_inverse` applies its filter unconjugated). No normalisation: do it before.

    Args:
        data: ``[Z, Y, X]`` or ``[B, Z, Y, X]`` real float32/float64.
        transfer_function: ``[Z, Y, X]`` complex partner of data's dtype, shared by the B volumes.
        regularization: λ > 0.

    Returns:
        data's shape and dtype. Differentiable to data and the transfer function.
    """
    op = "tikhonov_inverse_3d"
    check_tensor(op, "transfer_function", transfer_function)
    unbatched = isinstance(data, Tensor) and data.dim() == 3
    data = _batched(op, "data", data, 4, "[B, Z, Y, X]")
    out = _ops["tikhonov_inverse_3d"](data, transfer_function,
                                      real_number(op, "regularization", regularization))
    return out[0] if unbatched else out


def midband_power(image: Tensor, pixel_size: float, wavelength: float, na_detection: float,
                  band: tuple[float, float] = (0.125, 0.25)) -> Tensor:
    """Mean amplitude of ``FFT2[image]`` over the mid-band annulus
    ``low·2NAd/λ < |f| < high·2NAd/λ`` (strict; ``f`` on the unshifted fftfreq grid).

    ``power = Σ_mask |FFT2(image)| / n_mask`` with ``n_mask`` the annulus' size on the grid; an
    empty annulus gives 0. The tile optimiser minimises its negative.

    Args:
        image: ``[..., Y, X]`` real float32/float64 (differentiable).
        pixel_size, wavelength, na_detection: > 0, one length unit.
        band: ``(low, high)`` with ``0 <= low < high``.

    Returns:
        ``[...]``. The gradient of ``|F|`` is ``F/|F|`` (0 where ``F = 0``).
    """
    op = "midband_power"
    check_tensor(op, "image", image)
    if image.dim() < 2:
        raise ValueError(f"{op}(): expected image to have at least 2 dims [..., Y, X], but got "
                         f"shape {list(image.shape)}")
    try:
        low, high = band
    except (TypeError, ValueError):
        raise TypeError(
            f"{op}(): expected band to be a pair (low, high), but got {band!r}") from None
    lead = image.shape[:-2]
    out = _ops["midband_power"](
        image.reshape(-1, *image.shape[-2:]), real_number(op, "pixel_size", pixel_size),
        real_number(op, "wavelength", wavelength), real_number(op, "na_detection", na_detection),
        real_number(op, "band", low), real_number(op, "band", high))
    return out.reshape(lead)


def thin_forward_model(absorption: Tensor, phase: Tensor, absorption_tf: Tensor,
                       phase_tf: Tensor, background: float = 10.0) -> Tensor:
    """The thin forward model (waveorder's ``apply_transfer_function``):
    ``data_z = real(IFFT2[FFT2[a]·Hu_z]) + real(IFFT2[FFT2[p]·Hp_z]) + background``.

    Args:
        absorption, phase: ``[Y, X]`` or ``[B, Y, X]`` real float32/float64.
        absorption_tf, phase_tf: ``[Z, Y, X]`` / ``[1, Z, Y, X]`` (shared) or ``[B, Z, Y, X]``,
            the complex partner of the objects' dtype.
        background: finite.

    Returns:
        ``[Z, Y, X]`` or ``[B, Z, Y, X]``. Not differentiable (a simulator).
    """
    op = "thin_forward_model"
    unbatched = isinstance(absorption, Tensor) and absorption.dim() == 2
    absorption = _batched(op, "absorption", absorption, 3, "[B, Y, X]")
    phase = _batched(op, "phase", phase, 3, "[B, Y, X]")
    absorption_tf = _batched(op, "absorption_tf", absorption_tf, 4, "[B, Z, Y, X]")
    phase_tf = _batched(op, "phase_tf", phase_tf, 4, "[B, Z, Y, X]")
    with torch.no_grad():
        data = _ops["thin_forward_model"](absorption.detach(), phase.detach(),
                                          absorption_tf.detach(), phase_tf.detach(),
                                          real_number(op, "background", background))
    return data[0] if unbatched else data
