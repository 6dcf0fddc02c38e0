# SPDX-License-Identifier: Apache-2.0
"""Shared pytest fixtures for fieldfuse: dtype tolerances, per-test generators, spec loops."""

from __future__ import annotations

import dataclasses
import doctest
import sys
import types
import zlib

import pytest
import torch


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """`assert_close` keyword sets for a forward value and for a gradient."""

    forward: dict
    grad: dict

    def scaled_atol(self, factor: float) -> Tolerance:
        """The same tolerance with both atols multiplied by `factor` (callers comment why)."""
        return Tolerance(
            forward={**self.forward, "atol": self.forward["atol"] * factor},
            grad={**self.grad, "atol": self.grad["atol"] * factor},
        )


def _tol(fwd_rtol: float, fwd_atol: float, grad_rtol: float, grad_atol: float) -> Tolerance:
    return Tolerance(
        forward={"rtol": fwd_rtol, "atol": fwd_atol}, grad={"rtol": grad_rtol, "atol": grad_atol}
    )


# Compared against a float64 oracle evaluated on the very same (already rounded) input values, so
# only the kernel's own arithmetic is measured.
_TOLERANCES = {
    # Fixed-order float64 sums of up to ~1e5 terms: relative error stays near 1e-14.
    torch.float64: _tol(1e-10, 1e-12, 1e-10, 1e-12),
    # specs/tv.md: forward rtol 1e-5 / atol 1e-7, gradient rtol 1e-4 / atol 1e-7 (the iso values;
    # ops whose gradient elements are O(1) rather than O(1/N) scale the atol, see test_tv.py).
    torch.float32: _tol(1e-5, 1e-7, 1e-4, 1e-7),
    # 16-bit inputs (CUDA only): differences and products of 16-bit values are exact in fp32 and
    # sums accumulate in fp32 or wider, so the float32 forward output keeps the float32 tolerance.
    # The gradient is rounded to the input dtype: half an ulp is 2^-9 (bfloat16) or 2^-12
    # (float16) relative, so allow about two ulps on top of the fp32 error. float16 gradients of
    # normalised losses (~1/N) fall into subnormals, spaced 2^-24 ≈ 6e-8: atol 1e-7 covers that.
    torch.bfloat16: _tol(1e-5, 1e-7, 1e-2, 1e-7),
    torch.float16: _tol(1e-5, 1e-7, 1e-3, 1e-7),
}


def tolerances(dtype: torch.dtype) -> Tolerance:
    """Tolerance for comparing an op run on `dtype` inputs with the float64 reference."""
    return _TOLERANCES[dtype]


@pytest.fixture(name="tolerances")
def _tolerances_fixture():
    """The `tolerances(dtype)` function, as a fixture so test modules need not import conftest."""
    return tolerances


@pytest.fixture
def rng(request) -> torch.Generator:
    """A CPU generator seeded from the test id: fresh data per test, reproducible per test."""
    generator = torch.Generator()
    generator.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    return generator


def _ptychography_tv_loss(array: torch.Tensor, w_z: float, w_xy: float) -> torch.Tensor:
    # The loop of specs/tv.md (ObjectConstraints._calc_tv_loss), kept literal on purpose.
    loss = 0
    n = 0
    for dim in range(array.ndim):
        w = w_z if (dim == 0 and array.ndim == 3) else w_xy
        if w > 0:
            n += 1
            loss += w * torch.mean(torch.abs(torch.diff(array, dim=dim)))
    if n > 0:
        loss /= n
    return torch.as_tensor(loss, dtype=array.dtype, device=array.device)


@pytest.fixture
def ptychography_loop():
    """`loop(array, w_z, w_xy)`: the spec's ptychography TV loop on a 2-D or 3-D array."""
    return _ptychography_tv_loss


@pytest.fixture
def reference_doctests(monkeypatch):
    """`run(module, name)`: runs the docstring examples of `fieldfuse.reference.<name>`.

    The module may have been loaded from its source file (the tests fall back to that when the
    installed package predates it); then the docstrings' `from fieldfuse.reference import <name>`
    is pointed at it, without importing the extension.
    """

    def run(module, name: str) -> None:
        if module.__name__ != f"fieldfuse.reference.{name}":
            package = types.ModuleType("fieldfuse")
            reference = types.ModuleType("fieldfuse.reference")
            package.reference = reference
            setattr(reference, name, module)
            monkeypatch.setitem(sys.modules, "fieldfuse", package)
            monkeypatch.setitem(sys.modules, "fieldfuse.reference", reference)
        result = doctest.testmod(module, verbose=False)
        assert result.attempted > 0 and result.failed == 0

    return run
