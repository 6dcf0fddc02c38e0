# SPDX-License-Identifier: Apache-2.0
"""Fused MLP with exact first- and second-order derivatives (the ``mlp`` family).

Layer k computes ``p_k = W_k a_{k−1} + b_k``, ``a_k = σ_k(p_k)`` with ``a_0 = x``; the hidden layers
use ``activation`` and the last one ``output_activation``. The backward is itself differentiable
(its backward is the spec's four-step double backward), so ``torch.autograd.grad(y, x,
create_graph=True)`` inside a loss (an Eikonal term) trains the weights, biases and x.

Raw ops (each with a fake impl, so ``torch.compile(fullgraph=True)`` traces them and CUDA graphs
capture them): ``torch.ops.fieldfuse.mlp_forward``, ``mlp_backward`` (differentiable),
``mlp_double_backward`` (not differentiable: third order raises PyTorch's error) and
``mlp_value_and_input_grad`` (y and the input gradient; differentiable once).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import _registry
from ._backend import _C, check_tensor, dl, real_number, stream_of, workspace

ACTIVATIONS = ("relu", "leaky_relu", "softplus", "sine", "tanh", "sigmoid", "silu", "exp", "none")

# The network arguments every op takes, in this order (the C++ entries' and the bindings' too).
_NETWORK = ("Tensor x, Tensor[] weights, Tensor[] biases, str activation, str output_activation, "
            "float softplus_beta, float sine_omega0, float leaky_slope, ScalarType? compute_dtype")
_NUM_OPTIONS = 6  # activation .. compute_dtype


def _c_args(x, weights, biases, options):
    """The network as the bindings take it (DLPack capsules; compute_dtype by name)."""
    *names_and_numbers, compute_dtype = options
    dtype_name = None if compute_dtype is None else str(compute_dtype).removeprefix("torch.")
    return (dl(x), [dl(w) for w in weights], [dl(b) for b in biases], *names_and_numbers,
            dtype_name)


def _scratch(query, x, weights, biases, options) -> Tensor:
    return workspace(query(*_c_args(x, weights, biases, options)), x.device)


# --- forward --------------------------------------------------------------------------------


def _out_like(x, weights):
    return x.new_empty((x.shape[0], weights[-1].shape[0]))  # every element is written


def _forward(x, weights, biases, *options):
    out = _out_like(x, weights)
    scratch = _scratch(_C.mlp_forward_workspace_size, x, weights, biases, options)
    _C.mlp_forward(*_c_args(x, weights, biases, options), dl(out), dl(scratch), stream_of(x))
    return out


def _forward_fake(x, weights, biases, *options):
    return _out_like(x, weights)


def _save_network(ctx, inputs, extra=()):
    x, weights, biases, *rest = inputs
    ctx.save_for_backward(x, *weights, *biases, *extra)
    ctx.num_layers, ctx.num_biases = len(weights), len(biases)
    ctx.options = tuple(rest[:_NUM_OPTIONS])


def _saved_network(ctx):
    saved = ctx.saved_tensors
    x, rest = saved[0], saved[1:]
    weights = list(rest[: ctx.num_layers])
    biases = list(rest[ctx.num_layers : ctx.num_layers + ctx.num_biases])
    return x, weights, biases, rest[ctx.num_layers + ctx.num_biases :]


def _forward_setup(ctx, inputs, output):
    _save_network(ctx, inputs)


def _network_grads(weights, biases, want_x=False, want_params=False, grads=(None, None, None)):
    """The gradients of the network arguments (x, weights, biases, the options) from (grad_x,
    grad_weights, grad_biases), each kept where wanted, in the structure the library path checks:
    a list for each Tensor[] argument, of Nones where nothing was computed (a bare None there is
    an error under torch.compile)."""
    grad_x, grad_weights, grad_biases = grads
    return (grad_x if want_x else None,
            grad_weights if want_params else [None] * len(weights),
            grad_biases if want_params else [None] * len(biases),
            *(None,) * _NUM_OPTIONS)


def _forward_gradient(ctx, grad_out):
    x, weights, biases, _ = _saved_network(ctx)
    wants = _registry.wants_input_grad(ctx)
    want_x, want_params = wants[0], wants[1] or wants[2]
    grads = _registry.call_in_backward(
        ctx, _ops["mlp_backward"], x, weights, biases, *ctx.options, grad_out, want_x, want_params)
    return _network_grads(weights, biases, want_x, want_params, grads)


# --- backward ------------------------------------------------------------------------------


def _param_grads(x, weights, biases, wanted: bool):
    if not wanted:
        return [], []
    return [torch.empty_like(w, memory_format=torch.contiguous_format) for w in weights], [
        torch.empty_like(b, memory_format=torch.contiguous_format) for b in biases]


def _maybe(tensor_like: Tensor, wanted: bool) -> Tensor:
    """A contiguous output shaped like `tensor_like`, or a 0-element tensor where nobody asked."""
    if wanted:
        return torch.empty_like(tensor_like, memory_format=torch.contiguous_format)
    return tensor_like.new_empty(0)


def _run_backward(x, weights, biases, options, grad_out, want_x, want_params, out=None):
    """The backward entry's gradients; where `out` is given it also receives y, which the
    backward recomputes on its way."""
    grad_x = _maybe(x, want_x)
    grad_weights, grad_biases = _param_grads(x, weights, biases, want_params)
    scratch = _scratch(_C.mlp_backward_workspace_size, x, weights, biases, options)
    _C.mlp_backward(*_c_args(x, weights, biases, options), dl(grad_out),
                    dl(grad_x) if want_x else None,
                    [dl(g) for g in grad_weights] if want_params else None,
                    [dl(g) for g in grad_biases] if want_params else None,
                    None if out is None else dl(out), dl(scratch), stream_of(x))
    return grad_x, grad_weights, grad_biases


def _backward(x, weights, biases, *rest):
    *options, grad_out, want_x, want_params = rest
    return _run_backward(x, weights, biases, options, grad_out, want_x, want_params)


def _backward_fake(x, weights, biases, *rest):
    *_, want_x, want_params = rest
    return (_maybe(x, want_x), *_param_grads(x, weights, biases, want_params))


def _backward_setup(ctx, inputs, output):
    *_, grad_out, want_x, want_params = inputs
    _save_network(ctx, inputs, extra=(grad_out,))
    ctx.want_x, ctx.want_params = want_x, want_params


def _upstream(grads, like) -> list:
    """Upstream gradients of a list output as the double backward takes them: [] when none reached
    it (the eager path passes None for unused outputs: materialize_grads=False), else one tensor
    per entry (zeros where one is missing)."""
    if grads is None or all(g is None for g in grads):
        return []
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, like, strict=True)]


def _backward_gradient(ctx, grad_grad_x, grad_grad_weights, grad_grad_biases):
    # Note [mlp second order]: the backward's outputs are grad_x, grad_weights and grad_biases;
    # upstream gradients may reach all three (an Eikonal loss uses grad_x only; gradgradcheck and
    # penalties on weight gradients use the others), and mlp_double_backward takes all of them.
    x, weights, biases, (grad_out,) = _saved_network(ctx)
    upstream_weights = _upstream(grad_grad_weights if ctx.want_params else None, weights)
    upstream_biases = _upstream(grad_grad_biases if ctx.want_params else None, biases)
    if not ctx.want_x or grad_grad_x is None:
        if not upstream_weights and not upstream_biases:
            return (*_network_grads(weights, biases), None, None, None)
        grad_grad_x = torch.zeros_like(x)
    wants = _registry.wants_input_grad(ctx)
    want_x, want_params = wants[0], wants[1] or wants[2]
    want_grad_out = wants[3 + _NUM_OPTIONS]
    grad_grad_out, *grads = _ops["mlp_double_backward"](
        x, weights, biases, *ctx.options, grad_out, grad_grad_x, upstream_weights,
        upstream_biases, None, want_grad_out, want_x, want_params)
    return (*_network_grads(weights, biases, want_x, want_params, grads),
            (grad_grad_out if want_grad_out else None), None, None)


# --- double backward -----------------------------------------------------------------------


def _double_backward(x, weights, biases, *rest):
    *options, grad_out, grad_grad_x, upstream_weights, upstream_biases, grad_y, want_grad_out, \
        want_x, want_params = rest
    grad_grad_out = _maybe(grad_out, want_grad_out)
    grad_x = _maybe(x, want_x)
    grad_weights, grad_biases = _param_grads(x, weights, biases, want_params)
    scratch = _scratch(_C.mlp_double_backward_workspace_size, x, weights, biases, options)
    _C.mlp_double_backward(*_c_args(x, weights, biases, options), dl(grad_out), dl(grad_grad_x),
                           [dl(g) for g in upstream_weights], [dl(g) for g in upstream_biases],
                           None if grad_y is None else dl(grad_y),
                           dl(grad_grad_out) if want_grad_out else None,
                           dl(grad_x) if want_x else None,
                           [dl(g) for g in grad_weights] if want_params else None,
                           [dl(g) for g in grad_biases] if want_params else None,
                           dl(scratch), stream_of(x))
    return grad_grad_out, grad_x, grad_weights, grad_biases


def _double_backward_fake(x, weights, biases, *rest):
    *_, grad_out, _, _, _, _, want_grad_out, want_x, want_params = rest
    return (_maybe(grad_out, want_grad_out), _maybe(x, want_x),
            *_param_grads(x, weights, biases, want_params))


# --- value and input gradient ------------------------------------------------------------------

# Note [mlp value and input gradient]
# An SDF's training step puts a loss on y = f(x) (the surface term) and on g = ∂(grad_outᵀy)/∂x
# (the Eikonal term). Through mlp + autograd.grad(create_graph=True), the step's backward runs two
# kernels over the batch: the double backward for ∂L/∂g and a first-order backward for ∂L/∂y. This
# op returns (y, g) from one node, so its backward sees both upstream gradients at once and runs one
# double backward with r_L = ∂L/∂y (mlp_double_backward's grad_y): r and q are linear in r_L, so the
# sweep adds exactly the first-order backward's dW, db and grad_x for grad_out = ∂L/∂y, at the
# cost of loading one more [B, out] matrix. Its forward is one input-gradient backward that also
# writes y (mlp_backward's `out`), where the two-op form runs the forward and then that backward.


def _value_and_input_grad(x, weights, biases, *rest):
    *options, grad_out = rest
    out = _out_like(x, weights)  # one kernel: the input-gradient backward writes y on its way
    grad_x, _, _ = _run_backward(x, weights, biases, options, grad_out, True, False, out)
    return out, grad_x


def _value_and_input_grad_fake(x, weights, biases, *rest):
    return _out_like(x, weights), _maybe(x, True)


def _value_and_input_grad_setup(ctx, inputs, output):
    *_, grad_out = inputs
    _save_network(ctx, inputs, extra=(grad_out,))


def _value_and_input_grad_gradient(ctx, grad_y, grad_grad_x):
    # Note [mlp value and input gradient]: a loss on y and on g = ∂(grad_outᵀy)/∂x at once is the
    # double backward with r_L = grad_y, in one sweep; y alone needs only the first-order backward.
    x, weights, biases, (grad_out,) = _saved_network(ctx)
    wants = _registry.wants_input_grad(ctx)
    want_x, want_params = wants[0], wants[1] or wants[2]
    want_grad_out = wants[3 + _NUM_OPTIONS]
    if grad_grad_x is None:
        if grad_y is None or not (want_x or want_params):
            return (*_network_grads(weights, biases), None)
        grads = _registry.call_in_backward(
            ctx, _ops["mlp_backward"], x, weights, biases, *ctx.options, grad_y, want_x,
            want_params)
        grad_grad_out = None
    else:
        grad_grad_out, *grads = _registry.call_in_backward(
            ctx, _ops["mlp_double_backward"], x, weights, biases, *ctx.options, grad_out,
            grad_grad_x, [], [], grad_y, want_grad_out, want_x, want_params)
    return (*_network_grads(weights, biases, want_x, want_params, grads),
            (grad_grad_out if want_grad_out else None))


# Note [op table]: the four MLP ops, registered once (custom op, fake, autograd, eager path).
_ops = _registry.register([
    _registry.OpSpec(
        "mlp_forward", _forward, _forward_fake, _forward_setup, _forward_gradient,
        schema=f"({_NETWORK}) -> Tensor",
    ),
    _registry.OpSpec(
        "mlp_backward", _backward, _backward_fake, _backward_setup, _backward_gradient,
        materialize_grads=False,
        schema=f"({_NETWORK}, Tensor grad_out, bool want_x, bool want_params) "
               "-> (Tensor, Tensor[], Tensor[])",
    ),
    _registry.OpSpec(
        "mlp_double_backward", _double_backward, _double_backward_fake,
        schema=f"({_NETWORK}, Tensor grad_out, Tensor grad_grad_x, Tensor[] grad_grad_weights, "
               "Tensor[] grad_grad_biases, Tensor? grad_y, bool want_grad_out, bool want_x, "
               "bool want_params) -> (Tensor, Tensor, Tensor[], Tensor[])",
    ),
    _registry.OpSpec(
        "mlp_value_and_input_grad", _value_and_input_grad, _value_and_input_grad_fake,
        _value_and_input_grad_setup, _value_and_input_grad_gradient, materialize_grads=False,
        schema=f"({_NETWORK}, Tensor grad_out) -> (Tensor, Tensor)",
    ),
])


def _biases_list(fn: str, weights: list, biases) -> list:
    """The schema's ``Tensor[] biases`` (empty: no biases). Per-layer None entries cannot cross a
    ``Tensor[]``, so a list must hold a tensor for every layer (the C++ API accepts absent ones)."""
    if biases is None:
        return []
    biases = list(biases)
    for k, b in enumerate(biases):
        check_tensor(fn, f"biases[{k}]", b)
    return biases


def _network(fn, x, weights, biases, activation, output_activation, softplus_beta, sine_omega0,
             leaky_slope, compute_dtype) -> tuple:
    """The ops' network arguments from a public function's, checked where Python reads them
    before the C++ entry does (errors start with ``fn(): ``)."""
    check_tensor(fn, "x", x)  # allocating the output reads its shape, dtype and device
    if isinstance(weights, Tensor) or not isinstance(weights, Sequence):
        raise TypeError(f"{fn}(): expected weights to be a sequence of tensors, but got "
                        f"{type(weights).__name__}")
    weights = list(weights)
    for k, w in enumerate(weights):
        check_tensor(fn, f"weights[{k}]", w)
    if not weights:
        raise ValueError(f"{fn}(): expected weights to hold at least one layer, but got 0")
    if weights[-1].dim() < 1:  # the output width is read from it to allocate the output
        raise ValueError(f"{fn}(): expected weights[{len(weights) - 1}] to be 2-D [out, in], but "
                         f"got shape {list(weights[-1].shape)}")
    if x.dim() < 1:  # the batch is read from it to allocate the output
        raise ValueError(f"{fn}(): expected x to be 2-D [B, in], but got shape {list(x.shape)}")
    for arg, value in (("activation", activation), ("output_activation", output_activation)):
        if not isinstance(value, str):
            raise TypeError(f"{fn}(): expected {arg} to be a string, but got "
                            f"{type(value).__name__}")
    if compute_dtype is not None and not isinstance(compute_dtype, torch.dtype):
        raise TypeError(f"{fn}(): expected compute_dtype to be None or a torch.dtype, but got "
                        f"{type(compute_dtype).__name__}")
    return (x, weights, _biases_list(fn, weights, biases), activation, output_activation,
            real_number(fn, "softplus_beta", softplus_beta),
            real_number(fn, "sine_omega0", sine_omega0),
            real_number(fn, "leaky_slope", leaky_slope), compute_dtype)


def mlp(
    x: Tensor,
    weights: Sequence[Tensor],
    biases: Sequence[Tensor] | None = None,
    *,
    activation: str = "relu",
    output_activation: str = "none",
    softplus_beta: float = 1.0,
    sine_omega0: float = 30.0,
    leaky_slope: float = 0.01,
    compute_dtype: torch.dtype | None = None,
) -> Tensor:
    """A fused MLP: ``y = σ_out(W_L σ(… σ(W_1 x + b_1) …) + b_L)``.

    Args:
        x: ``[B, in]`` (differentiable), float32 or float64, any strides; B may be 0.
        weights: one ``[out_k, in_k]`` tensor per layer (``torch.nn.Linear`` layout,
            differentiable), ``in_0 = in``, ``in_k = out_{k−1}``; hidden widths (every out_k but
            the last) are multiples of 16 from 16 to 256; the input and output widths are any size.
        biases: None, or one ``[out_k]`` tensor per layer (differentiable).
        activation: hidden activation, one of ``relu``, ``leaky_relu`` (slope ``leaky_slope``),
            ``softplus`` (``log1p(exp(βp))/β``, β = ``softplus_beta``, exactly p where βp > 20),
            ``sine`` (``sin(ω₀p)``, ω₀ = ``sine_omega0``), ``tanh``, ``sigmoid``, ``silu``, ``exp``,
            ``none``.
        output_activation: the last layer's activation, from the same list.
        compute_dtype: None (x's dtype), or ``torch.float16`` / ``torch.bfloat16`` for tensor-core
            products with float32 accumulation (CUDA only, float32 parameters).

    Returns:
        ``[B, out]`` in x's dtype. Gradients reach x, weights and biases, and the backward is
        differentiable once more (through all of its outputs: Eikonal losses, gradient penalties);
        third order is not supported. Parameter gradients are summed in a fixed order: the same
        inputs give the same bits on every run.
    """
    return _ops["mlp_forward"](*_network(
        "mlp", x, weights, biases, activation, output_activation, softplus_beta, sine_omega0,
        leaky_slope, compute_dtype))


def mlp_value_and_input_grad(
    x: Tensor,
    weights: Sequence[Tensor],
    biases: Sequence[Tensor] | None = None,
    grad_out: Tensor | None = None,
    *,
    activation: str = "relu",
    output_activation: str = "none",
    softplus_beta: float = 1.0,
    sine_omega0: float = 30.0,
    leaky_slope: float = 0.01,
    compute_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """The MLP's output and its input gradient in one op: ``(y, ∂(Σ grad_out ⊙ y)/∂x)``.

    For an SDF ``y = f(x)`` with one output, ``grad_out=None`` (ones) gives ``(f(x), ∇f(x))``, what
    ``y = mlp(x, ...)`` followed by ``torch.autograd.grad(y, x, torch.ones_like(y),
    create_graph=True)`` gives, and the same gradients flow back. The difference is the backward:
    a loss on both outputs (an SDF's surface and Eikonal terms) gets all of its gradients from one
    double-backward sweep that starts its second reverse recurrence at ``∂L/∂y`` (exact, by
    linearity; Note [mlp value and input gradient]), where the two-op form also runs a first-order
    backward for the loss on y.

    Args:
        x, weights, biases, and the keyword arguments: as :func:`mlp`.
        grad_out: ``[B, out]`` (differentiable), the output weighting; None: ones.

    Returns:
        ``y [B, out]`` and ``grad_x [B, in]``, both in x's dtype. Gradients reach x, weights,
        biases and grad_out from either output; where they come from a loss on grad_x they are
        not differentiable again (third order is not supported). Errors start with
        ``mlp_value_and_input_grad(): `` where Python checks the arguments and otherwise name the
        C++ entry (``mlp_backward(): ``, which computes both outputs, or
        ``mlp_double_backward(): ``).
    """
    fn = "mlp_value_and_input_grad"
    network = _network(fn, x, weights, biases, activation, output_activation, softplus_beta,
                       sine_omega0, leaky_slope, compute_dtype)
    if grad_out is None:  # ones, without writing them: the kernels take any strides
        grad_out = x.new_ones((1, 1)).expand(x.shape[0], network[1][-1].shape[0])
    else:
        check_tensor(fn, "grad_out", grad_out)
    return tuple(_ops["mlp_value_and_input_grad"](*network, grad_out))
