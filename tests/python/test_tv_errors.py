# SPDX-License-Identifier: Apache-2.0
"""Argument validation of the fieldfuse TV ops: exception types, messages naming op and argument."""

from __future__ import annotations

import math

import pytest
import torch

import fieldfuse

VOLUME_OPS = ["tv_sq_3d", "tv_iso_3d", "tv_l1_3d"]
# The extra raw-op arguments between the input and grad_out, and grad_out's element count.
RAW_OPTIONS = {
    "tv_sq_3d": ((), 1),
    "tv_iso_3d": ((1e-6,), 1),
    "tv_l1_3d": ((), 3),
    "tv_weighted_l1": (([0.5, 0.2, 0.7],), 1),
}


def _public(name, *args, **kwargs):
    return lambda: getattr(fieldfuse, name)(*args, **kwargs)


def _raw(name, *args):
    return lambda: getattr(torch.ops.fieldfuse, name)(*args)


def _grad_out(numel, **kwargs):
    """A valid-shaped upstream gradient: 0-d for scalar outputs, [3] for tv_l1_3d."""
    return torch.ones(() if numel == 1 else (numel,), **kwargs)


def _case(case_id, exc, pattern, call):
    """`pattern` starts with the op's exact public name; the message must start with `name(): `
    (a prefix such as `tv_sq_3d_backward` or `tv` must not pass for `tv_sq_3d`)."""
    name, rest = pattern.split(".*", 1)
    # (?s): a message may wrap; every pattern names the op first, then the argument.
    return pytest.param(exc, rf"(?s)^{name}\(\): .*{rest}", call, id=case_id)


def _re_float(value: float) -> str:
    """A regex for `value` as C++ or Python prints it (0.5 or 0.500000)."""
    return str(value).replace(".", r"\.")


def _input_cases(name, arg, args=()):
    """Bad inputs shared by every op: `arg` is the input's public argument name."""
    ok_shape = (3, 4, 5)
    yield _case(
        f"{name}-int32",
        TypeError,
        rf"{name}.*\b{arg}\b.*int32",
        _public(name, torch.zeros(ok_shape, dtype=torch.int32), *args),
    )
    for dtype in (torch.float16, torch.bfloat16):
        # 16-bit inputs are CUDA-only.
        yield _case(
            f"{name}-{dtype}-cpu",
            NotImplementedError,
            rf"{name}.*\b{arg}\b",
            _public(name, torch.zeros(ok_shape, dtype=dtype), *args),
        )
    yield _case(
        f"{name}-list", TypeError, rf"{name}.*\b{arg}\b", _public(name, [[[0.0, 1.0]]], *args)
    )


def _cases():
    for name in VOLUME_OPS:
        yield _case(
            f"{name}-ndim",
            ValueError,
            rf"{name}.*\bvol\b.*\[2, 5\]",
            _public(name, torch.zeros(2, 5)),
        )
        yield from _input_cases(name, "vol")

    weights = [0.5, 0.2, 0.7]
    yield from _input_cases("tv_weighted_l1", "array", (weights,))
    yield _case(
        "tv_weighted_l1-ndim",
        ValueError,
        r"tv_weighted_l1.*\barray\b.*\[5\]",
        _public("tv_weighted_l1", torch.zeros(5), [1.0, 1.0]),
    )
    bad_weights = {
        "len1": [1.0],
        "len4": [1.0, 1.0, 1.0, 1.0],
        "negative": [0.5, -0.1, 0.5],
        "nan": [0.5, math.nan, 0.5],
        "inf": [math.inf, 0.5, 0.5],
    }
    for label, bad in bad_weights.items():
        yield _case(
            f"tv_weighted_l1-weights-{label}",
            ValueError,
            r"tv_weighted_l1.*weights\b",  # the C++ message may say num_weights
            _public("tv_weighted_l1", torch.zeros(3, 4, 5), bad),
        )
    # A string is a sequence too; its characters must not be read as weights.
    for label, bad in {"string": "12", "string-entry": ["5", 0.1, 0.1], "none": None}.items():
        yield _case(
            f"tv_weighted_l1-weights-{label}",
            TypeError,
            r"tv_weighted_l1.*weights\b",
            _public("tv_weighted_l1", torch.zeros(3, 4, 5), bad),
        )
    # An axis with a nonzero weight but no differences: the message names the axis and weight.
    no_differences = {
        "size1-z": ((1, 24, 20), [0.5, 0.3, 0.3], 0.5),
        "size1-x": ((24, 1), [0.25, 0.75], 0.75),
        "size0-y": ((3, 0, 4), [0.0, 1.5, 1.5], 1.5),
    }
    for label, (shape, w, bad) in no_differences.items():
        yield _case(
            f"tv_weighted_l1-{label}",
            ValueError,
            rf"tv_weighted_l1.*\baxis\b.*{_re_float(bad)}",
            _public("tv_weighted_l1", torch.zeros(shape), w),
        )
    yield _case(
        "tv_weighted_l1-empty",
        ValueError,
        r"tv_weighted_l1.*\barray\b",
        _public("tv_weighted_l1", torch.zeros(0, 24, 20), [0.3, 0.3]),
    )

    for eps in (-1e-8, math.nan, math.inf):
        yield _case(
            f"tv_iso_3d-eps-{eps}",
            ValueError,
            r"tv_iso_3d.*\beps\b",
            _public("tv_iso_3d", torch.zeros(3, 4, 5), eps=eps),
        )

    # Not a number at all (issue 11: these raised Python's own float() errors).
    for label, bad in {"string": "abc", "none": None, "bool": True}.items():
        yield _case(
            f"tv_iso_3d-eps-{label}",
            TypeError,
            r"tv_iso_3d.*\beps\b.*real number",
            _public("tv_iso_3d", torch.zeros(3, 4, 5), eps=bad),
        )

    # Raw backward ops check grad_out themselves (they are public as torch.ops.fieldfuse.*).
    vol = torch.zeros(3, 4, 5)
    for name, (options, numel) in RAW_OPTIONS.items():
        yield _case(
            f"{name}_backward-grad_out-numel",
            ValueError,
            rf"{name}_backward.*\bgrad_out\b",
            _raw(f"{name}_backward", vol, *options, torch.ones(numel + 1)),
        )
        yield _case(
            f"{name}_backward-grad_out-dtype",
            TypeError,
            rf"{name}_backward.*\bgrad_out\b",
            _raw(f"{name}_backward", vol, *options, _grad_out(numel, dtype=torch.float64)),
        )


@pytest.mark.parametrize("exc,pattern,call", list(_cases()))
def test_invalid_arguments_raise(exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(RAW_OPTIONS))
def test_raw_backward_rejects_grad_out_on_another_device(name):
    options, numel = RAW_OPTIONS[name]
    vol = torch.rand(3, 4, 5, device="cuda")
    backward = getattr(torch.ops.fieldfuse, f"{name}_backward")
    with pytest.raises(ValueError, match=rf"(?s)^{name}_backward\(\): .*\bgrad_out\b"):
        backward(vol, *options, _grad_out(numel))
    with pytest.raises(ValueError, match=rf"(?s)^{name}_backward\(\): .*\bgrad_out\b"):
        backward(vol.cpu(), *options, _grad_out(numel, device="cuda"))


def test_core_rejects_outputs_that_alias_inputs():
    # The Python ops always allocate fresh outputs; the extension is also callable directly, and an
    # in-place gradient would read voxels it has already overwritten.
    from fieldfuse import _C
    from fieldfuse._backend import dl

    vol = torch.rand(3, 4, 5)
    grad_out = torch.ones(())
    with pytest.raises(ValueError, match=r"^tv_sq_3d_backward\(\): .*\bgrad_vol\b.*overlap"):
        _C.tv_sq_3d_backward(dl(vol), dl(grad_out), dl(vol), 0)
    expanded = torch.empty(5).expand(3, 4, 5)
    with pytest.raises(ValueError, match=r"^tv_sq_3d_backward\(\): .*\bgrad_vol\b.*stride 0"):
        _C.tv_sq_3d_backward(dl(vol), dl(grad_out), dl(expanded), 0)
