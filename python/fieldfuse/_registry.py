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
from torch import Tensor

__all__ = [
    "Op",
    "OpSpec",
    "call_in_backward",
    "library_path",
    "needs_input_grad",
    "register",
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

    def run_eagerly(self, *args):
        return (self.eager_impl or self.impl)(*args)


def call_in_backward(ctx, op: "Op", *args):
    """A backward formula's call of another op (``backward`` of an :class:`OpSpec`).

    On the eager path with no graph being built (no ``create_graph``), the arguments are the eager
    path's own plain tensors, so the op's eager impl runs directly: :meth:`Op.__call__`'s path
    checks would only cost host time (about 4 µs a call for render's backward, measured on CPU).
    Otherwise, e.g. in double backward or on the library path, it is a plain call of ``op``."""
    if not torch.is_grad_enabled() and getattr(ctx, "ff_spec", None) is not None:
        return op.spec.run_eagerly(*args)
    return op(*args)


def needs_input_grad(ctx) -> tuple:
    """Which inputs need a gradient, one entry per input (a list of bools for a list of tensors),
    on either call path: the eager path's ``autograd.Function`` sees flattened inputs, so it records
    the per-input form before calling the formula."""
    return getattr(ctx, "ff_needs_input_grad", None) or ctx.needs_input_grad


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


def _tensor_slots(args, lists: bool = True) -> tuple[list[Tensor], tuple]:
    """The tensors among `args` (tensor lists spliced in) and, per argument, where they sit:
    ``-1`` a tensor, ``n >= 0`` a list of n tensors, None no tensor (None, numbers, flags).
    ``lists=False``: the op takes no list (its schema says so), so no argument is tested for one."""
    tensors, slots = [], []
    if not lists:
        for a in args:
            if isinstance(a, Tensor):
                tensors.append(a)
                slots.append(-1)
            else:
                slots.append(None)
        return tensors, tuple(slots)
    for a in args:
        if isinstance(a, Tensor):
            tensors.append(a)
            slots.append(-1)
        elif _is_tensor_list(a):
            tensors.extend(a)
            slots.append(len(a))
        else:
            slots.append(None)
    return tensors, tuple(slots)


_PLAIN_TENSORS = (Tensor, torch.nn.Parameter)


def _through_library(tensors: list[Tensor]) -> bool:
    """Whether a call must go through the registered custom op (see Note [op table]).

    Runs on every call, so each test is the cheapest that decides: functorch's wrapped tensors
    exist only while a transform is active, which one global query tells (a check of each tensor
    cost 0.1 µs apiece), and ``is_cpu``/``is_cuda`` read the device without building a
    ``torch.device``."""
    if (_force_library or torch.compiler.is_compiling() or torch.jit.is_tracing()
            or torch._C._are_functorch_transforms_active()):
        return True
    if torch._C._len_torch_dispatch_stack() > 0:  # a TorchDispatchMode must see the op
        return True
    for t in tensors:
        if type(t) not in _PLAIN_TENSORS or not (t.is_cpu or t.is_cuda):
            return True
    return False


class _EagerAutograd(torch.autograd.Function):
    """An op's eager impl with its registered autograd formula.

    Only the tensors go through ``apply`` (tensor lists spliced in): autograd tracks nothing else,
    and each extra argument of ``apply`` costs host time. The whole argument list travels in a
    one-shot box that the forward empties, so the graph keeps no input alive that ``setup_context``
    did not save.
    """

    @staticmethod
    def forward(ctx, op: Op, box: list, slots: tuple, *tensors):
        args, out_layout = box.pop(), box
        spec = op.spec
        outputs = spec.run_eagerly(*args)
        spec.setup_context(ctx, args, outputs)
        ctx.ff_spec, ctx.ff_slots, ctx.ff_lists = spec, slots, op.list_args
        ctx.set_materialize_grads(spec.materialize_grads)
        single = isinstance(outputs, Tensor)
        if single or not op.list_outputs:
            flat_out, ctx.ff_out_layout = ((outputs,) if single else outputs), None
        else:
            flat_out, ctx.ff_out_layout = _flatten(outputs)
        out_layout.append(ctx.ff_out_layout)  # for Op.__call__, which rebuilds the structure
        non_differentiable = spec.non_differentiable
        frozen = [
            t
            for i, t in enumerate(flat_out)
            if isinstance(t, Tensor) and (i in non_differentiable or not t.is_floating_point())
        ]
        if frozen:
            ctx.mark_non_differentiable(*frozen)
        return flat_out[0] if single else tuple(flat_out)

    @staticmethod
    def backward(ctx, *flat_grads):
        layout = ctx.ff_out_layout
        grads = flat_grads if layout is None else _unflatten(flat_grads, layout)
        needs, slots = iter(ctx.needs_input_grad[3:]), ctx.ff_slots
        if ctx.ff_lists:
            ctx.ff_needs_input_grad = tuple(
                False if slot is None else next(needs) if slot < 0
                else [next(needs) for _ in range(slot)]
                for slot in slots
            )
        else:  # the same without the list case, in a list display (cheaper than a generator)
            ctx.ff_needs_input_grad = tuple([False if slot is None else next(needs)
                                             for slot in slots])
        input_grads = ctx.ff_spec.backward(ctx, *grads)
        if not isinstance(input_grads, tuple):
            input_grads = (input_grads,)
        if not ctx.ff_lists:
            flat = [grad for grad, slot in zip(input_grads, slots, strict=True) if slot is not None]
            return (None, None, None, *flat)
        flat = []
        for grad, slot in zip(input_grads, ctx.ff_slots, strict=True):
            if slot is None:
                continue
            if slot < 0:
                flat.append(grad)
            else:
                flat.extend(grad if grad is not None else [None] * slot)
        return (None, None, None, *flat)


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


def _may_be_list(schema_type) -> bool:
    """Whether an argument or output of this schema type may be a list (``Tensor[]``, ``float[]?``);
    conservative: only non-lists skip the eager path's list handling."""
    spelled = str(schema_type)
    return "List" in spelled or "[]" in spelled


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
        # Facts of the schema the eager path would otherwise find out on every call: whether any
        # argument or output may be a list (of tensors), which the eager path must splice.
        schema = self.custom_op._opoverload._schema
        self.list_args = any(_may_be_list(a.type) for a in schema.arguments)
        self.list_outputs = any(_may_be_list(r.type) for r in schema.returns)
        if self.differentiable:
            self.custom_op.register_autograd(spec.backward, setup_context=spec.setup_context)

    def __call__(self, *args):
        tensors, slots = _tensor_slots(args, self.list_args)
        if _through_library(tensors):
            return self.custom_op(*args)
        wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if not wants_grad:
            return self.spec.run_eagerly(*args)
        if not self.differentiable:
            # The library path raises torch's own error for an op without a gradient formula.
            return self.custom_op(*args)
        box = [args]  # _EagerAutograd.forward takes the arguments and leaves the output layout
        outputs = _EagerAutograd.apply(self, box, slots, *tensors)
        if isinstance(outputs, Tensor):
            return outputs
        if box[0] is None:
            return outputs
        return tuple(_unflatten(outputs, box[0]))

    def __repr__(self) -> str:
        return f"fieldfuse.Op({self.spec.name!r})"


def register(specs: Sequence[OpSpec]) -> dict[str, Op]:
    """Registers a family's table; returns its ops by name."""
    return {spec.name: Op(spec) for spec in specs}
