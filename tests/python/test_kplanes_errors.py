# SPDX-License-Identifier: Apache-2.0
"""Argument validation of the fieldfuse K-Planes ops: exception types, messages naming the argument.

Every pattern names the op family first (messages start with the op, e.g. "kplanes(): " or
"plane_tv(): "), then the argument the caller passed wrongly, as the public signature spells it.
"""

from __future__ import annotations

import math

import pytest
import torch

import fieldfuse

T = 2  # tilts of the valid inputs below
F = T * 4  # features: one level of C = 4


def _pts(batch=5, **kwargs):
    return torch.rand(batch, 3, **kwargs) * 2 - 1


def _rotations(tilts=T, **kwargs):
    return torch.rand(tilts, 3, 3, **kwargs)


def _level(planes=3 * T, channels=4, height=5, width=6, **kwargs):
    return torch.rand(planes, channels, height, width, **kwargs)


def _call(name, *args, **kwargs):
    return lambda: getattr(fieldfuse, name)(*args, **kwargs)


def _case(case_id, exc, pattern, call, marks=()):
    # (?s): a message may wrap. `kplanes\w*\(\)`: the op (the C++ checks say "kplanes()").
    return pytest.param(exc, f"(?s){pattern}", call, id=case_id, marks=marks)


OP = r"kplanes\w*\(\)"
TILTED = ("kplanes_tilted", "kplanes_tilted_taps", "kplanes_tilted_with_taps")


def _tilted(name, pts, rotations, planes, *rest, **kwargs):
    """Calls op `name` of the tilted family with its own extra arguments filled in validly."""
    if name == "kplanes_tilted":
        return _call(name, pts, rotations, planes, *rest, **kwargs)
    if name == "kplanes_tilted_taps":
        return _call(name, pts, rotations, planes, 0.1, *rest, **kwargs)
    # Valid tap points of pts' dtype, so that only the argument under test is wrong.
    same = isinstance(pts, torch.Tensor) and pts.dtype in (torch.float32, torch.float64)
    tap_pts = _pts(3, dtype=pts.dtype if same else torch.float32)
    return _call(name, pts, tap_pts, rotations, planes, 0.1, *rest, **kwargs)


def _cases():
    for name in TILTED:
        # pts
        for label, pts in {"B2": torch.rand(5, 2), "1d": torch.rand(15),
                           "3d": torch.rand(5, 3, 1)}.items():
            yield _case(f"{name}-pts-{label}", ValueError, rf"{OP}.*\bpts\b.*\[B, 3\]",
                        _tilted(name, pts, _rotations(), [_level()]))
        yield _case(f"{name}-pts-int", TypeError, rf"{OP}.*\bpts\b.*int",
                    _tilted(name, _pts().int(), _rotations(), [_level()]))
        yield _case(f"{name}-pts-float16", TypeError, rf"{OP}.*\bpts\b.*float16",
                    _tilted(name, _pts().half(), _rotations(), [_level()]))
        yield _case(f"{name}-pts-list", TypeError, rf"{OP}.*\bpts\b.*list",
                    _tilted(name, [[0.0, 0.0, 0.0]], _rotations(), [_level()]))
        # rotations
        for label, rot in {"Tx2x3": torch.rand(T, 2, 3), "3x3": torch.rand(3, 3),
                           "Tx3x4": torch.rand(T, 3, 4)}.items():
            yield _case(f"{name}-rotations-{label}", ValueError,
                        rf"{OP}.*\brotations\b.*\[T, 3, 3\]",
                        _tilted(name, _pts(), rot, [_level()]))
        yield _case(f"{name}-rotations-T0", ValueError, rf"{OP}.*\brotations\b",
                    _tilted(name, _pts(), torch.rand(0, 3, 3), [_level(planes=0)]))
        yield _case(f"{name}-rotations-float64", TypeError, rf"{OP}.*\brotations\b.*float64",
                    _tilted(name, _pts(), _rotations(dtype=torch.float64), [_level()]))
        # planes
        yield _case(f"{name}-planes-T-mismatch", ValueError, rf"{OP}.*\bplanes\[0\].*3T",
                    _tilted(name, _pts(), _rotations(), [_level(planes=3 * T + 3)]))
        yield _case(f"{name}-planes-level1-T-mismatch", ValueError, rf"{OP}.*\bplanes\[1\]",
                    _tilted(name, _pts(), _rotations(), [_level(), _level(planes=3)]))
        yield _case(f"{name}-planes-3d", ValueError, rf"{OP}.*\bplanes\[0\]",
                    _tilted(name, _pts(), _rotations(), [torch.rand(3 * T, 5, 6)]))
        yield _case(f"{name}-planes-5d", ValueError, rf"{OP}.*\bplanes\[0\]",
                    _tilted(name, _pts(), _rotations(), [torch.rand(3 * T, 1, 4, 5, 6)]))
        for axis, shape in {"C": (3 * T, 0, 5, 6), "H": (3 * T, 4, 0, 6),
                            "W": (3 * T, 4, 5, 0)}.items():
            yield _case(f"{name}-planes-{axis}0", ValueError, rf"{OP}.*\bplanes\[0\]",
                        _tilted(name, _pts(), _rotations(), [torch.rand(shape)]))
        yield _case(f"{name}-planes-empty-list", ValueError, rf"{OP}.*\bplanes\b",
                    _tilted(name, _pts(), _rotations(), []))
        yield _case(f"{name}-planes-dict", TypeError, rf"{OP}.*\bplanes\b",
                    _tilted(name, _pts(), _rotations(), {"level": _level()}))
        yield _case(f"{name}-planes-entry-not-tensor", TypeError, rf"{OP}.*\bplanes\[1\]",
                    _tilted(name, _pts(), _rotations(), [_level(), [[1.0]]]))
        yield _case(f"{name}-planes-float64-with-float32-pts", TypeError,
                    rf"{OP}.*\bplanes\b.*float64",
                    _tilted(name, _pts(), _rotations(), [_level(dtype=torch.float64)]))
        yield _case(f"{name}-planes-levels-differ", TypeError, rf"{OP}.*\bplanes\[1\].*float64",
                    _tilted(name, _pts(dtype=torch.float64), _rotations(dtype=torch.float64),
                            [_level(dtype=torch.float64), _level(), ]))
        yield _case(f"{name}-planes-int", TypeError, rf"{OP}.*\bplanes\[0\].*int32",
                    _tilted(name, _pts(), _rotations(), [_level().int()]))
        for dtype in (torch.float16, torch.bfloat16):
            yield _case(f"{name}-planes-{dtype}-cpu", NotImplementedError,
                        rf"{OP}.*\bplanes\[0\].*cpu",
                        _tilted(name, _pts(), _rotations(), [_level(dtype=dtype)]))
        # gates
        for label, gates in {"short": [], "long": [1.0, 0.5]}.items():
            yield _case(f"{name}-gates-{label}", ValueError, rf"{OP}.*\bgates\b",
                        _tilted(name, _pts(), _rotations(), [_level()], gates))
        for label, gate in {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.items():
            yield _case(f"{name}-gates-{label}", ValueError, rf"{OP}.*\bgates\[1\]",
                        _tilted(name, _pts(), _rotations(), [_level(), _level()], [1.0, gate]))
        yield _case(f"{name}-gates-string", TypeError, rf"{OP}.*\bgates\b",
                    _tilted(name, _pts(), _rotations(), [_level()], "1"))
        yield _case(f"{name}-gates-tensor-shape", ValueError, rf"{OP}.*\bgates\b",
                    _tilted(name, _pts(), _rotations(), [_level()], torch.ones(2)))
        # features_dtype
        for label, dtype in {"float16": torch.float16, "float64": torch.float64,
                             "int32": torch.int32, "string": "float32"}.items():
            yield _case(f"{name}-features_dtype-{label}", TypeError, rf"{OP}.*\bfeatures_dtype\b",
                        _tilted(name, _pts(), _rotations(), [_level()], features_dtype=dtype))

    # h (taps only), non-finite.
    for h in (math.nan, math.inf, -math.inf):
        yield _case(f"kplanes_tilted_taps-h-{h}", ValueError, rf"{OP}.*\bh\b",
                    _call("kplanes_tilted_taps", _pts(), _rotations(), [_level()], h))
        yield _case(f"kplanes_tilted_with_taps-h-{h}", ValueError, rf"{OP}.*\bh\b",
                    _call("kplanes_tilted_with_taps", _pts(), _pts(3), _rotations(), [_level()], h))

    # tap_pts of the fused call.
    yield _case("kplanes_tilted_with_taps-tap_pts-shape", ValueError,
                rf"{OP}.*\btap_pts\b.*\[N, 3\]",
                _call("kplanes_tilted_with_taps", _pts(), torch.rand(3, 2), _rotations(),
                      [_level()], 0.1))
    yield _case("kplanes_tilted_with_taps-tap_pts-dtype", TypeError,
                rf"{OP}.*\btap_pts\b.*float64",
                _call("kplanes_tilted_with_taps", _pts(), _pts(3, dtype=torch.float64),
                      _rotations(), [_level()], 0.1))
    yield _case("kplanes_tilted_with_taps-tap_pts-list", TypeError, rf"{OP}.*\btap_pts\b",
                _call("kplanes_tilted_with_taps", _pts(), [[0.0, 0.0, 0.0]], _rotations(),
                      [_level()], 0.1))

    # Axis-aligned.
    yield _case("kplanes-pts-B2", ValueError, rf"{OP}.*\bpts\b.*\[B, 3\]",
                _call("kplanes", torch.rand(5, 2), [_level(planes=3)]))
    yield _case("kplanes-pts-int", TypeError, rf"{OP}.*\bpts\b",
                _call("kplanes", _pts().long(), [_level(planes=3)]))
    yield _case("kplanes-planes-3T", ValueError, rf"{OP}.*\bplanes\[0\].*\[3, C, H, W\]",
                _call("kplanes", _pts(), [_level(planes=6)]))
    yield _case("kplanes-planes-empty", ValueError, rf"{OP}.*\bplanes\b",
                _call("kplanes", _pts(), []))
    yield _case("kplanes-planes-H0", ValueError, rf"{OP}.*\bplanes\[0\]",
                _call("kplanes", _pts(), [_level(planes=3, height=0)]))
    yield _case("kplanes-gates-long", ValueError, rf"{OP}.*\bgates\b",
                _call("kplanes", _pts(), [_level(planes=3)], [1.0, 1.0]))
    yield _case("kplanes-features_dtype", TypeError, rf"{OP}.*\bfeatures_dtype\b",
                _call("kplanes", _pts(), [_level(planes=3)], features_dtype=torch.bfloat16))

    # plane_tv.
    tv = r"plane_tv\(\)"
    for norm in ("sum", "", "Mean", None):
        yield _case(f"plane_tv-norm-{norm}", ValueError, rf"{tv}.*\bnorm\b",
                    _call("plane_tv", [_level()], T, norm))
    yield _case("plane_tv-num_tilts-mismatch", ValueError, rf"{tv}.*\bnum_tilts\b",
                _call("plane_tv", [_level()], T + 1))
    yield _case("plane_tv-num_tilts-mismatch-level1", ValueError, rf"{tv}.*\bplanes\[1\]",
                _call("plane_tv", [_level(), _level(planes=3)], T))
    yield _case("plane_tv-num_tilts-0", ValueError, rf"{tv}.*\bnum_tilts\b",
                _call("plane_tv", [_level(planes=0)], 0))
    yield _case("plane_tv-num_tilts-negative", ValueError, rf"{tv}.*\bnum_tilts\b",
                _call("plane_tv", [_level()], -2))
    for label, bad in {"float": 2.0, "bool": True, "tensor": torch.tensor(2)}.items():
        yield _case(f"plane_tv-num_tilts-{label}", TypeError, rf"{tv}.*\bnum_tilts\b",
                    _call("plane_tv", [_level()], bad))
    yield _case("plane_tv-planes-empty", ValueError, rf"{tv}.*\bplanes\b",
                _call("plane_tv", [], T))
    yield _case("plane_tv-planes-3d", ValueError, rf"{tv}.*\bplanes\[0\]",
                _call("plane_tv", [torch.rand(3 * T, 5, 6)], T))
    yield _case("plane_tv-planes-int", TypeError, rf"{tv}.*\bplanes\[0\]",
                _call("plane_tv", [_level().int()], T))
    yield _case("plane_tv-planes-levels-differ", TypeError, rf"{tv}.*\bplanes\[1\]",
                _call("plane_tv", [_level(), _level(dtype=torch.float64)], T))
    yield _case("plane_tv-planes-float16-cpu", NotImplementedError, rf"{tv}.*\bplanes\[0\]",
                _call("plane_tv", [_level(dtype=torch.float16)], T))


@pytest.mark.parametrize("exc,pattern,call", list(_cases()))
def test_invalid_arguments_raise(exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call()


# --- raw ops ------------------------------------------------------------------------------------


def _raw_backward(grad_features, grad_tap_features, tap_pts=None):
    return lambda: torch.ops.fieldfuse.kplanes_backward(
        grad_features, grad_tap_features, _pts(), tap_pts, _rotations(), [_level()], None, 0.1,
        [True, tap_pts is not None, True, True], False,
    )


@pytest.mark.parametrize(
    "exc,pattern,call",
    [
        _case("grad_features-shape", ValueError, rf"{OP}.*\bgrad_features\b",
              _raw_backward(torch.ones(5, F + 1), torch.zeros(4, 0, F + 1))),
        _case("grad_features-dtype", TypeError, rf"{OP}.*\bgrad_features\b",
              _raw_backward(torch.ones(5, F, dtype=torch.float64),
                            torch.zeros(4, 0, F, dtype=torch.float64))),
        _case("grad_tap_features-shape", ValueError, rf"{OP}.*\bgrad_tap_features\b",
              _raw_backward(torch.ones(5, F), torch.ones(4, 2, F), tap_pts=_pts(3))),
        _case("grad_tap_features-dtype", TypeError, rf"{OP}.*\bgrad_tap_features\b",
              _raw_backward(torch.ones(5, F), torch.ones(4, 3, F, dtype=torch.float64),
                            tap_pts=_pts(3))),
        _case("plane_tv_backward-grad_out", ValueError, r"plane_tv\w*\(\).*\bgrad_out\b",
              lambda: torch.ops.fieldfuse.plane_tv_backward([_level()], T, "mean",
                                                            torch.ones(3))),
    ],
)
def test_raw_ops_check_upstream_gradients(exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call()


# --- devices (CUDA only) ------------------------------------------------------------------------

requires_cuda = [pytest.mark.cuda,
                 pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _device_cases():
    def cuda(f):
        return lambda **kw: f(device="cuda", **kw)

    pts, rot, level = cuda(_pts), cuda(_rotations), cuda(_level)
    yield "rotations", lambda: fieldfuse.kplanes_tilted(pts(), _rotations(), [level()])
    yield "pts", lambda: fieldfuse.kplanes_tilted(_pts(), rot(), [level()])
    yield r"planes\[0\]", lambda: fieldfuse.kplanes_tilted(pts(), rot(), [_level()])
    yield r"planes\[1\]", lambda: fieldfuse.kplanes_tilted(pts(), rot(), [level(), _level()])
    yield r"planes\[0\]", lambda: fieldfuse.kplanes(pts(), [_level(planes=3)])
    yield "tap_pts", lambda: fieldfuse.kplanes_tilted_with_taps(pts(), _pts(3), rot(), [level()],
                                                                0.1)
    yield r"planes\[1\]", lambda: fieldfuse.plane_tv([level(), _level()], T)


@pytest.mark.parametrize(
    "arg,call",
    [pytest.param(arg, call, id=f"{i}-{arg}", marks=requires_cuda)
     for i, (arg, call) in enumerate(_device_cases())],
)
def test_mismatched_devices_raise(arg, call):
    with pytest.raises(ValueError, match=rf"(?s)(kplanes\w*|plane_tv)\(\).*\b{arg}.*device"):
        call()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_16bit_planes_need_float32_points(half):
    pts = _pts(dtype=torch.float64, device="cuda")
    rotations = _rotations(dtype=torch.float64, device="cuda")
    with pytest.raises(TypeError, match=rf"(?s){OP}.*\bplanes\b.*float32"):
        fieldfuse.kplanes_tilted(pts, rotations, [_level(dtype=half, device="cuda")])
    # features_dtype may be the planes' 16-bit dtype, nothing else narrower than pts.
    with pytest.raises(TypeError, match=rf"(?s){OP}.*\bfeatures_dtype\b"):
        fieldfuse.kplanes_tilted(pts.float(), rotations.float(),
                                 [_level(dtype=half, device="cuda")], features_dtype=torch.float64)
