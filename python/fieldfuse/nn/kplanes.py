# SPDX-License-Identifier: Apache-2.0
"""K-Planes density fields as `nn.Module`s: learnable planes (and rotations), a decoder, TV helpers.

The modules only hold parameters and call the fused ops of :mod:`fieldfuse.kplanes_ops`; the math of
the features lives there (contract: specs/kplanes.md). A field maps points ``[B, 3]`` in
[−1, 1]³ to densities ``[B, out_features]``::

    features = kplanes_tilted(pts, rotations(), planes, gates)   # [B, T·Σ_l C_l]
    densities = activation(decoder(features))                   # [B, out_features]

Activations: ``"softplus"`` is ``softplus(x − 1)`` (the tomography density, specs/tomography.md),
``"exp"`` is ``exp(min(x, EXP_INPUT_MAX))`` and ``"identity"`` passes the decoder output through.

Volume TV (specs/kplanes.md): pick up to 10 000 of the batch's points with
:meth:`KPlanesTilted.tv_tap_coords`, evaluate the batch and the taps in one fused call with
:meth:`KPlanesTilted.forward_with_tv_taps` and pass the tap densities to
:meth:`KPlanesTilted.volume_tv`::

    field = KPlanesTilted(num_tilts=4, channels=8, resolutions=[200])
    tap_pts = field.tv_tap_coords(pts)
    rho, tap_rho = field.forward_with_tv_taps(pts, tap_pts)
    loss = data_term(rho) + field.volume_tv(tap_rho, weight=1e-3) + 1e-4 * field.plane_tv()
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kplanes_ops import kplanes as _kplanes
from ..kplanes_ops import kplanes_tilted, kplanes_tilted_taps, kplanes_tilted_with_taps
from ..kplanes_ops import plane_tv as _plane_tv
from .losses import volume_tv_from_taps
from .rotations import (
    _NearestRotation,
    _rotation_to_quaternion,
    default_rotations,
    nearest_rotation,
    quaternion_to_rotation,
)  # the parameterisations of KPlanesTilted's rotations

__all__ = ["EXP_INPUT_MAX", "KPlanes", "KPlanesTilted"]

DECODERS = ("linear", "mlp")
ACTIVATIONS = ("softplus", "exp", "identity")
ROTATION_PARAMS = ("svd", "quaternion")

# Planes start uniform in [0.1, 0.5] (specs/kplanes.md): products of three samples stay positive
# and O(0.01..0.1), away from the zero where the product's gradient vanishes.
PLANE_INIT_RANGE = (0.1, 0.5)

# The "exp" activation clamps its input here: exp(15) ≈ 3.3e6 is far above any physical density
# of a normalised reconstruction, yet far below float32's overflow at exp(88.7), so one bad step
# cannot produce inf (and then NaN) densities. Above the clamp the gradient is 0.
EXP_INPUT_MAX = 15.0


# --- argument checks ----------------------------------------------------------------------------


def _check_int(op: str, name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}(): expected {name} to be an int, but got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{op}(): expected {name} to be >= {minimum}, but got {value}")
    return int(value)


def _check_choice(op: str, name: str, value, choices: Sequence[str]) -> str:
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{op}(): expected {name} to be one of {options}, but got {value!r}")
    return value


def _check_resolutions(op: str, resolutions) -> list[tuple[int, int]]:
    if isinstance(resolutions, (str, bytes)) or not isinstance(resolutions, Sequence):
        raise TypeError(
            f"{op}(): expected resolutions to be a sequence (one int or (H, W) per level), but "
            f"got {type(resolutions).__name__}"
        )
    if len(resolutions) == 0:
        raise ValueError(f"{op}(): expected resolutions to hold at least one level, but got none")
    sizes = []
    for level, res in enumerate(resolutions):
        name = f"resolutions[{level}]"
        if isinstance(res, Sequence) and not isinstance(res, (str, bytes)):
            if len(res) != 2:
                raise ValueError(
                    f"{op}(): expected {name} to be an int or a pair (H, W), but got {res!r}"
                )
            sizes.append((_check_int(op, f"{name}[0]", res[0], 1),
                          _check_int(op, f"{name}[1]", res[1], 1)))
        else:
            side = _check_int(op, name, res, 1)
            sizes.append((side, side))
    return sizes


def _check_channels(op: str, channels, num_levels: int) -> list[int]:
    if isinstance(channels, Sequence) and not isinstance(channels, (str, bytes)):
        if len(channels) != num_levels:
            raise ValueError(
                f"{op}(): expected channels to be an int or one int per level ({num_levels}), "
                f"but got {len(channels)} values"
            )
        return [_check_int(op, f"channels[{i}]", c, 1) for i, c in enumerate(channels)]
    return [_check_int(op, "channels", channels, 1)] * num_levels


# --- shared module machinery --------------------------------------------------------------------


class _KPlanesField(nn.Module):
    """Planes, decoder, activation and TV helpers shared by both variants (not public)."""

    _op_name = "_KPlanesField"

    def __init__(
        self,
        num_tilts: int,
        channels: int | Sequence[int],
        resolutions: Sequence[int | tuple[int, int]],
        *,
        out_features: int,
        decoder: str,
        hidden: int,
        layers: int,
        activation: str,
        channels_last: bool,
        dtype: torch.dtype | None,
        device: torch.device | str | None,
        deterministic: bool,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__()
        op = self._op_name
        sizes = _check_resolutions(op, resolutions)
        channel_list = _check_channels(op, channels, len(sizes))
        self.num_tilts = num_tilts
        self.out_features = _check_int(op, "out_features", out_features, 1)
        self.decoder_kind = _check_choice(op, "decoder", decoder, DECODERS)
        self.activation = _check_choice(op, "activation", activation, ACTIVATIONS)
        if decoder == "mlp":
            hidden = _check_int(op, "hidden", hidden, 1)
            layers = _check_int(op, "layers", layers, 1)
        self.resolutions = sizes
        self.channels = channel_list
        self.channels_last = bool(channels_last)
        self.deterministic = bool(deterministic)
        factory = {"dtype": dtype, "device": device}

        planes = []
        for (height, width), c in zip(sizes, channel_list):
            # Drawn on the CPU so a CPU generator reproduces the same planes on every device.
            grid = torch.empty((3 * num_tilts, c, height, width), dtype=dtype)
            grid.uniform_(*PLANE_INIT_RANGE, generator=generator)
            grid = grid.to(device=device)
            if self.channels_last:
                grid = grid.contiguous(memory_format=torch.channels_last)
            planes.append(nn.Parameter(grid))
        self.planes = nn.ParameterList(planes)

        self.num_features = num_tilts * sum(channel_list)
        if decoder == "linear":
            self.decoder = nn.Linear(self.num_features, self.out_features, **factory)
        else:
            blocks: list[nn.Module] = []
            width_in = self.num_features
            for _ in range(layers):
                blocks += [nn.Linear(width_in, hidden, **factory), nn.ReLU()]
                width_in = hidden
            blocks.append(nn.Linear(width_in, self.out_features, **factory))
            self.decoder = nn.Sequential(*blocks)

    # The two variants differ only in how features are computed; the public methods check the
    # points first, so the subclasses' hooks receive valid ones.
    def _features(self, pts: Tensor, gates) -> Tensor:
        raise NotImplementedError

    def _tap_features(self, tap_pts: Tensor, gates) -> Tensor:
        raise NotImplementedError

    def _features_with_taps(self, pts: Tensor, tap_pts: Tensor, gates) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _check_points(self, method: str, name: str, pts) -> None:
        """Points must be ``[B, 3]`` tensors of the parameters' dtype and device: the ops would
        otherwise report a mismatch on the module's internal rotations or planes."""
        op = f"{self._op_name}.{method}"
        if not isinstance(pts, Tensor):
            raise TypeError(f"{op}(): expected {name} to be a torch.Tensor, but got "
                            f"{type(pts).__name__}")
        if pts.dim() != 2 or pts.shape[1] != 3:
            raise ValueError(f"{op}(): expected {name} to have shape [B, 3], but got shape "
                             f"{list(pts.shape)}")
        reference = self.planes[0]
        if pts.dtype != reference.dtype:
            raise TypeError(f"{op}(): expected {name} to have dtype {reference.dtype} (the "
                            f"module's dtype), but got {pts.dtype}")
        if pts.device != reference.device:
            raise ValueError(f"{op}(): expected {name} to be on {reference.device} (the module's "
                             f"device), but got {pts.device}")

    def features(self, pts: Tensor, gates: Sequence[float] | Tensor | None = None) -> Tensor:
        """Raw features ``[B, F]`` of points ``pts [B, 3]`` (``F = num_features``): one fused op
        call, differentiable to the points and every field parameter (not the decoder's).

        Args:
            pts: ``[B, 3]`` points of the module's dtype and device. Differentiable.
            gates: optional per-level constant factors (a sequence of L floats or a tensor
                without grad), as in :func:`fieldfuse.kplanes_tilted`.
        """
        self._check_points("features", "pts", pts)
        return self._features(pts, gates)

    def _activate(self, x: Tensor) -> Tensor:
        if self.activation == "softplus":
            return F.softplus(x - 1.0)
        if self.activation == "exp":
            return torch.exp(torch.clamp(x, max=EXP_INPUT_MAX))
        return x

    def decode(self, features: Tensor) -> Tensor:
        """Decoder then activation: ``[..., F]`` features → ``[..., out_features]`` densities."""
        return self._activate(self.decoder(features))

    def forward(self, pts: Tensor, gates: Sequence[float] | Tensor | None = None) -> Tensor:
        """Densities ``[B, out_features]`` at points ``pts [B, 3]`` (see the class docstring)."""
        return self.decode(self.features(pts, gates))

    @property
    def tap_step(self) -> float:
        """The volume-TV tap step ``h = 2 / min(resolution)`` of the finest level.

        The finest level is the one whose smaller side is largest; h is one of its cells measured
        along that smaller side (specs/kplanes.md), e.g. 0.01 for 200² planes.
        """
        return 2.0 / max(min(height, width) for height, width in self.resolutions)

    def tv_tap_coords(
        self, pts: Tensor, n_max: int = 10000, generator: torch.Generator | None = None
    ) -> Tensor:
        """Base points for the volume-TV taps: a random subset of at most ``n_max`` of ``pts``.

        Args:
            pts: ``[B, 3]`` points (e.g. a training batch's ray samples).
            n_max: the most points to keep (specs/kplanes.md uses 10 000 per step).
            generator: optional generator for the subset; a CPU generator works for any device.

        Returns:
            ``[min(B, n_max), 3]`` rows of ``pts`` (all of them, in order, when ``B <= n_max``;
            otherwise distinct rows in random order), detached: the TV term regularises the
            field, not the points (nor any pose they depend on).
        """
        self._check_points("tv_tap_coords", "pts", pts)
        n_max = _check_int(f"{self._op_name}.tv_tap_coords", "n_max", n_max, 0)
        pts = pts.detach()
        count = pts.shape[0]
        if count <= n_max:
            return pts
        index_device = generator.device if generator is not None else pts.device
        index = torch.randperm(count, generator=generator, device=index_device)[:n_max]
        return pts[index.to(pts.device)]

    def tv_tap_densities(
        self, tap_pts: Tensor, gates: Sequence[float] | Tensor | None = None
    ) -> Tensor:
        """Densities at the four taps of each point: ``[4, N, out_features]``.

        Tap 0 is ``forward(tap_pts)``, tap i = 1..3 is the density at ``tap_pts + h·e_i`` with
        ``h = tap_step``. Prefer :meth:`forward_with_tv_taps` in training (one fused call).

        Args:
            tap_pts: ``[N, 3]`` tap base points of the module's dtype and device. Differentiable.
            gates: as in :meth:`features`.
        """
        self._check_points("tv_tap_densities", "tap_pts", tap_pts)
        return self.decode(self._tap_features(tap_pts, gates))

    def forward_with_tv_taps(
        self, pts: Tensor, tap_pts: Tensor, gates: Sequence[float] | Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """A batch's densities and the volume-TV tap densities from one feature pass.

        The features of ``pts`` and of the four taps of ``tap_pts`` come from one fused op call,
        and one decoder call runs on their concatenation, so the backward accumulates into the
        planes (and the decoder) once instead of twice. The results equal
        ``(forward(pts), tv_tap_densities(tap_pts))`` up to rounding of the decoder's batched
        matrix products.

        Args:
            pts: ``[B, 3]`` points. Differentiable.
            tap_pts: ``[N, 3]`` tap base points (from :meth:`tv_tap_coords`). Differentiable.
            gates: optional per-level gates (floats or a tensor), as in
                :func:`fieldfuse.kplanes_tilted`.

        Returns:
            ``(densities [B, out_features], tap_densities [4, N, out_features])``.
        """
        self._check_points("forward_with_tv_taps", "pts", pts)
        self._check_points("forward_with_tv_taps", "tap_pts", tap_pts)
        features, tap_features = self._features_with_taps(pts, tap_pts, gates)
        batch, taps = features.shape[0], tap_features.shape[1]
        joint = torch.cat([features, tap_features.reshape(4 * taps, features.shape[1])])
        densities = self.decode(joint)
        return densities[:batch], densities[batch:].reshape(4, taps, self.out_features)

    def volume_tv(self, tap_densities: Tensor, weight: float | Tensor = 1.0) -> Tensor:
        """:func:`volume_tv_from_taps` with this field's ``tap_step``: a 0-d loss."""
        return volume_tv_from_taps(tap_densities, self.tap_step, weight)

    def plane_tv(self, norm: str = "mean") -> Tensor:
        """:func:`fieldfuse.plane_tv` of this field's planes (``norm`` ``"mean"`` or
        ``"percell"``): a 0-d loss in the planes' dtype."""
        return _plane_tv(list(self.planes), self.num_tilts, norm)

    def extra_repr(self) -> str:
        return (
            f"num_tilts={self.num_tilts}, channels={self.channels}, "
            f"resolutions={self.resolutions}, out_features={self.out_features}, "
            f"decoder={self.decoder_kind!r}, activation={self.activation!r}, "
            f"channels_last={self.channels_last}, deterministic={self.deterministic}"
        )


# --- public modules -----------------------------------------------------------------------------


class KPlanesTilted(_KPlanesField):
    """Tilted multiscale K-Planes density field with learnable rotations (tomography's field).

    ``features = kplanes_tilted(pts, rotations(), planes, gates)`` (see
    :func:`fieldfuse.kplanes_tilted`: ``r = R_t·p``, planes (r_x, r_y), (r_z, r_x), (r_y, r_z),
    columns level-major, then tilt-major, channel fastest), then ``densities =
    activation(decoder(features))``.

    Args:
        num_tilts: T ≥ 1 rotations, each with its own three planes per level.
        channels: C ≥ 1 channels per plane, or one C_l per level.
        resolutions: one plane size per level: an int (square) or ``(H, W)``. At least one level.
        out_features: decoder outputs per point.
        decoder: ``"linear"`` (one ``nn.Linear``) or ``"mlp"`` (``layers`` hidden
            ``Linear(·, hidden) + ReLU`` blocks, then ``Linear(hidden, out_features)``).
        hidden: MLP width (``"mlp"`` only).
        layers: number of hidden MLP layers, ≥ 1 (``"mlp"`` only).
        activation: ``"softplus"`` (``softplus(x − 1)``), ``"exp"`` (``exp(min(x, 15))``, see
            ``EXP_INPUT_MAX``) or ``"identity"``.
        rotation_param: ``"svd"``: a free ``[T, 3, 3]`` matrix per tilt, mapped to the nearest
            rotation (special orthogonal Procrustes, det +1, :func:`nearest_rotation`) in every
            call; ``"quaternion"``: ``[T, 4]`` quaternions ``(w, x, y, z)`` normalised in every
            call (:func:`quaternion_to_rotation`). Both give exact rotations; the free parameters
            may drift off the manifold, which only rescales their gradients.
        init_rotations: initial ``[T, 3, 3]`` rotations (projected to the nearest rotation first);
            default :func:`default_rotations` (identity for tilt 0, deterministic distinct turns
            of π/5 for the others).
        channels_last: store planes channels-last (read in place by the op; on CUDA NCHW planes
            are copied channels-last into the op's workspace each call, which costs memory and a
            little time); the parameters keep logical shape ``[3T, C, H, W]`` either way.
        dtype: floating dtype of every parameter (default: torch's default dtype). Points passed
            to the module must have the same dtype.
        device: device of every parameter.
        deterministic: bit-reproducible CUDA plane gradients (slower; CPU always is).
        generator: optional CPU generator for the plane initialisation (the decoder uses
            ``nn.Linear``'s default init and the global generator).

    Attributes:
        planes: ``nn.ParameterList`` of L parameters ``[3T, C_l, H_l, W_l]``, init uniform in
            [0.1, 0.5].
        rotation_params: ``[T, 3, 3]`` (svd) or ``[T, 4]`` (quaternion) parameter.
        decoder: the decoder ``nn.Module``.

    Raises:
        ValueError: an unknown ``decoder``, ``activation`` or ``rotation_param``, empty
            ``resolutions``, a size or count < 1, or ``init_rotations`` of the wrong shape.
        TypeError: a non-integer size or count, or ``init_rotations`` not a tensor.
    """

    _op_name = "KPlanesTilted"

    def __init__(
        self,
        num_tilts: int,
        channels: int | Sequence[int],
        resolutions: Sequence[int | tuple[int, int]],
        *,
        out_features: int = 1,
        decoder: str = "linear",
        hidden: int = 64,
        layers: int = 2,
        activation: str = "softplus",
        rotation_param: str = "svd",
        init_rotations: Tensor | None = None,
        channels_last: bool = True,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        op = self._op_name
        num_tilts = _check_int(op, "num_tilts", num_tilts, 1)
        _check_choice(op, "rotation_param", rotation_param, ROTATION_PARAMS)
        super().__init__(
            num_tilts, channels, resolutions, out_features=out_features, decoder=decoder,
            hidden=hidden, layers=layers, activation=activation, channels_last=channels_last,
            dtype=dtype, device=device, deterministic=deterministic, generator=generator,
        )
        self.rotation_param = rotation_param
        if init_rotations is None:
            initial = default_rotations(num_tilts)
        else:
            if not isinstance(init_rotations, Tensor):
                raise TypeError(
                    f"{op}(): expected init_rotations to be a torch.Tensor or None, but got "
                    f"{type(init_rotations).__name__}"
                )
            if init_rotations.shape != (num_tilts, 3, 3):
                raise ValueError(
                    f"{op}(): expected init_rotations to have shape [num_tilts = {num_tilts}, 3, "
                    f"3], but got shape {list(init_rotations.shape)}"
                )
            initial = nearest_rotation(init_rotations.detach().to("cpu", torch.float64))
        if rotation_param == "svd":
            values = initial
        else:
            values = torch.stack([_rotation_to_quaternion(r) for r in initial])
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.rotation_params = nn.Parameter(values.to(device=device, dtype=dtype))

    def rotations(self) -> Tensor:
        """The current rotation matrices ``[T, 3, 3]`` (orthonormal, det +1), differentiable
        with respect to ``rotation_params``."""
        if self.rotation_param == "svd":
            return _NearestRotation.apply(self.rotation_params)
        return quaternion_to_rotation(self.rotation_params)

    def _features(self, pts, gates):
        return kplanes_tilted(pts, self.rotations(), list(self.planes), gates,
                              deterministic=self.deterministic)

    def _tap_features(self, tap_pts, gates):
        return kplanes_tilted_taps(tap_pts, self.rotations(), list(self.planes), self.tap_step,
                                   gates, deterministic=self.deterministic)

    def _features_with_taps(self, pts, tap_pts, gates):
        return kplanes_tilted_with_taps(pts, tap_pts, self.rotations(), list(self.planes),
                                        self.tap_step, gates, deterministic=self.deterministic)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", rotation_param={self.rotation_param!r}"


class KPlanes(_KPlanesField):
    """Axis-aligned multiscale K-Planes density field (no rotations).

    ``features = kplanes(pts, planes, gates)`` (see :func:`fieldfuse.kplanes`: planes (x, y),
    (x, z), (y, z), columns level-major, channel fastest), then ``densities =
    activation(decoder(features))``. Planes are ``[3, C_l, H_l, W_l]``.

    Volume-TV taps: there is no fused tap op for the axis-aligned variant, so
    :meth:`forward_with_tv_taps` and :meth:`tv_tap_densities` evaluate the shifted points
    ``p + h·e_i`` explicitly, with one :func:`fieldfuse.kplanes` call on the concatenation
    ``[pts; tap_pts; tap_pts + h·e_x; tap_pts + h·e_y; tap_pts + h·e_z]`` (still one backward into
    the planes). The shift is done in the points' dtype, so taps 1..3 round like
    ``reference.kplanes.tv_tap_coords``.

    Args:
        channels, resolutions, out_features, decoder, hidden, layers, activation, channels_last,
        dtype, device, deterministic, generator: as in :class:`KPlanesTilted`.

    Raises:
        ValueError, TypeError: as in :class:`KPlanesTilted`.
    """

    _op_name = "KPlanes"

    def __init__(
        self,
        channels: int | Sequence[int],
        resolutions: Sequence[int | tuple[int, int]],
        *,
        out_features: int = 1,
        decoder: str = "linear",
        hidden: int = 64,
        layers: int = 2,
        activation: str = "softplus",
        channels_last: bool = True,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            1, channels, resolutions, out_features=out_features, decoder=decoder, hidden=hidden,
            layers=layers, activation=activation, channels_last=channels_last, dtype=dtype,
            device=device, deterministic=deterministic, generator=generator,
        )

    def _features(self, pts, gates):
        return _kplanes(pts, list(self.planes), gates, deterministic=self.deterministic)

    def _shifted(self, tap_pts: Tensor) -> Tensor:
        """``[4N, 3]``: the tap base points, then their shifts by h along x, y and z."""
        steps = self.tap_step * torch.eye(3, dtype=tap_pts.dtype, device=tap_pts.device)
        return torch.cat([tap_pts] + [tap_pts + steps[i] for i in range(3)])

    def _tap_features(self, tap_pts, gates):
        features = self._features(self._shifted(tap_pts), gates)
        return features.reshape(4, tap_pts.shape[0], features.shape[1])

    def _features_with_taps(self, pts, tap_pts, gates):
        features = self._features(torch.cat([pts, self._shifted(tap_pts)]), gates)
        batch = pts.shape[0]
        return features[:batch], features[batch:].reshape(4, tap_pts.shape[0], features.shape[1])
