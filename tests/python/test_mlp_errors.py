# SPDX-License-Identifier: Apache-2.0
"""Every validation of fieldfuse.mlp: exception type and the exact `mlp(): ` prefix, naming the
argument (and layer) at fault."""

from __future__ import annotations

import re

import pytest
import torch

import fieldfuse


def _net(sizes=(3, 16, 2), dtype=torch.float32):
    weights = [torch.randn(o, i, dtype=dtype) for i, o in zip(sizes[:-1], sizes[1:])]
    biases = [torch.randn(o, dtype=dtype) for o in sizes[1:]]
    return torch.randn(5, sizes[0], dtype=dtype), weights, biases


def _case(case_id, exc, pattern, call):
    return pytest.param(exc, pattern, call, id=case_id)


def _cases():
    x, w, b = _net()
    yield _case("hidden width not a multiple of 16", ValueError,
                r"^mlp\(\): expected weights\[0\] to have a hidden width .*multiple of 16.*\[15, 3\]",
                lambda: fieldfuse.mlp(x, [torch.randn(15, 3), torch.randn(2, 15)]))
    yield _case("hidden width above 256", ValueError,
                r"^mlp\(\): expected weights\[0\] to have a hidden width .*\[272, 3\]",
                lambda: fieldfuse.mlp(x, [torch.randn(272, 3), torch.randn(2, 272)]))
    yield _case("mismatched layer", ValueError,
                r"^mlp\(\): expected weights\[1\] to have in = 16 columns \(weights\[0\]'s out 16\)",
                lambda: fieldfuse.mlp(x, [w[0], torch.randn(2, 32)]))
    yield _case("x width", ValueError,
                r"^mlp\(\): expected weights\[0\] to have in = 4 columns \(x's width 4\)",
                lambda: fieldfuse.mlp(torch.randn(5, 4), w, b))
    yield _case("bias shape", ValueError,
                r"^mlp\(\): expected biases\[1\] to have shape \[2\]",
                lambda: fieldfuse.mlp(x, w, [b[0], torch.randn(3)]))
    yield _case("bias count", ValueError,
                r"^mlp\(\): expected biases to have one entry per layer \(2\), but got 1",
                lambda: fieldfuse.mlp(x, w, [b[0]]))
    yield _case("bias None entry", TypeError, r"^mlp\(\): expected biases\[1\] to be a torch\.Tensor",
                lambda: fieldfuse.mlp(x, w, [b[0], None]))
    yield _case("unknown activation", ValueError,
                r"^mlp\(\): expected activation to be one of relu, leaky_relu, .*none, but got \"gelu\"",
                lambda: fieldfuse.mlp(x, w, b, activation="gelu"))
    yield _case("unknown output activation", ValueError,
                r"^mlp\(\): expected output_activation to be one of .* but got \"Tanh\"",
                lambda: fieldfuse.mlp(x, w, b, output_activation="Tanh"))
    yield _case("activation type", TypeError, r"^mlp\(\): expected activation to be a string",
                lambda: fieldfuse.mlp(x, w, b, activation=None))
    yield _case("softplus beta", ValueError, r"^mlp\(\): expected softplus_beta to be > 0, but got 0",
                lambda: fieldfuse.mlp(x, w, b, softplus_beta=0.0))
    yield _case("sine omega", ValueError, r"^mlp\(\): expected sine_omega0 to be finite, but got inf",
                lambda: fieldfuse.mlp(x, w, b, sine_omega0=float("inf")))
    for arg, value in (("softplus_beta", "inf"), ("softplus_beta", "nan"), ("leaky_slope", "nan"),
                       ("leaky_slope", "-inf")):
        yield _case(f"{arg} {value}", ValueError,
                    rf"^mlp\(\): expected {arg} to be finite, but got {value}$",
                    lambda arg=arg, value=value: fieldfuse.mlp(x, w, b, **{arg: float(value)}))
    yield _case("sine omega zero", ValueError,
                r"^mlp\(\): expected sine_omega0 to be non-zero, but got 0$",
                lambda: fieldfuse.mlp(x, w, b, activation="sine", sine_omega0=0.0))
    # float32 compute holds the parameters in float32, where these become 0 or inf (NaN outputs).
    for arg, value, kind in (("softplus_beta", 1e-300, "normal"), ("sine_omega0", 1e300, "normal"),
                             ("leaky_slope", 1e300, "finite")):
        yield _case(f"{arg} {value:g} in float32", ValueError,
                    rf"^mlp\(\): expected {arg} to be a {kind} float32 number \(float32 and 16-bit "
                    rf"compute hold it in float32\), but got {re.escape(f'{value:g}')}$",
                    lambda arg=arg, value=value: fieldfuse.mlp(x, w, b, **{arg: value}))
    yield _case("zero input width", ValueError,
                r"^mlp\(\): expected weights\[0\] to have non-zero sizes, but got shape \[16, 0\]",
                lambda: fieldfuse.mlp(torch.randn(5, 0), [torch.randn(16, 0), w[1]]))
    yield _case("zero output width", ValueError,
                r"^mlp\(\): expected weights\[1\] to have non-zero sizes, but got shape \[0, 16\]",
                lambda: fieldfuse.mlp(x, [w[0], torch.randn(0, 16)]))
    yield _case("leaky slope type", TypeError, r"^mlp\(\): expected leaky_slope to be a real number",
                lambda: fieldfuse.mlp(x, w, b, leaky_slope="a"))
    yield _case("x dtype", TypeError,
                r"^mlp\(\): expected x to have dtype float32 or float64 .*but got int64",
                lambda: fieldfuse.mlp(x.long(), w, b))
    yield _case("x half", TypeError, r"^mlp\(\): expected x to have dtype float32 or float64",
                lambda: fieldfuse.mlp(x.half(), [t.half() for t in w]))
    yield _case("weight dtype", TypeError,
                r"^mlp\(\): expected weights\[1\] to have dtype float32 \(the dtype of x\), but got float64",
                lambda: fieldfuse.mlp(x, [w[0], w[1].double()], b))
    yield _case("bias dtype", TypeError,
                r"^mlp\(\): expected biases\[0\] to have dtype float32 \(the dtype of x\)",
                lambda: fieldfuse.mlp(x, w, [b[0].double(), b[1]]))
    yield _case("x not 2-D", ValueError, r"^mlp\(\): expected x to be 2-D \[B, in\], but got shape \[5, 3, 1\]",
                lambda: fieldfuse.mlp(x[..., None], w, b))
    yield _case("x 0-D", ValueError, r"^mlp\(\): expected x to be 2-D \[B, in\], but got shape \[\]",
                lambda: fieldfuse.mlp(torch.tensor(1.0), w, b))
    yield _case("weight not 2-D", ValueError,
                r"^mlp\(\): expected weights\[0\] to be 2-D \[out, in\], but got shape \[16, 3, 1\]",
                lambda: fieldfuse.mlp(x, [w[0][..., None], w[1]], b))
    yield _case("no layers", ValueError, r"^mlp\(\): expected weights to hold at least one layer",
                lambda: fieldfuse.mlp(x, []))
    yield _case("weights not a list", TypeError, r"^mlp\(\): expected weights to be a sequence",
                lambda: fieldfuse.mlp(x, w[0]))
    yield _case("compute_dtype on cpu", NotImplementedError,
                r"^mlp\(\): compute_dtype float16 runs on CUDA tensor cores only, but x is on cpu",
                lambda: fieldfuse.mlp(x, w, b, compute_dtype=torch.float16))
    yield _case("compute_dtype float64 with float32", TypeError,
                r"^mlp\(\): expected compute_dtype to be None, x's dtype \(float32\), float16 or "
                r"bfloat16, but got float64",
                lambda: fieldfuse.mlp(x, w, b, compute_dtype=torch.float64))
    yield _case("compute_dtype not floating", TypeError,
                r"^mlp\(\): expected compute_dtype to be None, torch\.float16, torch\.bfloat16, "
                r"torch\.float32 or torch\.float64, but got int32$",
                lambda: fieldfuse.mlp(x, w, b, compute_dtype=torch.int32))
    yield _case("compute_dtype float32 with float64", TypeError,
                r"^mlp\(\): expected compute_dtype to be None, x's dtype \(float64\), float16 or "
                r"bfloat16, but got float32",
                lambda: fieldfuse.mlp(x.double(), [t.double() for t in w], compute_dtype=torch.float32))
    yield _case("compute_dtype type", TypeError, r"^mlp\(\): expected compute_dtype to be None or a torch\.dtype",
                lambda: fieldfuse.mlp(x, w, b, compute_dtype="float16"))


@pytest.mark.parametrize("exc, pattern, call", list(_cases()))
def test_error(exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call()


def test_float64_takes_parameters_beyond_float32():
    # float64 compute keeps the parameters in float64: the same values are valid there.
    x, w, b = _net(dtype=torch.float64)
    y = fieldfuse.mlp(x, w, b, activation="softplus", softplus_beta=1e-300)
    assert torch.isfinite(y).all()


def test_compute_dtype_equal_to_x_dtype_is_accepted():
    x, w, b = _net()
    torch.testing.assert_close(fieldfuse.mlp(x, w, b, compute_dtype=torch.float32),
                               fieldfuse.mlp(x, w, b))


def test_backward_errors_name_their_entry():
    x, w, b = _net()
    grad_out = torch.randn(5, 3)  # the output has 2 columns
    with pytest.raises(ValueError, match=r"^mlp_backward\(\): expected grad_out to have shape \[5, 2\]"):
        torch.ops.fieldfuse.mlp_backward(x, w, b, "relu", "none", 1.0, 30.0, 0.01, None,
                                         grad_out, True, True)
    with pytest.raises(ValueError, match=r"^mlp_double_backward\(\): expected grad_grad_x to have shape \[5, 3\]"):
        torch.ops.fieldfuse.mlp_double_backward(x, w, b, "relu", "none", 1.0, 30.0, 0.01, None,
                                                torch.randn(5, 2), torch.randn(5, 4), [], [],
                                                None, True, True, True)
    with pytest.raises(ValueError, match=r"^mlp_double_backward\(\): expected grad_grad_weights\[1\] to have shape \[2, 16\]"):
        torch.ops.fieldfuse.mlp_double_backward(x, w, b, "relu", "none", 1.0, 30.0, 0.01, None,
                                                torch.randn(5, 2), torch.randn(5, 3),
                                                [torch.randn(16, 3), torch.randn(16, 2)], [],
                                                None, True, True, True)
    with pytest.raises(ValueError, match=r"^mlp_double_backward\(\): expected grad_y to have shape \[5, 2\]"):
        torch.ops.fieldfuse.mlp_double_backward(x, w, b, "relu", "none", 1.0, 30.0, 0.01, None,
                                                torch.randn(5, 2), torch.randn(5, 3), [], [],
                                                torch.randn(5, 3), True, True, True)
