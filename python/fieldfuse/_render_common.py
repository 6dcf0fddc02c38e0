# SPDX-License-Identifier: Apache-2.0
"""What the render family's op tables share: packed-ray sizes, device offsets checks, placeholders.

Validation lives in the C++ front (src/render/render.cpp). Python reads only what it must to
allocate outputs, and checks offsets on CUDA, whose values the front cannot read without a sync.
"""

from __future__ import annotations

import torch
from torch import Tensor


def empty(like: Tensor) -> Tensor:
    """The library path's stand-in for an output nobody asked for: a custom op returns a tensor for
    every output of its schema, and outputs must not alias, so each gets a fresh 0-element one."""
    return like.new_empty((0,))


def nothing(like: Tensor) -> None:
    """The eager path's stand-in (Note [op table], ``eager_impl``): no allocation at all."""
    return None


def leading_size(t: Tensor, dims: int) -> int:
    """``t.shape[0]`` when ``t`` has ``dims`` dims, else 0.

    Only the output allocation reads sizes; a tensor of the wrong rank (a 0-d or 3-d offsets, say)
    gets 0-sized outputs here, and the C++ front, which checks every input before any output,
    raises its own error naming the argument.
    """
    return t.shape[0] if t.dim() == dims else 0


def num_rays(offsets: Tensor) -> int:
    """R of ``offsets [R + 1]`` for allocating per-ray outputs (0 where the front will reject it)."""
    return max(leading_size(offsets, 1) - 1, 0)


def check_device_offsets(op: str, offsets: Tensor, num_samples: int | None) -> None:
    """The value checks of CUDA offsets, which the C++ front makes for host offsets only (reading
    device memory synchronises). Skipped while compiling or capturing a CUDA graph, and for offsets
    or samples (``num_samples`` None: the per-sample tensor has the wrong number of dims) that the
    front rejects by shape or dtype anyway, so its message names the argument at fault."""
    if num_samples is None or offsets.device.type != "cuda" or torch.compiler.is_compiling():
        return
    if offsets.dim() != 1 or offsets.numel() < 1 or offsets.dtype != torch.int64:
        return
    if torch.cuda.is_current_stream_capturing():
        return
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0:
        raise ValueError(f"{op}(): expected offsets[0] == 0, but got {first}")
    if bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError(f"{op}(): expected offsets to be non-decreasing")
    if last != num_samples:
        raise ValueError(
            f"{op}(): expected offsets[-1] to equal the number of samples N = {num_samples}, but "
            f"got {last}"
        )
