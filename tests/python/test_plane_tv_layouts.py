# SPDX-License-Identifier: Apache-2.0
"""plane_tv gives the same results for channels-last and NCHW levels (Note [plane_tv rows]).

On CUDA, a level whose planes are dense rows runs the row kernels: channels-last with 4 | C reads
4-element vectors whose W neighbours are C elements on, NCHW with 4 | W reads 4-element vectors of a
row, and any other dense level (odd C or W, a storage offset that breaks 16-byte alignment) reads
one element per thread; every other layout runs the volume view. The levels below cover each of
these, a size-1 H or W, C = 1, and levels larger than one block's 4,096 elements, so that several
blocks' partial sums meet in the final reduction. Gradients are one formula per element, so they
agree to the bit across layouts; the forward sums in a fixed order per layout.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from fieldfuse.reference import kplanes as ref
from device_params import DEVICES, FLOAT_DTYPES, cuda_only

F64 = torch.float64
TILTS = 2
# (C, H, W): vector steps (C = 8), vector rows (NCHW W = 64), scalar (C = 3, W = 7), C = 1 with an
# odd W, a size-1 H and a size-1 W.
LEVELS = ((8, 33, 37), (4, 20, 64), (3, 9, 7), (1, 45, 123), (8, 1, 40), (8, 40, 1))
SMALL_LEVELS = ((8, 3, 4), (4, 2, 5), (1, 4, 4), (3, 1, 3))


def _offset_view(p: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """`p`'s values one element into their storage: dense rows, but not 16-byte aligned."""
    t, c, h, w = p.shape
    flat = torch.empty(p.numel() + 1, dtype=p.dtype, device=p.device)
    if channels_last:
        view = flat[1:].view(t, h, w, c).permute(0, 3, 1, 2)
    else:
        view = flat[1:].view(t, c, h, w)
    view.copy_(p)
    return view


LAYOUTS = {
    "nchw": lambda p: p.contiguous(),
    "channels_last": lambda p: p.contiguous(memory_format=torch.channels_last),
    "offset_nchw": lambda p: _offset_view(p, False),
    "offset_channels_last": lambda p: _offset_view(p, True),
    # The (plane, channel) slabs are not evenly spaced: the volume view on every device.
    "padded_planes": lambda p: torch.zeros(p.shape[0], p.shape[1] + 1, *p.shape[2:], dtype=p.dtype,
                                           device=p.device)[:, 1:].copy_(p),
}


def _levels(rng, levels, dtype, device):
    return [
        (torch.rand((3 * TILTS, c, h, w), generator=rng, dtype=F64) * 0.4 + 0.1).to(device, dtype)
        for c, h, w in levels
    ]


def _value_and_grads(planes):
    leaves = [p.detach().requires_grad_() for p in planes]
    value = fieldfuse.plane_tv(leaves, TILTS, "percell")
    return value.detach(), torch.autograd.grad(value, leaves)


def _check_every_layout(base, forward_rtol):
    expected_value, expected_grads = _value_and_grads(base)
    exact = ref.plane_tv([p.double() for p in base], TILTS, "percell")
    assert_close(expected_value.double(), exact, rtol=forward_rtol, atol=0)
    for layout, make in LAYOUTS.items():
        planes = [make(p) for p in base]
        value, grads = _value_and_grads(planes)
        assert_close(value, expected_value, rtol=forward_rtol, atol=0, msg=layout)
        for i, (a, b) in enumerate(zip(grads, expected_grads, strict=True)):
            assert a.stride() == torch.empty_like(planes[i]).stride(), layout
            assert torch.equal(a, b), f"{layout}: gradient {i}"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_plane_tv_channels_last_equals_nchw(device, dtype, rng):
    forward_rtol = 1e-12 if dtype == F64 else 1e-5
    _check_every_layout(_levels(rng, LEVELS, dtype, device), forward_rtol)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_plane_tv_16bit_channels_last_equals_nchw(dtype, rng):
    # Reduced and differentiated in float32; each gradient element is rounded to 16 bits once.
    _check_every_layout(_levels(rng, LEVELS, dtype, "cuda"), 1e-5)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_plane_tv_layouts(device, layout, rng):
    planes = [LAYOUTS[layout](p) for p in _levels(rng, SMALL_LEVELS, F64, device)]
    leaves = [p.detach().requires_grad_() for p in planes]
    assert torch.autograd.gradcheck(lambda *p: fieldfuse.plane_tv(list(p), TILTS, "percell"),
                                    leaves)
