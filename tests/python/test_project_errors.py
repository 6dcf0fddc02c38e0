# SPDX-License-Identifier: Apache-2.0
r"""Argument validation of the fieldfuse projectors: exception types, messages naming the argument.

Every pattern anchors the exact public name at the start of the message ("^project\(\): " or
"^backproject\(\): "), then names the argument as the public signature spells it. Each case runs
on the CPU and, when there is one, on CUDA. The checks of the written outputs, which Python
allocates itself, are tested on the C++ API (tests/cpp/test_project.cpp).
"""

from __future__ import annotations

import pytest
import torch

import fieldfuse
from device_params import DEVICES, HAS_CUDA

F32, F64 = torch.float32, torch.float64
N = 2  # projections


def _args(device, dtype=F64):
    return {
        "volume": torch.rand(3, 4, 5, dtype=dtype, device=device),
        "projections": torch.rand(N, 4, 6, dtype=dtype, device=device),
        "rotations": torch.eye(3, dtype=dtype, device=device).repeat(N, 1, 1),
        "shifts": torch.zeros(N, 2, dtype=dtype, device=device),
    }


def _resolve(device, changes):
    return {k: v(device) if callable(v) else v for k, v in changes.items()}


def _project(**changes):
    def call(device):
        args = _args(device)
        del args["projections"]
        args.update(_resolve(device, changes))
        return fieldfuse.project(**args)

    return call


def _backproject(**changes):
    def call(device):
        args = _args(device)
        del args["volume"]
        args["volume_shape"] = (3, 4, 5)
        args.update(_resolve(device, changes))
        return fieldfuse.backproject(**args)

    return call


def _tensor(*shape, dtype=F64):
    return lambda device: torch.rand(shape, device=device).to(dtype)


def _case(case_id, exc, op, rest, call):
    # (?s): a message may wrap; the op's exact name first, then what must follow.
    return pytest.param(exc, rf"(?s)^{op}\(\): .*{rest}", call, id=case_id)


def _pose_cases(op, make):
    """The bad rotations and shifts both functions reject (n = 2 projections)."""
    yield _case(f"{op}-rotations-shape", ValueError, op, r"\brotations\b.*\[3, 3, 2\]",
                make(rotations=_tensor(3, 3, 2)))
    yield _case(f"{op}-rotations-2d", ValueError, op, r"\brotations\b.*\[3, 3\]",
                make(rotations=_tensor(3, 3)))
    yield _case(f"{op}-rotations-dtype", TypeError, op, r"\brotations\b.*float32",
                make(rotations=_tensor(N, 3, 3, dtype=F32)))
    yield _case(f"{op}-rotations-list", TypeError, op, r"\brotations\b.*Tensor",
                make(rotations=[[1.0, 0.0, 0.0]] * 3))
    yield _case(f"{op}-shifts-count", ValueError, op, r"\bshifts\b.*\[2, 2\].*\[3, 2\]",
                make(shifts=_tensor(3, 2)))
    yield _case(f"{op}-shifts-width", ValueError, op, r"\bshifts\b.*\[2, 3\]",
                make(shifts=_tensor(N, 3)))
    yield _case(f"{op}-shifts-dtype", TypeError, op, r"\bshifts\b.*float32",
                make(shifts=_tensor(N, 2, dtype=F32)))
    yield _case(f"{op}-shifts-list", TypeError, op, r"\bshifts\b.*Tensor",
                make(shifts=[0.0, 0.0]))


def _shape_cases(op, make, arg, count):
    for label, bad in {"negative": [-1] * count, "short": [2] * (count - 1),
                       "long": [2] * (count + 1)}.items():
        yield _case(f"{op}-{arg}-{label}", ValueError, op, rf"\b{arg}\b.*non-negative",
                    make(**{arg: bad}))
    for label, bad in {"float": [2.5] * count, "string": "34", "bool": [True] * count,
                       "int": 3}.items():
        yield _case(f"{op}-{arg}-{label}", TypeError, op, rf"\b{arg}\b.*integers",
                    make(**{arg: bad}))


def _cases():
    # --- project ---
    yield _case("project-volume-2d", ValueError, "project", r"\bvolume\b.*\[D, H, W\].*\[4, 5\]",
                _project(volume=_tensor(4, 5)))
    yield _case("project-volume-4d", ValueError, "project", r"\bvolume\b.*\[D, H, W\]",
                _project(volume=_tensor(1, 3, 4, 5), detector_shape=(4, 5)))
    yield _case("project-volume-int", TypeError, "project", r"\bvolume\b.*int32",
                _project(volume=_tensor(3, 4, 5, dtype=torch.int32)))
    yield _case("project-volume-list", TypeError, "project", r"\bvolume\b.*Tensor",
                _project(volume=[[[0.0]]]))
    for dtype in (torch.float16, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        yield _case(f"project-volume-{name}", NotImplementedError, "project",
                    rf"\bvolume\b.*{name}", _project(volume=_tensor(3, 4, 5, dtype=dtype),
                                                      rotations=_tensor(N, 3, 3, dtype=dtype),
                                                      shifts=None))
    yield from _pose_cases("project", _project)
    yield from _shape_cases("project", _project, "detector_shape", 2)

    # --- backproject ---
    yield _case("backproject-projections-2d", ValueError, "backproject",
                r"\bprojections\b.*\[n, Hd, Wd\].*\[4, 6\]", _backproject(projections=_tensor(4, 6)))
    yield _case("backproject-projections-int", TypeError, "backproject",
                r"\bprojections\b.*int64", _backproject(projections=_tensor(N, 4, 6,
                                                                             dtype=torch.int64)))
    yield _case("backproject-projections-list", TypeError, "backproject",
                r"\bprojections\b.*Tensor", _backproject(projections=[[[0.0]]]))
    yield _case("backproject-rotations-count", ValueError, "backproject",
                r"\brotations\b.*\[2, 3, 3\].*one per projection.*\[3, 3, 3\]",
                _backproject(rotations=_tensor(3, 3, 3)))
    yield from _pose_cases("backproject", _backproject)
    yield from _shape_cases("backproject", _backproject, "volume_shape", 3)


CASES = list(_cases())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("exc,pattern,call", CASES)
def test_bad_argument_is_rejected(device, exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call(device)


def test_volume_shape_is_required():
    with pytest.raises(TypeError, match="volume_shape"):
        fieldfuse.backproject(**{k: v for k, v in _args("cpu").items() if k != "volume"})


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("name", ["rotations", "shifts"])
def test_mixed_devices_name_both_tensors(name):
    for make, first in ((_project, "volume"), (_backproject, "projections")):
        call = make(**{name: lambda device, n=name: _args("cpu")[n]})
        op = "project" if make is _project else "backproject"
        with pytest.raises(ValueError, match=rf"(?s)^{op}\(\): .*\b{name}\b.*\b{first}\b"):
            call("cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_valid_arguments_are_accepted(device):
    # The baseline every case above departs from is itself valid.
    assert _project()(device).shape == (N, 4, 5)
    assert _backproject()(device).shape == (3, 4, 5)
    assert _project(shifts=None, detector_shape=[0, 3])(device).shape == (N, 0, 3)
