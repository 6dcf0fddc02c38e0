# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.mlp with compute_dtype float16/bfloat16 (CUDA tensor cores, float32 accumulation):
the rounding the contract specifies, every order within the 16-bit error of the float32 result,
shapes, layouts, graphs and compile. Every test here needs a GPU."""

from __future__ import annotations

import pytest
import torch
from device_params import F32, F64, capture_cuda_graph, cuda_only

import fieldfuse
from fieldfuse.reference import mlp as ref

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

COMPUTE = [pytest.param(torch.float16, id="float16"), pytest.param(torch.bfloat16, id="bfloat16")]

# The cases that fail on the GPU (H100, 2026-11-24), kept as strict xfails so that a change shows
# up as an XPASS. The first two causes are open work of issue 13; the third is the float16
# contract's own rounding, which the tolerance heuristic (_tolerance) does not bound:
_OVERFLOW = ("float16 overflow: the penalties on the parameter gradients make V_k = "
             "dL2/d(grad_weight) exceed float16's 65504, and V_k enters its product rounded to "
             "float16 (inf, then NaN); a power-of-two scale per operand before rounding is missing")
_RELU = ("ReLU beyond the smooth bound: rounding flips gates whose pre-activation is within "
         "rounding of 0, an O(1) change that 2.5*2*L*u does not cover (measured up to 3x it)")
_SILU = ("the 16-bit contract itself, not the kernel: the Eikonal loss's input gradient through "
         "SiLU is 3.5e-2 from float64 both here and in a float64 emulation of float16 operands "
         "(measured 2026-11-24), beyond 2.5*2*L*u; softplus and tanh stay within it")
KNOWN_FAILURES = {
    "test_every_order_within_16bit_error_of_float32[relu-float16]": _RELU,
    **{f"test_widths_and_batches[1000003-sizes{i}-float16]": _OVERFLOW for i in (0, 1, 2, 3, 6)},
    **{f"test_parameter_gradients_without_input_gradient[sizes{i}-relu-{d}]": _RELU
       for i, d in ((0, "float16"), (0, "bfloat16"), (1, "float16"), (1, "bfloat16"),
                    (2, "float16"))},
    **{f"test_double_backward_every_upstream_term_and_bits[sizes{i}-relu-float16]": _RELU
       for i in (0, 1, 2)},
    **{f"test_double_backward_every_upstream_term_and_bits[sizes{i}-softplus-float16]": _OVERFLOW
       for i in (1, 2)},
    "test_tile_kernels_every_order[float16]": _OVERFLOW,
    **{f"test_eikonal_double_backward_without_weight_penalty[{f}-{a}-float16]": r
       for f in ("all", "frozen1", "frozen0-3")
       for a, r in (("leaky_relu", _RELU), ("silu", _SILU))},
}


@pytest.fixture(autouse=True)
def _known_failure(request):
    reason = KNOWN_FAILURES.get(request.node.name)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
# Unit roundoff of the operands (2^-11 for float16's 11-bit significand, 2^-8 for bfloat16's 8).
UNIT = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def _network(sizes, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    weights = [(torch.randn(o, i, generator=g, dtype=F64) * scale / i**0.5).float().cuda()
               for i, o in zip(sizes[:-1], sizes[1:])]
    biases = [(torch.randn(o, generator=g, dtype=F64) * 0.2).float().cuda() for o in sizes[1:]]
    return weights, biases


def _x(batch, width, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, width, generator=g, dtype=F64).float().cuda()


def _rel(a, b):
    """Relative error in the Frobenius norm (elementwise tolerances are meaningless for values
    near 0 at 16-bit precision)."""
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def _tolerance(compute_dtype, num_layers):
    # Each product rounds both operands (relative error <= 2u per product, u the unit roundoff)
    # and accumulates in float32 (negligible next to u); the errors of the L layers add up along
    # a sweep, and the second order runs three sweeps, so 2.5 · 2Lu bounds every order with
    # margin while staying far below what float16 accumulation (or a missing operand) gives.
    return 2.5 * 2 * num_layers * UNIT[compute_dtype]


def _rounded_forward(x, weights, biases, compute_dtype, **kw):
    """The tensor-core contract emulated in float64: operands rounded to compute_dtype as they
    enter each product, everything else exact."""
    a = x.double()
    for k, (w, b) in enumerate(zip(weights, biases)):
        p = (a.to(compute_dtype).double() @ w.to(compute_dtype).double().T) + b.double()
        name = kw.get("output_activation", "none") if k == len(weights) - 1 else kw["activation"]
        a = ref.apply_activation(p, name, **{k2: v for k2, v in kw.items()
                                             if k2 in ("softplus_beta", "sine_omega0", "leaky_slope")})
    return a


@pytest.mark.parametrize("compute_dtype", COMPUTE)
@pytest.mark.parametrize("activation", ["relu", "softplus", "sine", "silu"])
def test_forward_rounds_operands_as_the_contract_says(compute_dtype, activation):
    # Much closer to the emulated contract than to float32 compute: the operands really are
    # rounded to 16 bits, and nothing else is (no 16-bit accumulation, float32 bias and σ).
    kw = dict(activation=activation, output_activation="tanh", softplus_beta=3.0, sine_omega0=2.0)
    weights, biases = _network([32, 64, 64, 64, 16])
    x = _x(5000, 32)
    ours = fieldfuse.mlp(x, weights, biases, compute_dtype=compute_dtype, **kw)
    assert ours.dtype == F32
    emulated = _rounded_forward(x, weights, biases, compute_dtype, **kw)
    exact = ref.mlp(x.double(), [w.double() for w in weights], [b.double() for b in biases], **kw)
    assert _rel(ours, emulated) < 0.1 * _rel(exact, emulated)
    assert _rel(ours, exact) < _tolerance(compute_dtype, 4)


def _eikonal_grads(x, weights, biases, **kw):
    leaves = [t.detach().requires_grad_() for t in (x, *weights, *biases)]
    n = len(weights)
    y = fieldfuse.mlp(leaves[0], leaves[1 : 1 + n], leaves[1 + n :], **kw)
    first = torch.autograd.grad(y.square().sum(), leaves, create_graph=True)
    loss = (first[0].norm(dim=1) - 1).square().mean() + first[1].square().sum() + y.abs().mean()
    return [y, *first, *torch.autograd.grad(loss, leaves)]


@pytest.mark.parametrize("compute_dtype", COMPUTE)
@pytest.mark.parametrize("activation", ["relu", "softplus", "tanh", "sine"])
def test_every_order_within_16bit_error_of_float32(compute_dtype, activation):
    # Forward, backward to x / weights / biases, and the double backward (an Eikonal loss plus a
    # penalty on a weight gradient, so the V term runs too) against the float32 SIMT driver.
    kw = dict(activation=activation, softplus_beta=3.0, sine_omega0=2.0)
    weights, biases = _network([3, 64, 64, 64, 1])
    x = _x(4097, 3)
    ours = _eikonal_grads(x, weights, biases, compute_dtype=compute_dtype, **kw)
    fp32 = _eikonal_grads(x, weights, biases, **kw)
    tol = _tolerance(compute_dtype, 4)
    for i, (a, b) in enumerate(zip(ours, fp32)):
        assert a.dtype == F32 and a.shape == b.shape
        assert _rel(a, b) < tol, (i, _rel(a, b), tol)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
@pytest.mark.parametrize("sizes", [[3, 16, 1], [7, 32, 5], [1, 16, 16, 1], [40, 64, 64, 64, 17],
                                   [5, 128, 128, 3], [6, 256, 256, 9], [33, 48, 208, 2],
                                   [128, 128, 128, 16]])
@pytest.mark.parametrize("batch", [0, 1, 129, 1000003])
def test_widths_and_batches(compute_dtype, sizes, batch):
    # [128, 128, 128, 16]: the register forward's staged input rows do not fit next to its
    # weights, so it reads x directly (Note [mlp staged input rows]). New cases go last: the
    # known failures above name these cases by index.
    if batch == 1000003 and sizes[1] > 64:
        pytest.skip("the large batch runs on the narrow networks")
    weights, biases = _network(sizes)
    x = _x(batch, sizes[0])
    kw = dict(activation="softplus", softplus_beta=5.0)
    ours = _eikonal_grads(x, weights, biases, compute_dtype=compute_dtype, **kw)
    fp32 = _eikonal_grads(x, weights, biases, **kw)
    tol = _tolerance(compute_dtype, len(weights))
    for i, (a, b) in enumerate(zip(ours, fp32)):
        assert a.shape == b.shape
        if batch == 0:
            assert a.numel() == 0 or torch.equal(a, torch.zeros_like(a)), i
        else:
            assert _rel(a, b) < tol, (i, _rel(a, b), tol)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
@pytest.mark.parametrize("activation", ["relu", "softplus"])
@pytest.mark.parametrize("sizes", [[32, 64, 64, 64, 64, 16], [5, 128, 128, 3], [6, 256, 256, 9]])
def test_parameter_gradients_without_input_gradient(compute_dtype, activation, sizes):
    # The first-order backward with x not requiring grad (no grad_x: the reverse sweep stops at
    # layer 0), relu (σ′ kept in 16 bits, exact) and softplus (σ′ in float32), over the warp-fused
    # plans these widths select (weights and dW accumulator in shared memory or the workspace);
    # the parameter gradients are the same bits on every call (fixed-order partial sums).
    weights, biases = _network(sizes)
    x = _x(3001, sizes[0])
    grad_out = _x(3001, sizes[-1], seed=2)

    def grads(**kw):
        leaves = [t.detach().requires_grad_() for t in (*weights, *biases)]
        y = fieldfuse.mlp(x, leaves[: len(weights)], leaves[len(weights) :], activation=activation,
                          softplus_beta=5.0, **kw)
        return [y, *torch.autograd.grad(y, leaves, grad_out)]

    ours = grads(compute_dtype=compute_dtype)
    fp32 = grads()
    tol = _tolerance(compute_dtype, len(weights))
    for i, (a, b) in enumerate(zip(ours, fp32)):
        assert _rel(a, b) < tol, (i, _rel(a, b), tol)
    for a, b in zip(ours, grads(compute_dtype=compute_dtype)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
@pytest.mark.parametrize("activation", ["relu", "softplus"])
@pytest.mark.parametrize("sizes", [[3, 64, 64, 64, 64, 1], [7, 32, 5], [6, 256, 256, 9]])
def test_double_backward_every_upstream_term_and_bits(compute_dtype, activation, sizes):
    # The double backward with every upstream term non-zero (v from the input gradient, V_k and
    # c_k from a penalty on every parameter gradient), over the plans these widths select (the
    # register double backward with V_k resident next to W_k up to width 64, the warp-fused kernel
    # reading the weights from the workspace at 256), against the float32 SIMT driver; and the
    # same bits on every call (fixed-order partial sums).
    weights, biases = _network(sizes)
    x = _x(3001, sizes[0])

    def grads(**kw):
        leaves = [t.detach().requires_grad_() for t in (x, *weights, *biases)]
        n = len(weights)
        y = fieldfuse.mlp(leaves[0], leaves[1 : 1 + n], leaves[1 + n :], activation=activation,
                          softplus_beta=5.0, **kw)
        first = torch.autograd.grad(y.square().sum(), leaves, create_graph=True)
        loss = (first[0].norm(dim=1) - 1).square().mean() + sum(g.square().sum() for g in first[1:])
        return [*first, *torch.autograd.grad(loss, leaves)]

    ours = grads(compute_dtype=compute_dtype)
    fp32 = grads()
    tol = _tolerance(compute_dtype, len(weights))
    for i, (a, b) in enumerate(zip(ours, fp32)):
        assert _rel(a, b) < tol, (i, _rel(a, b), tol)
    for a, b in zip(ours, grads(compute_dtype=compute_dtype)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
@pytest.mark.parametrize("activation", ["softplus", "tanh", "silu", "leaky_relu"])
@pytest.mark.parametrize("frozen", [(), (1,), (0, 3)], ids=["all", "frozen1", "frozen0-3"])
def test_eikonal_double_backward_without_weight_penalty(compute_dtype, activation, frozen):
    # The Eikonal step alone: no V_k or c_k, so the register double backward runs without resident
    # V copies, and σ″ = 0 (leaky_relu) skips the tangent products of the reverse sweep. Frozen
    # weights (no dW_k) change which barriers the reverse sweep takes, the top layer's included.
    # Against the float32 SIMT driver, and the same bits on every call.
    weights, biases = _network([3, 64, 64, 64, 1])
    x = _x(3001, 3)

    def grads(**kw):
        leaves = [x.detach().requires_grad_()]
        leaves += [w.detach().requires_grad_(k not in frozen) for k, w in enumerate(weights)]
        leaves += [b.detach().requires_grad_() for b in biases]
        y = fieldfuse.mlp(leaves[0], leaves[1:5], leaves[5:], activation=activation,
                          softplus_beta=5.0, **kw)
        (gx,) = torch.autograd.grad(y.sum(), leaves[0], create_graph=True)
        loss = (gx.norm(dim=1) - 1).square().mean() + y.abs().mean()
        return [y, gx, *torch.autograd.grad(loss, [t for t in leaves if t.requires_grad])]

    ours = grads(compute_dtype=compute_dtype)
    fp32 = grads()
    tol = _tolerance(compute_dtype, len(weights))
    assert len(ours) == 2 + 1 + 4 - len(frozen) + 4
    for i, (a, b) in enumerate(zip(ours, fp32)):
        assert _rel(a, b) < tol, (i, _rel(a, b), tol)
    for a, b in zip(ours, grads(compute_dtype=compute_dtype)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
def test_double_backward_strided_grad_grad_weight(compute_dtype):
    # The register kernels read V_k = dL2/d(grad_weight_k) through its strides as they stage it
    # (Note [mlp staged conversion]): a penalty Σ g_0 gives V_0 as an expanded tensor (strides 0),
    # one on g_1ᵀ a transposed view. The same bits as with those V made contiguous, and within
    # 16-bit error of the float32 driver.
    weights, biases = _network([3, 64, 64, 1])
    x = _x(2049, 3)
    m = torch.randn(64, 64, generator=torch.Generator().manual_seed(5), dtype=F64).float().cuda()

    def grads(strided, **kw):
        leaves = [t.detach().requires_grad_() for t in (x, *weights, *biases)]
        y = fieldfuse.mlp(leaves[0], leaves[1:4], leaves[4:], activation="softplus",
                          softplus_beta=5.0, **kw)
        first = torch.autograd.grad(y.sum(), leaves[:4], create_graph=True)
        if strided:
            penalty = first[1].sum() + (first[2].t() * m).sum()
        else:
            ones = torch.ones_like(first[1])
            penalty = (first[1] * ones).sum() + (first[2] * m.t().contiguous()).sum()
        loss = (first[0].norm(dim=1) - 1).square().mean() + penalty
        return torch.autograd.grad(loss, leaves)

    ours = grads(True, compute_dtype=compute_dtype)
    for a, b in zip(ours, grads(False, compute_dtype=compute_dtype)):
        assert torch.equal(a, b)
    tol = _tolerance(compute_dtype, len(weights))
    for i, (a, b) in enumerate(zip(ours, grads(True))):
        assert _rel(a, b) < tol, (i, _rel(a, b), tol)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
def test_tile_kernels_every_order(compute_dtype):
    # An input wider than the warp-fused kernels take (padded width > 256) keeps 16-bit compute
    # on the tile kernels (Note [tensor-core engine]), in every order.
    test_double_backward_every_upstream_term_and_bits(compute_dtype, "softplus", [300, 32, 2])


@pytest.mark.parametrize("compute_dtype", COMPUTE)
def test_non_contiguous_inputs(compute_dtype):
    weights, biases = _network([6, 32, 3])
    x = _x(300, 12)[:, ::2]
    w_t = [w.t().contiguous().t() for w in weights]
    b_strided = [torch.stack([b, b], 1)[:, 0] for b in biases]
    kw = dict(activation="silu", compute_dtype=compute_dtype)
    ours = _eikonal_grads(x, w_t, b_strided, **kw)
    dense = _eikonal_grads(x.contiguous(), weights, biases, **kw)
    for a, b in zip(ours, dense):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
def test_nan_propagates_to_its_row_only(compute_dtype):
    weights, biases = _network([3, 16, 2])
    x = _x(4, 3)
    x[2, 1] = float("nan")
    y = fieldfuse.mlp(x, weights, biases, activation="tanh", compute_dtype=compute_dtype)
    assert torch.isnan(y[2]).all()
    assert torch.isfinite(y[[0, 1, 3]]).all()


@pytest.mark.parametrize("compute_dtype", COMPUTE)
def test_cuda_graph_capture(compute_dtype):
    weights, biases = _network([3, 64, 64, 1])
    leaves = [t.detach().requires_grad_() for t in (_x(3000, 3), *weights, *biases)]

    def step():
        y = fieldfuse.mlp(leaves[0], leaves[1:4], leaves[4:], activation="softplus",
                          softplus_beta=8.0, compute_dtype=compute_dtype)
        (g,) = torch.autograd.grad(y.sum(), leaves[0], create_graph=True)
        return torch.autograd.grad(g.square().sum() + y.sum(), leaves)

    expected = step()
    graph, captured = capture_cuda_graph(step)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, expected):
        assert torch.equal(a, b)


@pytest.mark.parametrize("compute_dtype", COMPUTE)
def test_torch_compile_fullgraph_every_order(compute_dtype):
    weights, biases = _network([3, 32, 1])
    leaves = [t.detach().requires_grad_() for t in (_x(100, 3), *weights, *biases)]

    def loss_fn(x, w0, w1, b0, b1):
        y = fieldfuse.mlp(x, [w0, w1], [b0, b1], activation="softplus", softplus_beta=5.0,
                          compute_dtype=compute_dtype)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        return (g.norm(dim=1) - 1).square().mean() + y.square().mean()

    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(loss_fn, fullgraph=True)
        ours = torch.autograd.grad(compiled(*leaves), leaves)
    eager = torch.autograd.grad(loss_fn(*leaves), leaves)
    for a, b in zip(ours, eager):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@cuda_only
def test_16bit_compute_needs_float32_masters():
    weights, biases = _network([3, 16, 1])
    with pytest.raises(TypeError, match=r"^mlp\(\): expected x, weights and biases to be float32 "
                                        r"\(the master dtype\) with compute_dtype float16, but got "
                                        r"x of dtype float64"):
        fieldfuse.mlp(_x(4, 3).double(), [w.double() for w in weights],
                      [b.double() for b in biases], compute_dtype=torch.float16)
