# SPDX-License-Identifier: Apache-2.0
r"""Argument validation of the fieldfuse render ops: exception types, messages naming the argument.

Every pattern anchors the exact public name at the start of the message (e.g.
"^volume_render\(\): "), then names the argument the caller passed wrongly, as the public signature
spells it. Each case runs on the CPU
and, when there is one, on CUDA, where the offsets are checked in Python before the kernel runs.
"""

from __future__ import annotations

import math

import pytest
import torch

import fieldfuse
from device_params import DEVICES, HAS_CUDA

F32, F64, I64 = torch.float32, torch.float64, torch.int64

RENDER = r"^volume_render\(\): "
ALPHA = r"^volume_render_alpha\(\): "
LINE = r"^line_integral\(\): "
BEAM = r"^parallel_beam_rays\(\): "

LENGTHS = [3, 0, 4]  # R = 3 rays, N = 7 samples
N, R, C = 7, 3, 2


def _offsets(values, device, dtype=I64):
    return torch.tensor(values, dtype=dtype, device=device)


def _render_args(device, dtype=F64):
    """Valid volume_render arguments, by name."""
    return {
        "sigmas": torch.rand(N, dtype=dtype, device=device),
        "rgbs": torch.rand(N, C, dtype=dtype, device=device),
        "delta_ts": torch.full((N,), 0.1, dtype=dtype, device=device),
        "ts": torch.arange(N, dtype=dtype, device=device) / 10,
        "offsets": _offsets([0, 3, 3, 7], device),
        "transmittance_thresh": 0.01,
        "background": torch.rand(C, dtype=dtype, device=device),
        "prefix_transmittance": torch.rand(R, dtype=dtype, device=device),
    }


def _volume_render(**changes):
    def call(device):
        args = _render_args(device)
        args.update({k: v(device) if callable(v) else v for k, v in changes.items()})
        return fieldfuse.volume_render(**args)

    return call


def _render_backward(ray_state):
    """The backward op with one ray state, all else valid."""
    def call(device):
        args = _render_args(device)
        grad = torch.ones(R, C, dtype=F64, device=device)
        return torch.ops.fieldfuse.volume_render_backward(
            args["sigmas"], args["rgbs"], args["delta_ts"], None, args["offsets"], 0.01, None,
            None, grad, None, None, None, None, ray_state(device),
            True, False, False, False, False, False)

    return call


def _volume_render_alpha(**changes):
    def call(device):
        args = _render_args(device)
        args["alphas"] = args.pop("sigmas").clamp(max=0.5)
        del args["delta_ts"]
        args.update({k: v(device) if callable(v) else v for k, v in changes.items()})
        return fieldfuse.volume_render_alpha(**args)

    return call


def _parallel_beam_rays(**changes):
    def call(device):
        args = {
            "rotations": torch.eye(3, dtype=F64, device=device).expand(2, 3, 3),
            "shifts": torch.zeros(2, 3, dtype=F64, device=device),
            "detector_size": 3,
        }
        args.update({k: v(device) if callable(v) else v for k, v in changes.items()})
        return fieldfuse.parallel_beam_rays(**args)

    return call


def _line_integral(**changes):
    def call(device):
        args = {
            "values": torch.rand(N, C, dtype=F64, device=device),
            "delta_ts": torch.full((N,), 0.1, dtype=F64, device=device),
            "offsets": _offsets([0, 3, 3, 7], device),
        }
        args.update({k: v(device) if callable(v) else v for k, v in changes.items()})
        return fieldfuse.line_integral(**args)

    return call


def _ray_box(name, **changes):
    def call(device):
        args = {
            "origins": torch.zeros(4, 3, dtype=F64, device=device),
            "directions": torch.tensor([[0.0, 0.0, 1.0]] * 4, dtype=F64, device=device),
            "ds": 0.1,
        }
        args.update({k: v(device) if callable(v) else v for k, v in changes.items()})
        return getattr(fieldfuse, name)(**args)

    return call


def _tensor(*shape, dtype=F64):
    return lambda device: torch.rand(shape, device=device).to(dtype)


def _case(case_id, exc, pattern, call, marks=()):
    # (?s): a message may wrap.
    return pytest.param(exc, f"(?s){pattern}", call, id=case_id, marks=marks)


def _offsets_cases(prefix, op, make):
    """The bad offsets every packed op rejects (N = 7 samples over R = 3 rays)."""
    bad = lambda values, dtype=I64: lambda d: _offsets(values, d, dtype)  # noqa: E731
    yield _case(f"{prefix}-offsets-decreasing", ValueError, rf"{op}.*\boffsets\b.*non-decreasing",
                make(offsets=bad([0, 5, 3, 7])))
    yield _case(f"{prefix}-offsets-last-short", ValueError, rf"{op}.*\boffsets\[-1\].*\b7\b",
                make(offsets=bad([0, 3, 3, 6])))
    yield _case(f"{prefix}-offsets-last-long", ValueError, rf"{op}.*\boffsets\[-1\].*\b7\b",
                make(offsets=bad([0, 3, 3, 8])))
    yield _case(f"{prefix}-offsets-first", ValueError, rf"{op}.*\boffsets\[0\]",
                make(offsets=bad([1, 3, 3, 7])))
    yield _case(f"{prefix}-offsets-negative-first", ValueError, rf"{op}.*\boffsets\[0\]",
                make(offsets=bad([-2, 3, 3, 7])))
    yield _case(f"{prefix}-offsets-int32", TypeError, rf"{op}.*\boffsets\b.*int64",
                make(offsets=bad([0, 3, 3, 7], torch.int32)))
    yield _case(f"{prefix}-offsets-float", TypeError, rf"{op}.*\boffsets\b.*int64",
                make(offsets=bad([0, 3, 3, 7], F32)))
    yield _case(f"{prefix}-offsets-2d", ValueError, rf"{op}.*\boffsets\b.*\[R \+ 1\]",
                make(offsets=lambda d: _offsets([[0, 3], [3, 7]], d)))
    yield _case(f"{prefix}-offsets-empty", ValueError, rf"{op}.*\boffsets\b",
                make(offsets=lambda d: _offsets([], d)))
    yield _case(f"{prefix}-offsets-list", TypeError, rf"{op}.*\boffsets\b.*Tensor",
                make(offsets=[0, 3, 3, 7]))
    # Unvalidated calls still get fieldfuse's errors, not torch's from the output allocation.
    yield _case(f"{prefix}-offsets-empty-unvalidated", ValueError,
                rf"{op}.*\boffsets\b.*\[R \+ 1\]", make(offsets=lambda d: _offsets([], d),
                                                       validate=False))
    yield _case(f"{prefix}-offsets-0d-unvalidated", ValueError,
                rf"{op}.*\boffsets\b.*\[R \+ 1\]", make(offsets=lambda d: _offsets(7, d),
                                                       validate=False))


def _threshold_cases(prefix, op, make):
    for value in (-0.1, 1.0, 1.5, math.nan, math.inf):
        yield _case(f"{prefix}-threshold-{value}", ValueError, rf"{op}.*transmittance_thresh",
                    make(transmittance_thresh=value))
    for value in (None, "0.1", True):
        yield _case(f"{prefix}-threshold-{value!r}", TypeError,
                    rf"{op}expected transmittance_thresh to be a real number",
                    make(transmittance_thresh=value))


def _cases():
    # --- volume_render ---
    yield from _offsets_cases("render", RENDER, _volume_render)
    yield from _threshold_cases("render", RENDER, _volume_render)
    yield _case("render-rgbs-rows", ValueError, rf"{RENDER}.*\brgbs\b.*\[6, 2\]",
                _volume_render(rgbs=_tensor(6, C)))
    yield _case("render-rgbs-1d", ValueError, rf"{RENDER}.*\brgbs\b.*\[N, C\]",
                _volume_render(rgbs=_tensor(N)))
    yield _case("render-zero-channels", ValueError, rf"{RENDER}.*\brgbs\b.*C >= 1",
                _volume_render(rgbs=_tensor(N, 0), background=None))
    yield _case("render-delta-length", ValueError, rf"{RENDER}.*\bdelta_ts\b.*\[6\]",
                _volume_render(delta_ts=_tensor(6)))
    yield _case("render-delta-2d", ValueError, rf"{RENDER}.*\bdelta_ts\b",
                _volume_render(delta_ts=_tensor(N, 1)))
    yield _case("render-ts-length", ValueError, rf"{RENDER}.*\bts\b.*\[8\]",
                _volume_render(ts=_tensor(8)))
    yield _case("render-background-channels", ValueError, rf"{RENDER}.*\bbackground\b.*\[3\]",
                _volume_render(background=_tensor(3)))
    yield _case("render-background-rays", ValueError, rf"{RENDER}.*\bbackground\b.*\[2, 2\]",
                _volume_render(background=_tensor(2, C)))
    yield _case("render-background-3d", ValueError, rf"{RENDER}.*\bbackground\b",
                _volume_render(background=_tensor(R, C, 1)))
    yield _case("render-prefix-length", ValueError, rf"{RENDER}.*\bprefix_transmittance\b.*\[2\]",
                _volume_render(prefix_transmittance=_tensor(2)))
    yield _case("render-prefix-2d", ValueError, rf"{RENDER}.*\bprefix_transmittance\b",
                _volume_render(prefix_transmittance=_tensor(R, 1)))
    yield _case("render-sigmas-2d", ValueError, rf"{RENDER}.*\bsigmas\b.*\[7, 1\]",
                _volume_render(sigmas=_tensor(N, 1)))
    yield _case("render-sigmas-0d", ValueError, rf"{RENDER}.*\bsigmas\b.*\[N\]",
                _volume_render(sigmas=_tensor()))
    yield _case("render-rgbs-3d", ValueError, rf"{RENDER}.*\brgbs\b.*\[N, C\]",
                _volume_render(rgbs=_tensor(N, C, 1)))
    yield _case("render-sigmas-int", TypeError, rf"{RENDER}.*\bsigmas\b.*int32",
                _volume_render(sigmas=_tensor(N, dtype=torch.int32)))
    yield _case("render-sigmas-list", TypeError, rf"{RENDER}.*\bsigmas\b.*Tensor",
                _volume_render(sigmas=[0.5] * N))
    yield _case("render-rgbs-dtype", TypeError, rf"{RENDER}.*\brgbs\b.*float32",
                _volume_render(rgbs=_tensor(N, C, dtype=F32)))
    yield _case("render-background-dtype", TypeError, rf"{RENDER}.*\bbackground\b.*float32",
                _volume_render(background=_tensor(C, dtype=F32)))
    yield _case("render-background-list", TypeError, rf"{RENDER}.*\bbackground\b.*Tensor",
                _volume_render(background=[0.5, 0.5]))
    yield _case("render-delta-none", TypeError, rf"{RENDER}.*\bdelta_ts\b.*Tensor",
                _volume_render(delta_ts=None))

    # --- volume_render_alpha: the opacities are the argument `alphas` ---
    yield from _offsets_cases("alpha", ALPHA, _volume_render_alpha)
    yield from _threshold_cases("alpha", ALPHA, _volume_render_alpha)
    yield _case("alpha-alphas-2d", ValueError, rf"{ALPHA}.*\balphas\b",
                _volume_render_alpha(alphas=_tensor(N, 1)))
    yield _case("alpha-alphas-int", TypeError, rf"{ALPHA}.*\balphas\b",
                _volume_render_alpha(alphas=_tensor(N, dtype=torch.int32)))
    yield _case("alpha-alphas-list", TypeError, rf"{ALPHA}.*\balphas\b",
                _volume_render_alpha(alphas=[0.5] * N))
    yield _case("alpha-rgbs-rows", ValueError, rf"{ALPHA}.*\brgbs\b",
                _volume_render_alpha(rgbs=_tensor(8, C)))
    yield _case("alpha-zero-channels", ValueError, rf"{ALPHA}.*\brgbs\b.*C >= 1",
                _volume_render_alpha(rgbs=_tensor(N, 0), background=None))
    yield _case("alpha-ts-length", ValueError, rf"{ALPHA}.*\bts\b",
                _volume_render_alpha(ts=_tensor(6)))
    yield _case("alpha-background", ValueError, rf"{ALPHA}.*\bbackground\b",
                _volume_render_alpha(background=_tensor(R + 1, C)))
    yield _case("alpha-prefix", ValueError, rf"{ALPHA}.*\bprefix_transmittance\b",
                _volume_render_alpha(prefix_transmittance=_tensor(R + 1)))

    # --- line_integral ---
    yield from _offsets_cases("line", LINE, _line_integral)
    yield _case("line-delta-length", ValueError, rf"{LINE}.*\bdelta_ts\b.*\[6\]",
                _line_integral(delta_ts=_tensor(6)))
    yield _case("line-values-3d", ValueError, rf"{LINE}.*\bvalues\b.*\[N\] or \[N, C\]",
                _line_integral(values=_tensor(N, 2, 2)))
    yield _case("line-zero-channels", ValueError, rf"{LINE}.*\bvalues\b.*C >= 1",
                _line_integral(values=_tensor(N, 0)))
    yield _case("line-values-int", TypeError, rf"{LINE}.*\bvalues\b.*int64",
                _line_integral(values=_tensor(N, dtype=I64)))
    yield _case("line-delta-dtype", TypeError, rf"{LINE}.*\bdelta_ts\b.*float32",
                _line_integral(delta_ts=_tensor(N, dtype=F32)))
    yield _case("line-values-list", TypeError, rf"{LINE}.*\bvalues\b.*Tensor",
                _line_integral(values=[1.0] * N))

    # --- the backward's ray state (internal: from the training forward) ---
    yield _case("state-shape", ValueError, r"^volume_render_backward\(\): .*\bray_state\b.*\[3, 4\]",
                _render_backward(ray_state=_tensor(R, 3)))
    yield _case("state-dtype", TypeError, r"^volume_render_backward\(\): .*\bray_state\b.*float64",
                _render_backward(ray_state=_tensor(R, 4, dtype=F32)))

    # --- ray_box_samples and ray_box_samples_padded: each names its own errors ---
    for name in ("ray_box_samples", "ray_box_samples_padded"):
        short = "box" if name == "ray_box_samples" else "padded"
        box = rf"^{name}\(\): "
        for ds in (0.0, -0.1, math.nan, math.inf):
            yield _case(f"{short}-ds-{ds}", ValueError, rf"{box}.*\bds\b",
                        _ray_box(name, ds=ds))
        # 2√3/1e-300 samples per ray: the count must not wrap around int64.
        yield _case(f"{short}-ds-tiny", ValueError, rf"{box}.*\bds\b.*int64.*1e-300",
                    _ray_box(name, ds=1e-300))
        for ds in (None, "0.1"):
            yield _case(f"{short}-ds-{ds!r}", TypeError, rf"{box}expected ds to be a real number",
                        _ray_box(name, ds=ds))
        yield _case(f"{short}-origins-r2", ValueError, rf"{box}.*\borigins\b.*\[R, 3\].*\[4, 2\]",
                    _ray_box(name, origins=_tensor(4, 2)))
        yield _case(f"{short}-origins-1d", ValueError, rf"{box}.*\borigins\b.*\[R, 3\]",
                    _ray_box(name, origins=_tensor(3)))
        yield _case(f"{short}-origins-0d", ValueError, rf"{box}.*\borigins\b.*\[R, 3\]",
                    _ray_box(name, origins=_tensor()))
        yield _case(f"{short}-origins-3d", ValueError, rf"{box}.*\borigins\b.*\[R, 3\]",
                    _ray_box(name, origins=_tensor(4, 3, 1)))
        yield _case(f"{short}-directions-rows", ValueError, rf"{box}.*\bdirections\b.*\[5, 3\]",
                    _ray_box(name, directions=_tensor(5, 3)))
        yield _case(f"{short}-origins-int", TypeError, rf"{box}.*\borigins\b.*int64",
                    _ray_box(name, origins=_tensor(4, 3, dtype=I64)))
        yield _case(f"{short}-directions-dtype", TypeError, rf"{box}.*\bdirections\b.*float32",
                    _ray_box(name, directions=_tensor(4, 3, dtype=F32)))
        yield _case(f"{short}-origins-list", TypeError, rf"{box}.*\borigins\b.*Tensor",
                    _ray_box(name, origins=[[0.0, 0.0, 0.0]]))

    # --- tilt-series helpers ---
    yield _case("tilt-axis", ValueError, r"^tilt_rotations\(\): .*\baxis\b",
                lambda d: fieldfuse.tilt_rotations(torch.zeros(2, device=d), "w"))
    for size in (0, -3):
        yield _case(f"beam-detector-size-{size}", ValueError, rf"{BEAM}.*\bdetector_size\b.*>= 1",
                    _parallel_beam_rays(detector_size=size))
    for size in (2.5, "3", None, True):
        yield _case(f"beam-detector-size-{size!r}", TypeError,
                    rf"{BEAM}.*\bdetector_size\b.*\bint\b", _parallel_beam_rays(detector_size=size))
    yield _case("beam-rotations-shape", ValueError, rf"{BEAM}.*\brotations\b.*\[M, 3, 3\]",
                _parallel_beam_rays(rotations=_tensor(2, 3, 2)))
    yield _case("beam-rotations-2d", ValueError, rf"{BEAM}.*\brotations\b.*\[M, 3, 3\]",
                _parallel_beam_rays(rotations=_tensor(3, 3)))
    yield _case("beam-rotations-int", TypeError, rf"{BEAM}.*\brotations\b.*floating",
                _parallel_beam_rays(rotations=_tensor(2, 3, 3, dtype=I64)))
    yield _case("beam-rotations-list", TypeError, rf"{BEAM}.*\brotations\b.*Tensor",
                _parallel_beam_rays(rotations=[[1.0, 0.0, 0.0]] * 3))
    # Issue 11: one shift per rotation, else origins and directions silently disagree in length.
    yield _case("beam-shifts-count", ValueError, rf"{BEAM}.*\bshifts\b.*\[2, 3\].*\[1, 3\]",
                _parallel_beam_rays(shifts=_tensor(1, 3)))
    yield _case("beam-shifts-1d", ValueError, rf"{BEAM}.*\bshifts\b.*\[M, 3\]",
                _parallel_beam_rays(shifts=_tensor(3)))
    yield _case("beam-shifts-dtype", TypeError, rf"{BEAM}.*\bshifts\b.*float32",
                _parallel_beam_rays(shifts=_tensor(2, 3, dtype=F32)))
    yield _case("beam-shifts-list", TypeError, rf"{BEAM}.*\bshifts\b.*Tensor",
                _parallel_beam_rays(shifts=[0.0, 0.0, 0.0]))


CASES = list(_cases())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("exc,pattern,call", CASES)
def test_bad_argument_is_rejected(device, exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call(device)


# --- dtype and device support -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_16_bit_inputs_are_cuda_only(dtype):
    args = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in _render_args("cpu").items()}
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(NotImplementedError, match=rf"(?s){RENDER}.*\bsigmas\b.*{name}"):
        fieldfuse.volume_render(**args)
    with pytest.raises(NotImplementedError, match=rf"(?s){LINE}.*\bvalues\b"):
        fieldfuse.line_integral(args["rgbs"], args["delta_ts"], args["offsets"])
    origins = torch.zeros(2, 3, dtype=dtype)
    with pytest.raises(NotImplementedError, match=r"(?s)^ray_box_samples\(\): .*\borigins\b"):
        fieldfuse.ray_box_samples(origins, origins, 0.1)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("name", ["offsets", "rgbs", "background", "prefix_transmittance"])
def test_mixed_devices_name_the_argument(name):
    args = _render_args("cuda")
    args[name] = args[name].cpu()
    with pytest.raises((ValueError, RuntimeError), match=rf"(?s){RENDER}.*\b{name}\b"):
        fieldfuse.volume_render(**args)


@pytest.mark.parametrize("device", DEVICES)
def test_valid_arguments_are_accepted(device):
    # The baseline every case above departs from is itself valid.
    assert _volume_render()(device).rgb.shape == (R, C)
    assert _volume_render_alpha()(device).rgb.shape == (R, C)
    assert _line_integral()(device).shape == (R, C)
    _, _, offsets = _ray_box("ray_box_samples")(device)
    assert offsets.tolist() == [0, 21, 42, 63, 84]
    assert _ray_box("ray_box_samples_padded")(device)[2].sum().item() == 84
    assert _parallel_beam_rays()(device)[0].shape == (2 * 3 * 3, 3)
