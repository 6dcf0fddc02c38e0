# SPDX-License-Identifier: Apache-2.0
"""The op registry (python/fieldfuse/_registry.py): both call paths, flattening, path selection."""

from __future__ import annotations

import pytest
import torch

import fieldfuse
from fieldfuse import _registry
from fieldfuse.tv import _ops as tv_ops


def test_flatten_round_trip_keeps_tensor_lists_and_other_values():
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    values = [a, [b, c], [0.5, 1.0], None, []]
    flat, layout = _registry._flatten(values)
    assert layout == (None, 2, None, None, None)
    assert flat[:3] == [a, b, c]
    rebuilt = _registry._unflatten(flat, layout)
    assert rebuilt[0] is a and rebuilt[1][0] is b and rebuilt[1][1] is c
    assert rebuilt[2:] == [[0.5, 1.0], None, []]


def test_eager_calls_skip_the_dispatcher_and_compiled_calls_use_it():
    vol = torch.rand(2, 3, 4, dtype=torch.float64, requires_grad=True)
    eager = fieldfuse.tv_sq_3d(vol)
    assert type(eager.grad_fn).__name__ == "_EagerAutogradBackward"
    library = torch.ops.fieldfuse.tv_sq_3d_forward(vol)
    assert type(library.grad_fn).__name__ != "_EagerAutogradBackward"
    with torch.no_grad():
        assert fieldfuse.tv_sq_3d(vol).grad_fn is None
    compiled = torch.compile(fieldfuse.tv_sq_3d, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(vol), eager)


@pytest.mark.parametrize("name", ["tv_sq_3d", "tv_iso_3d", "tv_l1_3d", "tv_weighted_l1"])
def test_both_paths_give_the_same_values_and_gradients(name):
    vol = torch.rand(2, 5, 6, 7, dtype=torch.float64, requires_grad=True)
    options = {"tv_iso_3d": (1e-6,), "tv_weighted_l1": ([0.2, 0.5, 0.3],)}.get(name, ())
    op = tv_ops[f"{name}_forward"]
    eager = op(vol, *options)
    library = op.custom_op(vol, *options)
    torch.testing.assert_close(eager, library, rtol=0, atol=0)
    weights = torch.rand_like(eager)
    (eager_grad,) = torch.autograd.grad((eager * weights).sum(), vol)
    (library_grad,) = torch.autograd.grad((library * weights).sum(), vol)
    torch.testing.assert_close(eager_grad, library_grad, rtol=0, atol=0)


def test_library_path_context_routes_public_calls_through_the_dispatcher():
    vol = torch.rand(2, 3, 4, dtype=torch.float64, requires_grad=True)
    with _registry.library_path():
        library = fieldfuse.tv_iso_3d(vol)
    assert type(library.grad_fn).__name__ != "_EagerAutogradBackward"
    assert type(fieldfuse.tv_iso_3d(vol).grad_fn).__name__ == "_EagerAutogradBackward"
    torch.testing.assert_close(library, fieldfuse.tv_iso_3d(vol), rtol=0, atol=0)


def test_meta_tensors_go_through_the_fake_impl():
    out = fieldfuse.tv_l1_3d(torch.empty(2, 3, 4, device="meta"))
    assert out.device.type == "meta" and out.shape == (3,)


def test_meta_beside_real_tensors_is_refused():
    # The fake impl would return the output allocated on x's device and never written.
    x, w = torch.randn(4, 3), [torch.randn(16, 3), torch.randn(2, 16)]
    message = r"^{}\(\): expected every tensor on one device, but got meta tensors beside cpu ones"
    with pytest.raises(ValueError, match=message.format("mlp_forward")):
        fieldfuse.mlp(x, [w[0].to("meta"), w[1]])
    with pytest.raises(ValueError, match=message.format("mlp_forward")):
        fieldfuse.mlp(x.to("meta"), w)
    params = torch.randn(fieldfuse.hash_grid_num_params(3), 2)
    with pytest.raises(ValueError, match=message.format("hash_grid_forward")):
        fieldfuse.hash_grid(torch.rand(4, 3), params.to("meta"))
    assert fieldfuse.mlp(x.to("meta"), [t.to("meta") for t in w]).shape == (4, 2)


# torch's forward AD loads its jvp decompositions through torch.jit.script on first use.
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_forward_mode_tangents_are_refused():
    # No op has a forward-mode formula: a tangent reaching one is an error on both paths, where
    # the eager impl dropped it and torch.func.jvp got a zero tangent.
    import torch.autograd.forward_ad as fwad

    vol = torch.randn(2, 3, 4, dtype=torch.float64)
    message = r"^tv_l1_3d_forward\(\): forward-mode AD .* is not supported"
    with pytest.raises(NotImplementedError, match=message):
        torch.func.jvp(fieldfuse.tv_l1_3d, (vol,), (torch.ones_like(vol),))
    with fwad.dual_level():
        with pytest.raises(NotImplementedError, match=message):
            fieldfuse.tv_l1_3d(fwad.make_dual(vol, torch.ones_like(vol)))
        assert torch.equal(fieldfuse.tv_l1_3d(vol), fieldfuse.tv_l1_3d(vol))  # no tangent: runs


def test_every_registered_op_has_a_fake_impl():
    # torch.library.opcheck runs in each family's tests; here: every op of every table is a
    # custom op under fieldfuse:: whose name matches its table entry.
    for name, op in tv_ops.items():
        assert op.spec.name == name
        assert hasattr(torch.ops.fieldfuse, name)


def test_an_active_dispatch_mode_sees_the_op():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Names(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    vol = torch.rand(2, 3, 4, dtype=torch.float64, requires_grad=True)
    with Names() as mode:
        torch.autograd.grad(fieldfuse.tv_sq_3d(vol), vol)
    assert "fieldfuse.tv_sq_3d_forward.default" in mode.names
    assert "fieldfuse.tv_sq_3d_backward.default" in mode.names


def _optional_output_table(name):
    """A toy table whose op returns x + 1 and, when asked, x * 2: the impl gives a 0-element tensor
    for the unrequested output, the eager impl None (Note [op table], eager_impl)."""

    def run(absent, x, want_double):
        return x + 1, (x * 2 if want_double else absent(x))

    def setup_context(ctx, inputs, output):
        ctx.want_double = inputs[1]
        ctx.saw_none = output[1] is None

    def backward(ctx, grad_plus, grad_double):
        grad = grad_plus
        if ctx.want_double and grad_double is not None:
            grad = grad + 2 * grad_double
        return grad, None

    return _registry.register([_registry.OpSpec(
        name, lambda x, w: run(lambda t: t.new_empty(0), x, w),
        lambda x, w: (torch.empty_like(x), torch.empty_like(x) if w else x.new_empty(0)),
        setup_context, backward, materialize_grads=False,
        schema="(Tensor x, bool want_double) -> (Tensor, Tensor)",
        eager_impl=lambda x, w: run(lambda t: None, x, w),
    )])[name]


def test_eager_impl_returns_none_for_unrequested_outputs_on_the_eager_path_only():
    op = _optional_output_table("registry_test_optional_output")
    x = torch.rand(4, dtype=torch.float64, requires_grad=True)
    plus, double = op(x, False)
    assert double is None  # eager: nothing allocated
    (grad,) = torch.autograd.grad(plus.sum(), x)
    torch.testing.assert_close(grad, torch.ones_like(x))
    with torch.no_grad():
        assert op(x, False)[1] is None
    plus, double = op.custom_op(x, False)  # the library path: a 0-element placeholder
    assert double.shape == (0,)
    for call in (op, op.custom_op):
        plus, double = call(x, True)
        (grad,) = torch.autograd.grad(plus.sum() + double.sum(), x)
        torch.testing.assert_close(grad, torch.full_like(x, 3.0))


def test_call_in_backward_skips_the_path_checks_only_on_the_eager_path(monkeypatch):
    calls = []
    original = _registry.Op.__call__

    def spy(self, *args):
        calls.append(self.spec.name)
        return original(self, *args)

    monkeypatch.setattr(_registry.Op, "__call__", spy)
    values = torch.rand(5, 2, dtype=torch.float64, requires_grad=True)
    offsets = torch.tensor([0, 2, 5])
    fieldfuse.line_integral(values, torch.rand(5, dtype=torch.float64), offsets).sum().backward()
    assert calls == ["line_integral_forward"]  # the backward op ran its eager impl directly
    calls.clear()
    deltas = torch.rand(5, dtype=torch.float64)
    out = torch.ops.fieldfuse.line_integral_forward(values, deltas, offsets)
    (grad,) = torch.autograd.grad(out.sum(), values, create_graph=True)
    assert calls == ["line_integral_backward"]  # the library path calls the op as before
    torch.testing.assert_close(grad, deltas[:, None].expand(5, 2), rtol=0, atol=0)


def _plan_table(name, seen):
    """A toy op over every argument kind of Note [eager argument plan]:
    ``x * s + y + Σ_i zs[i]`` (all ``[n]``; y may be None); the formula records the
    ``needs_input_grad`` and ``wants_input_grad`` it saw in ``seen``."""

    def run(x, y, zs, s):
        out = x * s if y is None else x * s + y
        for z in zs:
            out = out + z
        return out

    def setup_context(ctx, inputs, output):
        x, y, zs, s = inputs
        ctx.has_y, ctx.num_zs, ctx.s = y is not None, len(zs), s

    def backward(ctx, grad):
        needs = _registry.needs_input_grad(ctx)
        seen.append((needs, _registry.wants_input_grad(ctx)))
        return (grad * ctx.s if needs[0] else None, grad if ctx.has_y and needs[1] else None,
                [grad if need else None for need in needs[2]], None)

    return _registry.register([_registry.OpSpec(
        name, run, lambda x, y, zs, s: torch.empty_like(x), setup_context, backward,
        schema="(Tensor x, Tensor? y, Tensor[] zs, float s) -> Tensor",
    )])[name]


@pytest.mark.parametrize("has_y", [False, True])
@pytest.mark.parametrize("num_zs", [0, 1, 3])
def test_argument_plan_follows_each_call_on_both_paths(has_y, num_zs):
    # The plan is fixed per op; the slots (which list is how long, whether an optional tensor is
    # there) are each call's own, so calls of different shapes in a row must not share them.
    seen = []
    op = _plan_table(f"registry_test_plan_{int(has_y)}_{num_zs}", seen)
    for length in (num_zs, num_zs + 2, num_zs):  # a longer list in between
        x = torch.rand(4, dtype=torch.float64, requires_grad=True)
        y = torch.rand(4, dtype=torch.float64, requires_grad=True) if has_y else None
        zs = [torch.rand(4, dtype=torch.float64, requires_grad=i % 2 == 0) for i in range(length)]
        results = []
        for call in (op, op.custom_op):
            seen.clear()
            out = call(x, y, zs, 3.0)
            inputs = [x] + ([y] if has_y else []) + [z for z in zs if z.requires_grad]
            grads = torch.autograd.grad((out * torch.arange(4.0)).sum(), inputs)
            results.append((out, grads, seen[0]))
        (eager, eager_grads, (eager_needs, eager_wants)), \
            (library, library_grads, (library_needs, library_wants)) = results
        assert type(eager.grad_fn).__name__ == "_EagerAutogradBackward"
        torch.testing.assert_close(eager, library, rtol=0, atol=0)
        for a, b in zip(eager_grads, library_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert eager_needs == (True, has_y, [i % 2 == 0 for i in range(length)], False)
        assert tuple(library_needs[:2]) == eager_needs[:2]
        assert list(library_needs[2]) == eager_needs[2]
        wants = [True, has_y, length > 0, False]  # zs[0] needs a gradient, zs[1] not, ...
        assert eager_wants == library_wants == wants


def test_arguments_that_do_not_fit_the_plan_take_the_library_path():
    op = _plan_table("registry_test_plan_misfit", [])
    x = torch.rand(4, dtype=torch.float64)
    with pytest.raises((TypeError, RuntimeError)):
        op(x, None, x, 1.0)  # a tensor where the schema has Tensor[]: torch's own schema error
    with pytest.raises((TypeError, RuntimeError)):
        op(x, None, [x])  # an argument short


def test_eager_path_narrows_the_flags_to_the_gradients_the_pass_uses():
    # Note [gradients the pass uses]: torch.autograd.grad(out, x) and backward(inputs=...) use
    # some inputs' gradients only; the eager path's flags say so, the library path's keep
    # requires_grad, and both give the same gradients.
    seen = []
    op = _plan_table("registry_test_plan_pass_uses", seen)
    x, y = (torch.rand(4, dtype=torch.float64, requires_grad=True) for _ in range(2))
    zs = [torch.rand(4, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    weights = torch.rand(4, dtype=torch.float64)
    for asked, needs in (
        ([x], (True, False, [False, False, False], False)),
        ([zs[1]], (False, False, [False, True, False], False)),
        ([y, zs[2]], (False, True, [False, False, True], False)),
        ([x, y, *zs], (True, True, [True, True, True], False)),
    ):
        grads, records = [], []
        for call in (op, op.custom_op):
            seen.clear()
            grads.append(torch.autograd.grad((call(x, y, zs, 2.0) * weights).sum(), asked))
            records.append(seen[0])
        (eager_needs, eager_wants), (library_needs, _) = records
        assert eager_needs == needs
        assert eager_wants == [needs[0], needs[1], any(needs[2]), False]
        assert library_needs[:2] == (True, True) and list(library_needs[2]) == [True] * 3
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    # backward(inputs=...) and a plain backward, which uses every gradient.
    seen.clear()
    op(x, y, zs, 2.0).sum().backward(inputs=[zs[0]])
    assert seen[0][0] == (False, False, [True, False, False], False)
    seen.clear()
    op(x, y, zs, 2.0).sum().backward()
    assert seen[0][0] == (True, True, [True, True, True], False)


def test_a_gradient_that_flows_on_through_other_nodes_counts_where_the_pass_uses_it():
    seen = []
    op = _plan_table("registry_test_plan_pass_uses_chain", seen)
    leaf = torch.rand(4, dtype=torch.float64, requires_grad=True)
    x, y = leaf * 2, leaf.exp()  # edges into MulBackward0 and ExpBackward0, not leaves
    z = torch.rand(4, dtype=torch.float64, requires_grad=True)
    torch.autograd.grad(op(x, y, [z], 1.0).sum(), z)
    assert seen[-1][0] == (False, False, [True], False)
    torch.autograd.grad(op(x, y, [z], 1.0).sum(), leaf)
    assert seen[-1][0] == (True, True, [False], False)
    (grad,) = torch.autograd.grad(op(x, y, [z], 1.0).sum(), y)  # captured where it enters y's node
    assert seen[-1][0] == (False, True, [False], False)
    torch.testing.assert_close(grad, torch.ones_like(grad), rtol=0, atol=0)
