# SPDX-License-Identifier: Apache-2.0
"""The bindings' tensor arguments (python/src/tensor_arg.h, Note [DLPack exchange API]): tensors
read through DLPack's C exchange API and DLPack capsules must describe the same views."""

from __future__ import annotations

import pytest
import torch
from torch.utils.dlpack import to_dlpack

from fieldfuse import _backend, _C

EXCHANGE = _C.has_dlpack_exchange_api(torch.Tensor)
needs_exchange = pytest.mark.skipif(not EXCHANGE, reason="this torch has no DLPack C exchange API")


def _as_is(t):
    return t


def test_the_python_layer_passes_tensors_as_they_are_exactly_where_the_bindings_read_them():
    offered = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None) is not None
    # A producer of another DLPack major version would not be read (and is not expected here).
    assert EXCHANGE == offered
    assert _C.has_dlpack_exchange_api(torch.nn.Parameter) == offered
    t = torch.rand(3)
    assert (_backend.dl(t) is t) == EXCHANGE
    assert not _C.has_dlpack_exchange_api(type(to_dlpack(t)))
    assert not _C.has_dlpack_exchange_api(int)


def _volumes():
    base = torch.rand(4, 6, 5, 7, dtype=torch.float64)
    return {
        "contiguous": base,
        "transposed": base.transpose(1, 3),
        "offset-slice": base[1:, 2:, ::2, 1:],
        "expanded": torch.rand(1, 6, 5, 7, dtype=torch.float64).expand(3, 6, 5, 7),
        "channels-last": base.to(memory_format=torch.channels_last),
        "parameter": torch.nn.Parameter(base.clone()),
        "empty": torch.rand(2, 0, 5, 7, dtype=torch.float64),
    }


@pytest.mark.parametrize("convert", [_as_is, to_dlpack], ids=["tensor", "capsule"])
@pytest.mark.parametrize("name", list(_volumes()))
def test_tensors_and_capsules_give_the_same_results(name, convert):
    if convert is _as_is and not EXCHANGE:
        pytest.skip("this torch has no DLPack C exchange API")
    vol = _volumes()[name]
    out = torch.empty((), dtype=vol.dtype)
    scratch = torch.empty(_C.tv_sq_3d_workspace_size(convert(vol)), dtype=torch.uint8)
    _C.tv_sq_3d_forward(convert(vol), convert(out), convert(scratch), 0)
    x = vol.detach()
    expected = sum(((x.diff(dim=d) ** 2).sum() for d in (-3, -2, -1)), torch.zeros((), dtype=x.dtype))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("convert", [_as_is, to_dlpack], ids=["tensor", "capsule"])
def test_tensors_and_capsules_give_the_same_errors(convert):
    if convert is _as_is and not EXCHANGE:
        pytest.skip("this torch has no DLPack C exchange API")
    int16_vol = torch.zeros(3, 4, 5, dtype=torch.int16)
    with pytest.raises(TypeError, match=r"^tv_sq_3d\(\): expected vol to be a tensor of a supported "
                                        r"dtype .*DLPack dtype \(code 0, 16 bits, 1 lanes\)$"):
        _C.tv_sq_3d_workspace_size(convert(int16_vol))
    nine_dims = torch.rand((1,) * 6 + (3, 4, 5))
    with pytest.raises(ValueError, match=r"^tv_sq_3d\(\): expected vol to have at most 8 dims, "
                                         r"but got 9$"):
        _C.tv_sq_3d_workspace_size(convert(nine_dims))
    # A list element is named with its index, spelled out only for the message.
    pts, rotations = torch.rand(4, 3), torch.eye(3).expand(2, 3, 3).contiguous()
    planes = [torch.rand(6, 2, 4, 4), torch.rand(6, 2, 4, 4).to(torch.complex64)]
    with pytest.raises(TypeError, match=r"^kplanes_tilted\(\): expected planes\[1\] to have a floating dtype"):
        _C.kplanes_tilted_forward_workspace_size(convert(pts), convert(rotations),
                                                 [convert(p) for p in planes])


@needs_exchange
def test_a_tensor_its_producer_cannot_describe_is_a_type_error_naming_op_and_argument():
    # Sparse tensors have no strided view: torch's exchange entry refuses them, and the binding
    # says so, naming the op and the argument, rather than reading them any other way.
    sparse = torch.rand(3, 4, 5).to_sparse()
    with pytest.raises(TypeError, match=r"^tv_sq_3d\(\): expected vol to be a strided tensor "
                                        r"DLPack can describe, but its producer refused it: .+"):
        _C.tv_sq_3d_workspace_size(sparse)
    planes = [torch.rand(6, 2, 4, 4), torch.rand(6, 2, 4, 4).to_sparse()]
    with pytest.raises(TypeError, match=r"^kplanes_tilted\(\): expected planes\[1\] to be a "
                                        r"strided tensor"):
        _C.kplanes_tilted_forward_workspace_size(torch.rand(4, 3), torch.eye(3)[None], planes)


@needs_exchange
def test_a_temporary_tensor_lives_through_the_call():
    # Nothing but the call's arguments holds these tensors; the binding reads them in place.
    out = torch.empty((), dtype=torch.float64)
    _C.tv_sq_3d_forward(torch.ones(3, 4, 5, dtype=torch.float64), out,
                        torch.empty(4096, dtype=torch.uint8), 0)
    assert out.item() == 0.0
