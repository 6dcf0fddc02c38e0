# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the optics tests: the lazy `fieldfuse.optics` lookup and float32 tolerances."""

from __future__ import annotations

import importlib
import re

import pytest
import torch

F32, F64 = torch.float32, torch.float64
C64, C128 = torch.complex64, torch.complex128


def optics_api(name: str):
    """`fieldfuse.optics.<name>`. Every agreed name exists, so a missing module or name fails the
    test (an AttributeError or ImportError naming it), never skips."""
    return getattr(importlib.import_module("fieldfuse.optics"), name)


def complex_of(dtype: torch.dtype) -> torch.dtype:
    return C128 if dtype == F64 else C64


def as64(array) -> torch.Tensor:
    """A tensor (or numpy array) in float64 / complex128."""
    tensor = torch.as_tensor(array)
    return tensor.to(C128 if tensor.is_complex() else F64)


def assert_close_scaled(actual, expected, *, rel: float, what: str = "") -> None:
    """|actual − expected| <= rel·max|expected| elementwise (plus a tiny floor for all-zero
    references): the natural float32 check for transfer functions and FFT outputs, whose rounding
    error scales with the largest coefficient rather than with each element."""
    actual, expected = (
        as64(torch.as_tensor(actual).detach().cpu()),
        as64(torch.as_tensor(expected).detach().cpu()),
    )
    assert actual.shape == expected.shape, (
        f"{what}: shape {list(actual.shape)} != {list(expected.shape)}"
    )
    scale = max(float(expected.abs().max()) if expected.numel() else 0.0, 1e-30)
    torch.testing.assert_close(
        actual, expected, rtol=0.0, atol=rel * scale, msg=lambda m: f"{what}: {m}"
    )


def raises_naming(exc, op: str, argument: str | tuple[str, ...]):
    """pytest.raises(exc) whose message names the op, then the argument (wording left free); a
    tuple accepts any one of its names."""
    names = (argument,) if isinstance(argument, str) else argument
    alternatives = "|".join(re.escape(name) for name in names)
    return pytest.raises(exc, match=rf"(?s)\b{re.escape(op)}\b.*\b(?:{alternatives})\b")
