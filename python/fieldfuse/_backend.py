# SPDX-License-Identifier: Apache-2.0
"""Glue between torch tensors and the C++ core: DLPack capsules, streams, workspaces, dtypes."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import torch
from torch.utils.dlpack import to_dlpack

from . import _C  # noqa: F401  (re-exported for the op modules)

# float16/bfloat16 inputs are accumulated in float32, and reductions return float32.
_REDUCED_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


# dl(tensor): what the bindings take for `tensor`.
#
# Where torch offers DLPack's C exchange API (PyTorch 2.10 and newer), the tensor itself: the
# bindings read it in place, with no capsule (Note [DLPack exchange API] in
# python/src/tensor_arg.h; about 0.3 µs less host time per tensor, 16 per K-Planes forward +
# backward). Otherwise a DLPack capsule viewing it (no copy), from torch's builtin `to_dlpack`
# itself (no Python frame around it): it synchronises no stream (unlike `__dlpack__()` without
# `stream=-1`) and costs about a tenth as much. Either way no sync is needed: every fieldfuse
# call runs on the stream passed explicitly (`stream_of`), the current one, so ordering is kept
# and CUDA-graph capture stays legal.
# dls(tensors) is the same for a sequence of tensors, in one call (the whole sequence as it is).
if _C.has_dlpack_exchange_api(torch.Tensor):

    def dl(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def dls(tensors: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        return tensors

else:
    dl = to_dlpack

    def dls(tensors: Sequence[torch.Tensor]) -> list:
        return [*map(to_dlpack, tensors)]


# The current stream's handle without building a torch.cuda.Stream object (the public route took
# 4–6 µs a call on the H100 machines we measured, twice per training step). It is the function
# torch.compile's generated code calls for the same value; builds without CUDA lack it.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(tensor: torch.Tensor) -> int:
    """The CUDA stream the op must run on (the current stream of the tensor's device), or 0 on CPU."""
    if not tensor.is_cuda:  # reads the device without building a torch.device (twice a step)
        return 0
    if _current_raw_stream is not None:
        return _current_raw_stream(tensor.device.index)
    return torch.cuda.current_stream(tensor.device).cuda_stream


def workspace(nbytes: int, device: torch.device) -> torch.Tensor:
    """Scratch memory from PyTorch's (caching) allocator, so the core never allocates."""
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def reduced_dtype(dtype: torch.dtype) -> torch.dtype:
    return _REDUCED_DTYPE.get(dtype, dtype)


def check_tensor(op: str, arg: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}(): expected {arg} to be a torch.Tensor, but got {type(value).__name__}")


def float_list(op: str, arg: str, values) -> list[float]:
    """`values` (an iterable of real numbers, not a string) as Python floats, or a TypeError."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(
            f"{op}(): expected {arg} to be a sequence of numbers, but got {type(values).__name__}"
        )
    values = list(values)
    for value in values:
        if not isinstance(value, numbers.Real):
            raise TypeError(
                f"{op}(): expected {arg} to contain real numbers, but got {value!r} "
                f"({type(value).__name__})"
            )
    return [float(v) for v in values]


def real_number(op: str, arg: str, value):
    """`value` (a real number: int, float, NumPy scalar or 0-d tensor; not a bool or a string) as a
    Python float, or fieldfuse's TypeError naming the op and argument.

    A schema's ``float`` argument must be a float before the op is called, and ``float(None)`` or
    ``float("abc")`` would raise Python's own error, naming neither the op nor the argument; the C++
    front checks the value (finite, range) once it has a float. Symbolic numbers under
    torch.compile pass through unchanged (``float()`` would specialise the graph on them).
    """
    if isinstance(value, (torch.SymFloat, torch.SymInt)):
        return value
    if not isinstance(value, (str, bytes, bool)):
        try:
            return float(value)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise TypeError(
        f"{op}(): expected {arg} to be a real number, but got {value!r} ({type(value).__name__})"
    )
