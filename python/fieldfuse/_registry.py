# SPDX-License-Identifier: Apache-2.0
"""Registers every fieldfuse op from its family's op table (Note [op table]).

Note [op table]
---------------
Each family module (``tv.py``, ``kplanes.py``, ``render.py``, ...) describes its ops once, as a list
of :class:`OpSpec` entries, and hands the list to :func:`register`. One entry is one
``torch.library`` custom op ``fieldfuse::<name>``:

- ``impl`` allocates the outputs (and workspace) and calls the C++ entry point ``_C.<name>``. The
  op's schema is ``schema`` or, without one, ``impl``'s annotations; either way its argument names
  are the ones of the Python signature and of the C++ header.
- ``fake`` returns uninitialised outputs of the right shapes and dtypes (``torch.compile``,
  ``opcheck``, meta tensors); most entries share one allocation helper between ``impl`` and ``fake``.
- ``setup_context`` and ``backward`` are the autograd formula, in ``torch.library.register_autograd``
  form. ``backward`` calls the family's backward ops through the :class:`Op` objects that
  :func:`register` returns, so the same formula serves both call paths below, and a backward op with
  an autograd entry of its own gives double backward. (``call_in_backward(ctx, op, ...)`` makes
  that call without the path checks where they cannot change the answer.)
- ``non_differentiable`` lists outputs autograd never tracks (counts, saved state).
- ``eager_impl`` (optional) is what the eager fast path runs instead of ``impl``: the same
  computation, except that it may return None for outputs the caller did not ask for. A custom op
  must return a tensor for every output of its schema, so ``impl`` returns 0-element tensors
  there; on the eager path each such allocation is host time spent on nothing (2–4 µs on CUDA).
  ``setup_context`` and ``backward`` then see None for those outputs (and, with
  ``materialize_grads=False``, None for their gradients).

:func:`register` returns an :class:`Op` per entry. Calling it picks one of two paths:

- **through the library** (``torch.ops.fieldfuse.<name>``): under ``torch.compile`` or tracing,
  while a ``TorchDispatchMode`` is active (op counters, FakeTensorMode, profilers that dispatch:
  the fast path would hide the op from them), for tensor subclasses (fake tensors, functional
  wrappers), functorch transforms and devices the kernels do not run on (meta). These see the op by its fake impl and dispatch normally.
- **eager fast path**: plain CPU/CUDA tensors run ``impl`` directly, wrapped in an
  ``autograd.Function`` over the very same ``setup_context``/``backward`` when a gradient is needed.
  torch.library's per-call dispatch (schema parsing of defaults, redispatch, the autograd wrapper)
  costs more host time than the kernels take at typical sizes, so a small training step would be
  bound by the host (bench/RESULTS.md, "host time").

Both paths give the same values and gradients; the tests run every op through both. Validation
lives in the C++ front: Python checks only what it must know to allocate outputs, and says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import Tensor

__all__ = [
    "Op",
    "OpSpec",
    "call_in_backward",
    "library_path",
    "needs_input_grad",
    "register",
    "wants_input_grad",
]

# Set by library_path(): every call takes the library path (tests and the host-time benchmark
# compare the two paths on the same inputs).
_force_library = False


@contextlib.contextmanager
def library_path() -> Iterator[None]:
    """Within this block every fieldfuse op goes through ``torch.ops.fieldfuse`` (the dispatcher,
    fake impls, registered autograd), as under ``torch.compile``."""
    global _force_library
    previous, _force_library = _force_library, True
    try:
        yield
    finally:
        _force_library = previous


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One op of a family's table (Note [op table])."""

    name: str  #: op name: fieldfuse::<name>, and the C++ entry point / binding of the same name
    impl: Callable  #: runs the op; allocates its outputs
    fake: Callable  #: same arguments; uninitialised outputs of the right metadata
    setup_context: Callable | None = None  #: (ctx, inputs, output): saves what backward needs
    backward: Callable | None = None  #: (ctx, *grad_outputs) -> one gradient per input
    non_differentiable: tuple[int, ...] = ()  #: output positions autograd never tracks
    #: False: ``backward`` takes None for outputs with no gradient (else zeros, as the library path)
    materialize_grads: bool = True
    schema: str | None = None  #: e.g. "(Tensor vol, float eps) -> Tensor"; else impl's annotations
    #: the eager fast path's impl: may return None for unrequested outputs (default: ``impl``)
    eager_impl: Callable | None = None


def call_in_backward(ctx, op: "Op", *args):
    """A backward formula's call of another op (``backward`` of an :class:`OpSpec`).

    On the eager path with no graph being built (no ``create_graph``), the arguments are the eager
    path's own plain tensors, so the op's eager impl runs directly: :meth:`Op.__call__`'s path
    checks would only cost host time (about 4 µs a call for render's backward, measured on CPU).
    Otherwise, e.g. in double backward or on the library path, it is a plain call of ``op``."""
    if not torch.is_grad_enabled() and getattr(ctx, "ff", None) is not None:
        return op.run_eagerly(*args)
    return op(*args)


def needs_input_grad(ctx) -> tuple:
    """Which inputs need a gradient, one entry per input (a list of bools for a list of tensors),
    on either call path: the eager path's ``autograd.Function`` sees only the tensors, lists
    spliced in, so the per-input form is rebuilt here from the slots its forward recorded (only
    for formulas that ask: most backward calls never need it). On the eager path an input whose
    gradient the running backward pass will not use counts as not needing one (Note [gradients
    the pass uses])."""
    eager = getattr(ctx, "ff", None)
    if eager is None:  # the library path: torch.library gives the per-input form
        return ctx.needs_input_grad
    return tuple(_per_input(ctx, eager[1], False))


def wants_input_grad(ctx) -> list[bool]:
    """One bool per input: whether it (any tensor of a list) needs a gradient, on either call path.
    What formulas take from :func:`needs_input_grad`, in one step (0.3 µs less per eager backward
    at K-Planes' six inputs, CPU)."""
    eager = getattr(ctx, "ff", None)
    if eager is None:
        return [any(flag) if isinstance(flag, (list, tuple)) else bool(flag)
                for flag in ctx.needs_input_grad]
    return _per_input(ctx, eager[1], True)


# Note [gradients the pass uses]
# ``ctx.needs_input_grad`` says which inputs require grad; it does not say which gradients the
# running backward pass will use. ``torch.autograd.grad(y, x, create_graph=True)`` (an Eikonal
# term's input gradient) needs only x's, yet a custom Function is asked for the weights' too
# (pytorch/pytorch#174017), and an MLP's or a hash grid's parameter gradient is the larger part
# of its backward. PyTorch's own ops skip such outputs: the engine marks the nodes a pass will
# execute (its graph task's exec_info), and ``torch._C._will_engine_execute_node(node)`` reads
# that mark for the node an input's gradient flows into. On the eager path, whose
# autograd.Function has one edge per tensor (``next_functions``, in order), the flags are narrowed
# by it; the query raises for a leaf that ``torch.autograd.grad`` captures, one whose gradient is
# asked for. Where at most one input requires grad nothing is asked: the node runs because some
# input's gradient is used. Reading the edges and asking costs about 4 µs per backward of an MLP
# whose eleven inputs all require grad (CPU, bench/RESULTS.md), so for a list of tensors
# wants_input_grad stops at the first one used. The library path keeps the flags as they are:
# there the backward may be traced ahead of any pass (torch.compile), whose compiler removes what
# nobody uses.
_will_engine_execute_node = torch._C._will_engine_execute_node


def _per_input(ctx, slots, any_of_list: bool) -> list:
    """The eager autograd.Function's flags (``ctx.needs_input_grad``: the box, then one per tensor,
    lists spliced in) per input: a bool for a tensor, and for a list of tensors a list of bools or,
    with ``any_of_list``, whether any is set; narrowed to the gradients the running pass uses
    (Note [gradients the pass uses])."""
    needs = ctx.needs_input_grad
    edges = ctx.next_functions if needs.count(True) > 1 else None
    if edges is not None and len(edges) != len(needs) - 1:
        edges = None  # not one edge per tensor, as the eager path gives: keep the flags

    def used(j: int) -> bool:
        return needs[j] and (edges is None or _uses(edges[j - 1][0]))

    i, per_input = 1, []  # needs[0]: _EagerAutograd.forward's box
    for slot in slots:
        if slot is None:
            per_input.append(False)
        elif slot < 0:
            per_input.append(used(i))
            i += 1
        else:
            span = range(i, i + slot)
            per_input.append(any(map(used, span)) if any_of_list else list(map(used, span)))
            i += slot
    return per_input


def _uses(node) -> bool:
    """Whether the running backward pass uses the gradient sent to `node` (an edge's node)."""
    try:
        return node is not None and _will_engine_execute_node(node)
    except RuntimeError:  # a leaf that torch.autograd.grad captures: its gradient is asked for
        return True


# --- flattening: autograd.Function tracks only tensors passed directly, not lists of them -------


def _is_tensor_list(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], Tensor)


def _flatten(values) -> tuple[list, tuple | None]:
    """Tensor lists spliced into one flat list; the layout holds their lengths (None elsewhere),
    or is None when there is no tensor list (the common case, spared the rebuilding)."""
    if not any(_is_tensor_list(value) for value in values):
        return list(values), None
    flat, layout = [], []
    for value in values:
        if _is_tensor_list(value):
            flat.extend(value)
            layout.append(len(value))
        else:
            flat.append(value)
            layout.append(None)
    return flat, tuple(layout)


def _unflatten(flat: Sequence, layout: tuple | None) -> list:
    if layout is None:
        return list(flat)
    values, i = [], 0
    for length in layout:
        if length is None:
            values.append(flat[i])
            i += 1
        else:
            values.append(list(flat[i : i + length]))
            i += length
    return values


# Note [eager argument plan]
# What the eager path must know of an op's arguments on every call (which hold tensors, and how)
# is fixed by its schema, so Op.__init__ reads it once into a plan: one kind per argument,
# _TENSOR (Tensor), _OPTIONAL (Tensor?), _LIST (Tensor[]) or None (anything else). A call then
# only collects the tensors at those positions and records the slots the backward needs to
# map gradients back to arguments: -1 a tensor, n >= 0 a list of n tensors, None no tensor. For
# an op whose tensor arguments are all plain Tensors (most ops) the slots are the same on every
# call and come precomputed. Testing every argument's type on every call instead (as before)
# cost about 1 µs a call at K-Planes' six arguments (bench/host_time.py, CPU).
_TENSOR, _OPTIONAL, _LIST = "Tensor", "Tensor?", "Tensor[]"


def _argument_kind(schema_type) -> str | None:
    spelled = str(schema_type)
    return {"Tensor": _TENSOR, "Optional[Tensor]": _OPTIONAL, "List[Tensor]": _LIST}.get(spelled)


def _may_be_list(schema_type) -> bool:
    """Whether an output of this schema type may be a list (``Tensor[]``); conservative: only
    non-lists skip the eager path's list handling."""
    spelled = str(schema_type)
    return "List" in spelled or "[]" in spelled


_PLAIN_TENSORS = (Tensor, torch.nn.Parameter)


def _library_context() -> bool:
    """Whether the current context sends every call through the registered custom op (see Note
    [op table]), whatever its arguments.

    Runs on every call, so each test is the cheapest that decides: functorch's wrapped tensors
    exist only while a transform is active, which one global query tells (a check of each tensor
    cost 0.1 µs apiece); torch.jit.is_tracing() is torch._C._is_tracing() behind a Python frame.
    torch.compiler.is_compiling() stays as it is: it is the call Dynamo recognises."""
    return (_force_library or torch.compiler.is_compiling() or _is_tracing()
            or _functorch_transforms_active()
            or _dispatch_modes() > 0)  # a TorchDispatchMode must see the op


_is_tracing = torch._C._is_tracing
_functorch_transforms_active = torch._C._are_functorch_transforms_active
_dispatch_modes = torch._C._len_torch_dispatch_stack


class _EagerAutograd(torch.autograd.Function):
    """An op's eager impl with its registered autograd formula.

    Only the tensors go through ``apply`` (tensor lists spliced in): autograd tracks nothing else,
    and each extra argument of ``apply`` costs host time. The op, its whole argument list and
    their slots (Note [eager argument plan]) travel in a one-shot box that the forward empties, so
    the graph keeps no input alive that ``setup_context`` did not save; for an op with list
    outputs the forward leaves their layout in the box. The backward finds what it needs in
    ``ctx.ff``: the op, the slots and that output layout (one attribute: each costs host time).
    """

    @staticmethod
    def forward(ctx, box: list, *tensors):
        op, args, slots = box
        box.clear()
        outputs = op.run_eagerly(*args)
        spec = op.spec
        spec.setup_context(ctx, args, outputs)
        if not spec.materialize_grads:
            ctx.set_materialize_grads(False)
        if isinstance(outputs, Tensor):
            ctx.ff = (op, slots, None)
            if 0 in spec.non_differentiable or not outputs.is_floating_point():
                ctx.mark_non_differentiable(outputs)
            return outputs
        flat_out, layout = _flatten(outputs) if op.list_outputs else (outputs, None)
        ctx.ff = (op, slots, layout)
        if layout is not None:
            box.append(layout)  # for Op.__call__, which rebuilds the structure
        non_differentiable = spec.non_differentiable
        frozen = [
            t
            for i, t in enumerate(flat_out)
            if isinstance(t, Tensor) and (i in non_differentiable or not t.is_floating_point())
        ]
        if frozen:
            ctx.mark_non_differentiable(*frozen)
        return tuple(flat_out)

    @staticmethod
    def backward(ctx, *flat_grads):
        op, slots, layout = ctx.ff
        grads = flat_grads if layout is None else _unflatten(flat_grads, layout)
        input_grads = op.spec.backward(ctx, *grads)
        if not isinstance(input_grads, tuple):
            input_grads = (input_grads,)
        flat = [None]  # the box
        for grad, slot in zip(input_grads, slots, strict=True):
            if slot is None:
                continue
            if slot < 0:
                flat.append(grad)
            else:
                flat.extend(grad if grad is not None else [None] * slot)
        return tuple(flat)


# The C++ apply under autograd.Function.apply, whose Python layer re-runs the functorch query
# _library_context just made and unwraps dead functorch wrappers, which the eager impls cannot
# read anyway (they have no storage: an error either way, now the binding's TypeError naming the
# op): 1.7 µs a call (CPU).
_apply_eager_autograd = super(torch.autograd.Function, _EagerAutograd).apply


def _typing_form(annotation):
    """`list[X]`, `tuple[...]` and `X | None` as typing.List / Tuple / Optional, recursively."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return typing.List[_typing_form(args[0])]  # noqa: UP006 (torch 2.4 needs typing's form)
    if origin is tuple:
        return typing.Tuple[tuple(_typing_form(a) for a in args)]  # noqa: UP006
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        if len(kept) == 1 and len(args) == 2:
            return typing.Optional[_typing_form(kept[0])]  # noqa: UP007
    return annotation


def _with_typing_annotations(impl: Callable) -> Callable:
    """`impl` with its annotations evaluated and in typing's spelling, for schema inference.

    The family modules use ``from __future__ import annotations`` (annotations are strings) and
    the builtin generics (``list[Tensor]``, ``Tensor | None``). torch 2.4, the oldest torch we
    support, infers schemas only from evaluated annotations in typing's spelling.
    """
    hints = typing.get_type_hints(impl)
    signature = inspect.signature(impl)
    parameters = [
        p.replace(annotation=_typing_form(hints.get(p.name, p.annotation)))
        for p in signature.parameters.values()
    ]
    returns = _typing_form(hints.get("return", signature.return_annotation))

    @functools.wraps(impl)
    def typed(*args, **kwargs):
        return impl(*args, **kwargs)

    typed.__signature__ = signature.replace(parameters=parameters, return_annotation=returns)
    typed.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": returns}
    return typed


def _refuse_tangents(name: str, args: tuple) -> None:
    """The ops have no forward-mode formula, and both paths would drop a tangent without a word
    (the eager impls compute on the primal; the custom op's autograd returned a zero tangent under
    torch.func.jvp), so a tangent reaching an op is an error."""
    for arg in args:
        for t in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(t, Tensor) and _forward_ad.unpack_dual(t).tangent is not None:
                raise NotImplementedError(
                    f"{name}(): forward-mode AD (torch.func.jvp, torch.autograd.forward_ad) is not "
                    "supported, and a tangent reached this op; use reverse mode "
                    "(torch.autograd.grad)")


def _check_all_meta(name: str, tensors: list) -> None:
    """A meta tensor sends a call to the op's fake impl, which allocates the outputs like the
    inputs and computes nothing: beside tensors on a real device it would return unwritten memory
    there as the result, so such a mix is refused (PyTorch's own ops refuse it too)."""
    devices = sorted({str(t.device) for t in tensors if isinstance(t, Tensor)})
    if devices != ["meta"]:
        raise ValueError(f"{name}(): expected every tensor on one device, but got meta tensors "
                         f"beside {', '.join(d for d in devices if d != 'meta')} ones")


class Op:
    """A registered fieldfuse op: ``Op(*args)`` runs it on the fastest path that is correct."""

    def __init__(self, spec: OpSpec):
        self.spec = spec
        self.custom_op = torch.library.custom_op(
            f"fieldfuse::{spec.name}",
            spec.impl if spec.schema else _with_typing_annotations(spec.impl),
            mutates_args=(),
            schema=spec.schema,
        )
        self.custom_op.register_fake(spec.fake)
        self.differentiable = spec.backward is not None
        #: what the eager path runs (Note [op table], eager_impl)
        self.run_eagerly = spec.eager_impl or spec.impl
        # Facts of the schema the eager path would otherwise find out on every call (Note [eager
        # argument plan]), and whether any output may be a list, which the eager path must splice.
        schema = self.custom_op._opoverload._schema
        kinds = [_argument_kind(a.type) for a in schema.arguments]
        self.num_args = len(kinds)
        #: (position, kind) of each argument that may hold tensors
        self.tensor_args = tuple((i, k) for i, k in enumerate(kinds) if k is not None)
        #: the slots of every call when all those are plain Tensors (else None: built per call)
        self.static_slots = (tuple(-1 if k is _TENSOR else None for k in kinds)
                             if all(k in (_TENSOR, None) for k in kinds) else None)
        self.list_outputs = any(_may_be_list(r.type) for r in schema.returns)
        if self.differentiable:
            self.custom_op.register_autograd(spec.backward, setup_context=spec.setup_context)

    def _tensors(self, args) -> tuple[list, tuple] | None:
        """The tensors among `args`, lists spliced in, and their slots (Note [eager argument
        plan]); None where the arguments do not fit the schema (the library path's schema check
        names the culprit)."""
        if len(args) != self.num_args:
            return None
        if self.static_slots is not None:
            return [args[i] for i, _ in self.tensor_args], self.static_slots
        tensors, slots = [], [None] * self.num_args
        for i, kind in self.tensor_args:
            value = args[i]
            if kind is _LIST:
                if not isinstance(value, (list, tuple)):
                    return None
                tensors += value
                slots[i] = len(value)
            elif value is not None or kind is _TENSOR:
                tensors.append(value)
                slots[i] = -1
        return tensors, slots

    def __call__(self, *args):
        if _forward_ad._current_level >= 0:  # a dual level is open (torch.func.jvp opens one)
            _refuse_tangents(self.spec.name, args)
        if _library_context():
            return self.custom_op(*args)
        gathered = self._tensors(args)
        if gathered is None:
            return self.custom_op(*args)
        tensors, slots = gathered
        requires_grad = False
        for t in tensors:
            # Tensor subclasses (fake tensors, functional wrappers) and devices the kernels do
            # not run on (meta) take the library path; is_cpu/is_cuda read the device without
            # building a torch.device.
            if type(t) not in _PLAIN_TENSORS or not (t.is_cpu or t.is_cuda):
                if type(t) in _PLAIN_TENSORS and t.is_meta:
                    _check_all_meta(self.spec.name, tensors)
                return self.custom_op(*args)
            if t.requires_grad:
                requires_grad = True
        if not (requires_grad and torch.is_grad_enabled()):
            return self.run_eagerly(*args)
        if not self.differentiable:
            # The library path raises torch's own error for an op without a gradient formula.
            return self.custom_op(*args)
        box = [self, args, slots]  # _EagerAutograd.forward empties it (and leaves list layouts)
        outputs = _apply_eager_autograd(box, *tensors)
        if box:
            return tuple(_unflatten(outputs, box[0]))
        return outputs

    def __repr__(self) -> str:
        return f"fieldfuse.Op({self.spec.name!r})"


def register(specs: Sequence[OpSpec]) -> dict[str, Op]:
    """Registers a family's table; returns its ops by name."""
    return {spec.name: Op(spec) for spec in specs}
