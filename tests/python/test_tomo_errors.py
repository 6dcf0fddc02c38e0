# SPDX-License-Identifier: Apache-2.0
r"""Argument validation of fieldfuse.tomo: one case per check, each matching the exact prefix
("^sirt\(\): " or "^fbp\(\): ") and the argument's name. Python checks only what it needs to
allocate the result (volume_shape, initial's shape, argument types); the rest is the C++ front."""

from __future__ import annotations

import pytest
import torch

import fieldfuse
from device_params import cuda_only

F32, F64 = torch.float32, torch.float64
N = 2


def _args(dtype=F32, device="cpu"):
    return {
        "projections": torch.rand(N, 4, 6, dtype=dtype, device=device),
        "rotations": torch.eye(3, dtype=dtype, device=device).repeat(N, 1, 1),
        "shifts": torch.zeros(N, 2, dtype=dtype, device=device),
        "volume_shape": (3, 4, 5),
    }


def _sirt(**changes):
    return lambda: fieldfuse.tomo.sirt(**{**_args(), **changes})


def _fbp(**changes):
    return lambda: fieldfuse.tomo.fbp(**{**_args(), **changes})


CASES = [
    # sirt: Python (allocation and argument types)
    ("sirt-projections-type", TypeError, "sirt", "expected projections to be a torch.Tensor",
     _sirt(projections=[1.0])),
    ("sirt-volume-shape-len", ValueError, "sirt", "expected volume_shape to be 3 ints",
     _sirt(volume_shape=(3, 4))),
    ("sirt-volume-shape-type", TypeError, "sirt", "expected volume_shape to be a sequence",
     _sirt(volume_shape=5)),
    ("sirt-volume-shape-negative", ValueError, "sirt", "expected volume_shape to have sizes >= 0",
     _sirt(volume_shape=(3, -1, 5))),
    ("sirt-iterations-type", TypeError, "sirt", "expected iterations to be an int",
     _sirt(iterations=2.5)),
    ("sirt-positivity-type", TypeError, "sirt", "expected positivity to be a bool",
     _sirt(positivity=1)),
    ("sirt-relaxation-type", TypeError, "sirt", "relaxation", _sirt(relaxation="1")),
    ("sirt-initial-shape", ValueError, "sirt", "expected initial to have shape volume_shape",
     _sirt(initial=torch.zeros(3, 4, 6))),
    # sirt: the C++ front
    ("sirt-projections-dtype", TypeError, "sirt", "expected projections to have dtype float32 or "
     "float64, but got int32", _sirt(projections=torch.zeros(N, 4, 6, dtype=torch.int32))),
    ("sirt-projections-half", NotImplementedError, "sirt", "not implemented for projections of "
     "dtype float16", _sirt(projections=torch.zeros(N, 4, 6, dtype=torch.float16))),
    ("sirt-projections-dims", ValueError, "sirt", r"expected projections to have shape \[n, Hd, Wd\]",
     _sirt(projections=torch.zeros(N, 24))),
    ("sirt-rotations-shape", ValueError, "sirt", r"expected rotations to have shape \[2, 3, 3\]",
     _sirt(rotations=torch.eye(3).repeat(3, 1, 1))),
    ("sirt-rotations-dtype", TypeError, "sirt", "rotations", _sirt(rotations=torch.eye(3, dtype=F64)
                                                                   .repeat(N, 1, 1))),
    ("sirt-shifts-shape", ValueError, "sirt", r"expected shifts to have shape \[2, 2\]",
     _sirt(shifts=torch.zeros(N, 3))),
    ("sirt-shifts-dtype", TypeError, "sirt", "shifts", _sirt(shifts=torch.zeros(N, 2, dtype=F64))),
    ("sirt-volume-dtype", TypeError, "sirt", "volume", _sirt(initial=torch.zeros(3, 4, 5,
                                                                               dtype=F64))),
    ("sirt-iterations-negative", ValueError, "sirt", "expected iterations to be >= 0, but got -1",
     _sirt(iterations=-1)),
    ("sirt-relaxation-zero", ValueError, "sirt", r"expected relaxation to be in \(0, 2\)",
     _sirt(relaxation=0.0)),
    ("sirt-relaxation-two", ValueError, "sirt", r"expected relaxation to be in \(0, 2\)",
     _sirt(relaxation=2.0)),
    ("sirt-relaxation-nan", ValueError, "sirt", r"expected relaxation to be in \(0, 2\).*nan",
     _sirt(relaxation=float("nan"))),
    # fbp
    ("fbp-projections-type", TypeError, "fbp", "expected projections to be a torch.Tensor",
     _fbp(projections=None)),
    ("fbp-volume-shape", ValueError, "fbp", "expected volume_shape to be 3 ints",
     _fbp(volume_shape=(1, 2, 3, 4))),
    ("fbp-float64", NotImplementedError, "fbp", "not implemented for projections of dtype float64",
     lambda: fieldfuse.tomo.fbp(**_args(F64))),
    ("fbp-projections-dtype", TypeError, "fbp", "expected projections to have dtype float32, but "
     "got int64", _fbp(projections=torch.zeros(N, 4, 6, dtype=torch.int64))),
    ("fbp-projections-dims", ValueError, "fbp", r"expected projections to have shape \[n, Hd, Wd\]",
     _fbp(projections=torch.zeros(4, 6))),
    ("fbp-rotations-shape", ValueError, "fbp", r"expected rotations to have shape \[2, 3, 3\]",
     _fbp(rotations=torch.eye(3).repeat(N, 1, 1)[:, :2])),
    ("fbp-shifts-shape", ValueError, "fbp", r"expected shifts to have shape \[2, 2\]",
     _fbp(shifts=torch.zeros(1, 2))),
    ("fbp-filter-name", ValueError, "fbp", 'expected filter to be "ramp", "shepp-logan" or "hann", '
     'but got "ram-lak"', _fbp(filter="ram-lak")),
    ("fbp-filter-type", TypeError, "fbp", "expected filter to be a str", _fbp(filter=0)),
]


@pytest.mark.parametrize("exc,op,rest,call", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_error(exc, op, rest, call):
    with pytest.raises(exc, match=rf"^{op}\(\): .*{rest}" if rest[0].isalpha() and " " not in rest
                       else rf"^{op}\(\): {rest}"):
        call()


@pytest.mark.parametrize("op", ["sirt", "fbp"])
def test_workspace_too_small(op):
    a = _args()
    volume = torch.zeros(a["volume_shape"])
    small = torch.empty(8, dtype=torch.uint8)
    with pytest.raises(ValueError, match=rf"^{op}\(\): expected a workspace of at least"):
        if op == "sirt":
            fieldfuse._C.sirt(a["projections"], a["rotations"], None, 1, 1.0, False, volume, small,
                              0)
        else:
            fieldfuse._C.fbp(a["projections"], a["rotations"], None, "ramp", volume, small, 0)


def test_volume_not_contiguous():
    a = _args()
    volume = torch.zeros(5, 4, 3).permute(2, 1, 0)
    ws = torch.empty(fieldfuse._C.sirt_workspace_size(a["projections"], volume), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^sirt\(\): expected volume to be .*contiguous"):
        fieldfuse._C.sirt(a["projections"], a["rotations"], None, 1, 1.0, False, volume, ws, 0)


@cuda_only
@pytest.mark.parametrize("op", ["sirt", "fbp"])
def test_device_mismatch(op):
    fn = fieldfuse.tomo.sirt if op == "sirt" else fieldfuse.tomo.fbp
    a = _args(device="cuda")
    a["rotations"] = a["rotations"].cpu()
    with pytest.raises(ValueError, match=rf"^{op}\(\): .*rotations"):
        fn(**a)


