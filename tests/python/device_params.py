# SPDX-License-Identifier: Apache-2.0
"""Device and dtype parameters shared by the op test modules: CUDA cases carry the `cuda` marker
and skip where no GPU is visible."""

from __future__ import annotations

import pytest
import torch

F32, F64 = torch.float32, torch.float64

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
CUDA_MARKS = (pytest.mark.cuda, requires_cuda)


def cuda_only(fn):
    """Marks a test as a CUDA case."""
    for mark in CUDA_MARKS:
        fn = mark(fn)
    return fn


def device_param(device: str):
    """`device` as a pytest parameter, with the CUDA marks where it is "cuda"."""
    return pytest.param(device, id=device, marks=CUDA_MARKS if device == "cuda" else ())


DEVICES = [device_param("cpu"), device_param("cuda")]
FLOAT_DTYPES = [pytest.param(F32, id="float32"), pytest.param(F64, id="float64")]


def capture_cuda_graph(step):
    """Captures `step()` in a CUDA graph after two warm-up calls on a side stream (capture
    requires it); returns the graph and what the captured call returned (its static outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    return graph, captured
