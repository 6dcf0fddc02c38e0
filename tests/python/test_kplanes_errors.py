# SPDX-License-Identifier: Apache-2.0
"""Argument validation of the fieldfuse K-Planes ops: exception types, messages naming the argument.

Every message starts with the exact public name of the function called (`kplanes_tilted_taps(): `,
never a sibling's such as `kplanes(): `), then names the argument the caller passed wrongly, as the
public signature spells it.
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
    """`pattern` starts with the op's exact public name; the message must start with `name(): `
    (a sibling's name such as `kplanes` must not pass for `kplanes_tilted`)."""
    name, rest = pattern.split(".*", 1)
    # (?s): a message may wrap; every pattern names the op first, then the argument.
    return pytest.param(exc, rf"(?s)^{name}\(\): .*{rest}", call, id=case_id, marks=marks)

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
            yield _case(f"{name}-pts-{label}", ValueError, rf"{name}.*\bpts\b.*\[B, 3\]",
                        _tilted(name, pts, _rotations(), [_level()]))
        # Issue 10: a complex pts once raised "kplanes(): ..." from kplanes_tilted.
        yield _case(f"{name}-pts-complex", TypeError, rf"{name}.*\bpts\b",
                    _tilted(name, torch.rand(5, 3, dtype=torch.complex64), _rotations(),
                            [_level()]))
        # Issue 11: a 0-d pts once raised an IndexError from the output allocation.
        yield _case(f"{name}-pts-0d", ValueError, rf"{name}.*\bpts\b.*\[B, 3\].*\[\]",
                    _tilted(name, torch.tensor(0.5), _rotations(), [_level()]))
        yield _case(f"{name}-pts-int", TypeError, rf"{name}.*\bpts\b.*int",
                    _tilted(name, _pts().int(), _rotations(), [_level()]))
        yield _case(f"{name}-pts-float16", TypeError, rf"{name}.*\bpts\b.*float16",
                    _tilted(name, _pts().half(), _rotations(), [_level()]))
        yield _case(f"{name}-pts-list", TypeError, rf"{name}.*\bpts\b.*list",
                    _tilted(name, [[0.0, 0.0, 0.0]], _rotations(), [_level()]))
        # rotations
        for label, rot in {"Tx2x3": torch.rand(T, 2, 3), "3x3": torch.rand(3, 3),
                           "Tx3x4": torch.rand(T, 3, 4)}.items():
            yield _case(f"{name}-rotations-{label}", ValueError,
                        rf"{name}.*\brotations\b.*\[T, 3, 3\]",
                        _tilted(name, _pts(), rot, [_level()]))
        yield _case(f"{name}-rotations-T0", ValueError, rf"{name}.*\brotations\b",
                    _tilted(name, _pts(), torch.rand(0, 3, 3), [_level(planes=0)]))
        yield _case(f"{name}-rotations-float64", TypeError, rf"{name}.*\brotations\b.*float64",
                    _tilted(name, _pts(), _rotations(dtype=torch.float64), [_level()]))
        # planes
        yield _case(f"{name}-planes-T-mismatch", ValueError, rf"{name}.*\bplanes\[0\].*3T",
                    _tilted(name, _pts(), _rotations(), [_level(planes=3 * T + 3)]))
        yield _case(f"{name}-planes-level1-T-mismatch", ValueError, rf"{name}.*\bplanes\[1\]",
                    _tilted(name, _pts(), _rotations(), [_level(), _level(planes=3)]))
        yield _case(f"{name}-planes-3d", ValueError, rf"{name}.*\bplanes\[0\]",
                    _tilted(name, _pts(), _rotations(), [torch.rand(3 * T, 5, 6)]))
        yield _case(f"{name}-planes-5d", ValueError, rf"{name}.*\bplanes\[0\]",
                    _tilted(name, _pts(), _rotations(), [torch.rand(3 * T, 1, 4, 5, 6)]))
        for axis, shape in {"C": (3 * T, 0, 5, 6), "H": (3 * T, 4, 0, 6),
                            "W": (3 * T, 4, 5, 0)}.items():
            yield _case(f"{name}-planes-{axis}0", ValueError, rf"{name}.*\bplanes\[0\]",
                        _tilted(name, _pts(), _rotations(), [torch.rand(shape)]))
        yield _case(f"{name}-planes-empty-list", ValueError, rf"{name}.*\bplanes\b",
                    _tilted(name, _pts(), _rotations(), []))
        yield _case(f"{name}-planes-dict", TypeError, rf"{name}.*\bplanes\b",
                    _tilted(name, _pts(), _rotations(), {"level": _level()}))
        yield _case(f"{name}-planes-entry-not-tensor", TypeError, rf"{name}.*\bplanes\[1\]",
                    _tilted(name, _pts(), _rotations(), [_level(), [[1.0]]]))
        yield _case(f"{name}-planes-float64-with-float32-pts", TypeError,
                    rf"{name}.*\bplanes\b.*float64",
                    _tilted(name, _pts(), _rotations(), [_level(dtype=torch.float64)]))
        yield _case(f"{name}-planes-levels-differ", TypeError, rf"{name}.*\bplanes\[1\].*float64",
                    _tilted(name, _pts(dtype=torch.float64), _rotations(dtype=torch.float64),
                            [_level(dtype=torch.float64), _level(), ]))
        yield _case(f"{name}-planes-int", TypeError, rf"{name}.*\bplanes\[0\].*int32",
                    _tilted(name, _pts(), _rotations(), [_level().int()]))
        for dtype in (torch.float16, torch.bfloat16):
            yield _case(f"{name}-planes-{dtype}-cpu", NotImplementedError,
                        rf"{name}.*\bplanes\[0\].*cpu",
                        _tilted(name, _pts(), _rotations(), [_level(dtype=dtype)]))
        # gates
        for label, gates in {"short": [], "long": [1.0, 0.5]}.items():
            yield _case(f"{name}-gates-{label}", ValueError, rf"{name}.*\bgates\b",
                        _tilted(name, _pts(), _rotations(), [_level()], gates))
        for label, gate in {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.items():
            yield _case(f"{name}-gates-{label}", ValueError, rf"{name}.*\bgates\[1\]",
                        _tilted(name, _pts(), _rotations(), [_level(), _level()], [1.0, gate]))
        yield _case(f"{name}-gates-string", TypeError, rf"{name}.*\bgates\b",
                    _tilted(name, _pts(), _rotations(), [_level()], "1"))
        yield _case(f"{name}-gates-tensor-shape", ValueError, rf"{name}.*\bgates\b",
                    _tilted(name, _pts(), _rotations(), [_level()], torch.ones(2)))
        # features_dtype
        for label, dtype in {"float16": torch.float16, "float64": torch.float64,
                             "int32": torch.int32, "string": "float32"}.items():
            yield _case(f"{name}-features_dtype-{label}", TypeError, rf"{name}.*\bfeatures_dtype\b",
                        _tilted(name, _pts(), _rotations(), [_level()], features_dtype=dtype))

    # h (taps only), non-finite.
    for h in (math.nan, math.inf, -math.inf):
        yield _case(f"kplanes_tilted_taps-h-{h}", ValueError, r"kplanes_tilted_taps.*\bh\b",
                    _call("kplanes_tilted_taps", _pts(), _rotations(), [_level()], h))
        yield _case(f"kplanes_tilted_with_taps-h-{h}", ValueError,
                    r"kplanes_tilted_with_taps.*\bh\b",
                    _call("kplanes_tilted_with_taps", _pts(), _pts(3), _rotations(), [_level()], h))

    # tap_pts of the fused call.
    yield _case("kplanes_tilted_with_taps-tap_pts-shape", ValueError,
                rf"kplanes_tilted_with_taps.*\btap_pts\b.*\[N, 3\]",
                _call("kplanes_tilted_with_taps", _pts(), torch.rand(3, 2), _rotations(),
                      [_level()], 0.1))
    yield _case("kplanes_tilted_with_taps-tap_pts-dtype", TypeError,
                rf"kplanes_tilted_with_taps.*\btap_pts\b.*float64",
                _call("kplanes_tilted_with_taps", _pts(), _pts(3, dtype=torch.float64),
                      _rotations(), [_level()], 0.1))
    yield _case("kplanes_tilted_with_taps-tap_pts-list", TypeError, rf"kplanes_tilted_with_taps.*\btap_pts\b",
                _call("kplanes_tilted_with_taps", _pts(), [[0.0, 0.0, 0.0]], _rotations(),
                      [_level()], 0.1))

    # Axis-aligned.
    yield _case("kplanes-pts-B2", ValueError, rf"kplanes.*\bpts\b.*\[B, 3\]",
                _call("kplanes", torch.rand(5, 2), [_level(planes=3)]))
    yield _case("kplanes-pts-0d", ValueError, r"kplanes.*\bpts\b.*\[B, 3\]",
                _call("kplanes", torch.tensor(0.5), [_level(planes=3)]))
    yield _case("kplanes_tilted_with_taps-tap_pts-0d", ValueError,
                r"kplanes_tilted_with_taps.*\btap_pts\b.*\[N, 3\]",
                _call("kplanes_tilted_with_taps", _pts(), torch.tensor(0.5), _rotations(),
                      [_level()], 0.1))
    yield _case("kplanes-pts-int", TypeError, rf"kplanes.*\bpts\b",
                _call("kplanes", _pts().long(), [_level(planes=3)]))
    yield _case("kplanes-planes-3T", ValueError, rf"kplanes.*\bplanes\[0\].*\[3, C, H, W\]",
                _call("kplanes", _pts(), [_level(planes=6)]))
    yield _case("kplanes-planes-empty", ValueError, rf"kplanes.*\bplanes\b",
                _call("kplanes", _pts(), []))
    yield _case("kplanes-planes-H0", ValueError, rf"kplanes.*\bplanes\[0\]",
                _call("kplanes", _pts(), [_level(planes=3, height=0)]))
    yield _case("kplanes-gates-long", ValueError, rf"kplanes.*\bgates\b",
                _call("kplanes", _pts(), [_level(planes=3)], [1.0, 1.0]))
    yield _case("kplanes-features_dtype", TypeError, rf"kplanes.*\bfeatures_dtype\b",
                _call("kplanes", _pts(), [_level(planes=3)], features_dtype=torch.bfloat16))

    # plane_tv.
    tv = "plane_tv"
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


def _raw_tilted_backward(grad_features):
    return lambda: torch.ops.fieldfuse.kplanes_tilted_backward(
        grad_features, _pts(), _rotations(), [_level()], None, [True, True, True], False,
    )


def _raw_with_taps_backward(grad_features, grad_tap_features):
    return lambda: torch.ops.fieldfuse.kplanes_tilted_with_taps_backward(
        grad_features, grad_tap_features, _pts(), _pts(3), _rotations(), [_level()], 0.1, None,
        [True, True, True, True], False,
    )


def _raw_taps_backward(grad_tap_features):
    return lambda: torch.ops.fieldfuse.kplanes_tilted_taps_backward(
        grad_tap_features, _pts(3), _rotations(), [_level()], 0.1, None, [True, True, True], False,
    )


@pytest.mark.parametrize(
    "exc,pattern,call",
    [
        _case("grad_features-shape", ValueError, r"kplanes_tilted_backward.*\bgrad_features\b",
              _raw_tilted_backward(torch.ones(5, F + 1))),
        _case("grad_features-dtype", TypeError, r"kplanes_tilted_backward.*\bgrad_features\b",
              _raw_tilted_backward(torch.ones(5, F, dtype=torch.float64))),
        _case("kplanes-grad_features-shape", ValueError, r"kplanes_backward.*\bgrad_features\b",
              lambda: torch.ops.fieldfuse.kplanes_backward(
                  torch.ones(5, 5), _pts(), [_level(planes=3)], None, [True, True], False)),
        _case("with_taps-grad_tap_features-shape", ValueError,
              r"kplanes_tilted_with_taps_backward.*\bgrad_tap_features\b",
              _raw_with_taps_backward(torch.ones(5, F), torch.ones(4, 2, F))),
        _case("with_taps-grad_tap_features-dtype", TypeError,
              r"kplanes_tilted_with_taps_backward.*\bgrad_tap_features\b",
              _raw_with_taps_backward(torch.ones(5, F), torch.ones(4, 3, F, dtype=torch.float64))),
        _case("taps-grad_tap_features-shape", ValueError,
              r"kplanes_tilted_taps_backward.*\bgrad_tap_features\b.*\[4, 3, 8\]",
              _raw_taps_backward(torch.ones(4, 2, F))),
        _case("plane_tv_backward-grad_out", ValueError, r"plane_tv_backward.*\bgrad_out\b",
              lambda: torch.ops.fieldfuse.plane_tv_backward([_level()], T, "mean",
                                                            torch.ones(3))),
        _case("plane_tv_backward-norm", ValueError, r"plane_tv_backward.*\bnorm\b",
              lambda: torch.ops.fieldfuse.plane_tv_backward([_level()], T, "sum", torch.ones(1))),
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
    tilted = "kplanes_tilted"
    yield tilted, "rotations", lambda: fieldfuse.kplanes_tilted(pts(), _rotations(), [level()])
    yield tilted, "pts", lambda: fieldfuse.kplanes_tilted(_pts(), rot(), [level()])
    yield tilted, r"planes\[0\]", lambda: fieldfuse.kplanes_tilted(pts(), rot(), [_level()])
    yield tilted, r"planes\[1\]", lambda: fieldfuse.kplanes_tilted(pts(), rot(),
                                                                   [level(), _level()])
    yield "kplanes", r"planes\[0\]", lambda: fieldfuse.kplanes(pts(), [_level(planes=3)])
    yield "kplanes_tilted_taps", "rotations", lambda: fieldfuse.kplanes_tilted_taps(
        pts(), _rotations(), [level()], 0.1)
    yield "kplanes_tilted_with_taps", "tap_pts", lambda: fieldfuse.kplanes_tilted_with_taps(
        pts(), _pts(3), rot(), [level()], 0.1)
    yield "plane_tv", r"planes\[1\]", lambda: fieldfuse.plane_tv([level(), _level()], T)


@pytest.mark.parametrize(
    "name,arg,call",
    [pytest.param(name, arg, call, id=f"{i}-{name}-{arg}", marks=requires_cuda)
     for i, (name, arg, call) in enumerate(_device_cases())],
)
def test_mismatched_devices_raise(name, arg, call):
    with pytest.raises(ValueError, match=rf"(?s)^{name}\(\): .*\b{arg}.*device"):
        call()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_16bit_planes_need_float32_points(half):
    pts = _pts(dtype=torch.float64, device="cuda")
    rotations = _rotations(dtype=torch.float64, device="cuda")
    with pytest.raises(TypeError, match=r"(?s)^kplanes_tilted\(\): .*\bplanes\b.*float32"):
        fieldfuse.kplanes_tilted(pts, rotations, [_level(dtype=half, device="cuda")])
    # features_dtype may be the planes' 16-bit dtype, nothing else narrower than pts.
    with pytest.raises(TypeError, match=r"(?s)^kplanes_tilted\(\): .*\bfeatures_dtype\b"):
        fieldfuse.kplanes_tilted(pts.float(), rotations.float(),
                                 [_level(dtype=half, device="cuda")], features_dtype=torch.float64)
