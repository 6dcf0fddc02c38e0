# SPDX-License-Identifier: Apache-2.0
"""Fused optimisers: :class:`FusedAdam`, torch.optim.Adam with gradient-norm clipping and cosine
decay in one call of the C++ core (``_C.adam_step``, include/fieldfuse/optim.h) per step.

Not an op table: an optimiser step is not differentiable and is never traced by autograd, so it
calls the binding directly, as torch.optim's own fused kernels do.
"""

from __future__ import annotations

import numbers
import operator

import torch
from torch import Tensor

from ._backend import _C, dl, dls, stream_of

__all__ = ["FusedAdam"]

# Group options every tensor of one fused call shares (AdamOptions in optim.h); only lr may
# differ between groups (each tensor has its own rate).
_SHARED_OPTIONS = ("betas", "eps", "weight_decay")


class _CallSet:
    """The tensors of one _C.adam_step call: every parameter with a gradient on one device with
    one dtype."""

    __slots__ = ("params", "grads", "exp_avgs", "exp_avg_sqs", "lrs", "states")

    def __init__(self) -> None:
        self.params: list[Tensor] = []
        self.grads: list[Tensor] = []
        self.exp_avgs: list[Tensor] = []
        self.exp_avg_sqs: list[Tensor] = []
        self.lrs: list[float] = []
        self.states: list[dict] = []


class FusedAdam(torch.optim.Optimizer):
    r"""Adam (as :class:`torch.optim.Adam`) after :func:`torch.nn.utils.clip_grad_norm_`, with the
    learning rate of :class:`torch.optim.lr_scheduler.CosineAnnealingLR`, in one fused call.

    Each step, for every parameter ``p`` with a gradient ``g`` and the step number ``t`` (0 before
    the first step):

    - clipping (``max_grad_norm > 0``): ``g ← g·min(1, max_grad_norm / (‖G‖ + 1e-6))`` with ``‖G‖``
      the L2 norm of all gradients together;
    - weight decay (L2): ``g ← g + weight_decay·p``;
    - ``m ← β1·m + (1 − β1)·g``, ``v ← β2·v + (1 − β2)·g²``,
      ``p ← p − lr_t·(m / (1 − β1^(t+1))) / (sqrt(v / (1 − β2^(t+1))) + eps)``;
    - cosine decay (``total_steps = T > 0``): ``lr_t = lr·0.5·(1 + cos(π·min(t, T)/T))``, which is
      CosineAnnealingLR(T_max=T, eta_min=0) stepped after every update, held at 0 after T steps
      (the scheduler would rise again).

    The gradients are only read (clip_grad_norm_ scales them in place; here ``p.grad`` keeps its
    values). ``lr`` may differ per param group; ``betas``, ``eps`` and ``weight_decay`` are the
    optimiser's (one fused call shares them) and groups may not override them.

    Parameters, gradients and the moment buffers must be contiguous, float32 or float64, on the
    CPU or on CUDA. Each (device, dtype) set of parameters is one call of the core; clipping, a
    norm over all gradients, needs a single set.

    **State.** ``state[p]`` holds ``exp_avg`` and ``exp_avg_sq`` (allocated at the first step that
    sees ``p.grad``) and ``step``: an int64 tensor [1] on the parameters' device, one tensor
    shared by every parameter of a (device, dtype) set, read and incremented by the kernel itself.
    A parameter whose ``grad`` is None is skipped, as in torch.optim.Adam, but shares its set's
    counter: one that first gets a gradient after ``k`` steps is bias-corrected with ``t = k``
    (torch.optim.Adam keeps a counter per parameter and would use 0).

    **Gradient norm.** With clipping on, :attr:`grad_norm` is the pre-clipping global norm of the
    last step, a device tensor [1] (reading it synchronises; keep it on the device in a loop).

    **CUDA graphs.** The step reads no host state that changes between steps (the counter, the
    clip scale and the cosine factor live on the device), so it can be captured and replayed:

    .. code-block:: python

        opt = FusedAdam(model.parameters(), lr=1e-2, max_grad_norm=1.0, total_steps=300)
        # Warm up on a side stream: the first step allocates the moments, the counter and the
        # workspace, which must exist before capture (a capture would record their zero fill).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                loss_fn(model(static_x)).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(model(static_x))
            static_loss.backward()
            opt.step()
        for batch in data:
            static_x.copy_(batch)
            graph.replay()  # forward, backward and the fused step; the counter advances on the GPU

    The warm-up steps are real updates. Per-group learning rates are baked into the graph when it
    is captured: schedule with ``total_steps`` (evaluated on the device), not by editing
    ``param_groups[i]["lr"]`` between replays.

    Args:
        params: tensors or param-group dicts, as for any torch optimiser.
        lr: base learning rate (per group).
        betas: (β1, β2), each in [0, 1).
        eps: added to the denominator, >= 0.
        weight_decay: L2 penalty, >= 0.
        max_grad_norm: > 0 clips the global gradient norm to it; 0 disables clipping.
        total_steps: > 0 enables cosine decay over that many steps; 0 keeps lr constant.

    Invalid values are reported by the C++ core at the first :meth:`step`
    (``adam_step(): expected ...``).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.0,
        total_steps: int = 0,
    ) -> None:
        # Python must unpack betas and hand the binding a float and an integer; the values
        # themselves are validated by the C++ front.
        betas = _pair("betas", betas)
        if not isinstance(max_grad_norm, numbers.Real):
            raise TypeError(
                f"FusedAdam(): expected max_grad_norm to be a number, but got "
                f"{type(max_grad_norm).__name__}"
            )
        try:
            total_steps = operator.index(total_steps)
        except TypeError:
            raise TypeError(
                f"FusedAdam(): expected total_steps to be an integer, but got "
                f"{type(total_steps).__name__}"
            ) from None
        self.max_grad_norm = float(max_grad_norm)
        self.total_steps = total_steps
        self._workspaces: dict[tuple, Tensor] = {}
        self._grad_norms: dict[tuple, Tensor] = {}
        self._last_grad_norm: Tensor | None = None
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        for key in _SHARED_OPTIONS:
            if key not in param_group:
                continue
            value = param_group[key]
            if key == "betas":
                value = param_group[key] = _pair("betas", value)
            if value != self.defaults[key]:
                raise ValueError(
                    f"FusedAdam(): expected param group {len(self.param_groups)} to leave {key} "
                    f"at the optimizer's {self.defaults[key]!r} (one fused call updates every "
                    f"tensor with the same {key}; only lr may differ), but got "
                    f"{value!r}"
                )
        super().add_param_group(param_group)

    @property
    def grad_norm(self) -> Tensor | None:
        """The global gradient norm before clipping at the last step (a device tensor [1] of the
        parameters' dtype), or None before the first step or without clipping."""
        return self._last_grad_norm

    def step(self, closure=None):
        """One fused update of every parameter that has a gradient; returns closure()'s loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        sets = self._gather()
        if self.max_grad_norm > 0 and len(sets) > 1:
            kinds = ", ".join(f"{dev}/{str(dtype).removeprefix('torch.')}" for dev, dtype in sets)
            raise ValueError(
                "FusedAdam.step(): expected every parameter on one device with one dtype when "
                f"max_grad_norm > 0 (the norm of all gradients is one reduction), but got {kinds}"
            )
        beta1, beta2 = self.defaults["betas"]
        for key, s in sets.items():
            counter = self._counter(key, s.states)
            norm = self._grad_norm_out(key) if self.max_grad_norm > 0 else None
            workspace = self._workspace(key, s.params)
            _C.adam_step(
                dls(s.params), dls(s.grads), dls(s.exp_avgs), dls(s.exp_avg_sqs), s.lrs,
                float(beta1), float(beta2), float(self.defaults["eps"]),
                float(self.defaults["weight_decay"]), self.max_grad_norm, self.total_steps,
                dl(counter), None if norm is None else dl(norm), dl(workspace),
                stream_of(s.params[0]),
            )
            self._last_grad_norm = norm
        return loss

    def _gather(self) -> dict[tuple, _CallSet]:
        """The parameters with gradients, by (device, dtype), with their state (allocated here
        the first time a parameter has a gradient)."""
        sets: dict[tuple, _CallSet] = {}
        for group in self.param_groups:
            lr = float(group["lr"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "exp_avg" not in state:
                    # Zeros, contiguous (the core walks flat element ranges).
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                key = (p.device, p.dtype)
                s = sets.get(key)
                if s is None:
                    s = sets[key] = _CallSet()
                s.params.append(p)  # updated in place, outside autograd (as torch.optim)
                s.grads.append(p.grad)
                s.exp_avgs.append(state["exp_avg"])
                s.exp_avg_sqs.append(state["exp_avg_sq"])
                s.lrs.append(lr)
                s.states.append(state)
        return sets

    def _counter(self, key: tuple, states: list[dict]) -> Tensor:
        """The set's step counter, shared by every state of the set (Note in the class doc)."""
        counter = next((st["step"] for st in states if "step" in st), None)
        device = key[0]
        if counter is None:
            counter = torch.zeros(1, dtype=torch.int64, device=device)
        elif counter.device != device or counter.dtype != torch.int64 or counter.shape != (1,):
            # A counter from load_state_dict (torch.load may map it anywhere, or a float from
            # torch.optim.Adam's state): one copy, before any capture.
            counter = counter.detach().reshape(1).to(device=device, dtype=torch.int64)
        for st in states:
            if st.get("step") is not counter:
                st["step"] = counter
        return counter

    def _workspace(self, key: tuple, params: list[Tensor]) -> Tensor:
        """Scratch memory for the call, kept between steps so a captured graph reuses it."""
        nbytes = _C.adam_workspace_size(dls(params))
        workspace = self._workspaces.get(key)
        if workspace is None or workspace.numel() < nbytes:
            workspace = torch.empty(nbytes, dtype=torch.uint8, device=key[0])
            self._workspaces[key] = workspace
        return workspace

    def _grad_norm_out(self, key: tuple) -> Tensor:
        norm = self._grad_norms.get(key)
        if norm is None:
            norm = self._grad_norms[key] = torch.empty(1, dtype=key[1], device=key[0])
        return norm


def _pair(arg: str, value) -> tuple[float, float]:
    """`value` as two floats, or a TypeError naming `arg`."""
    try:
        first, second = value
        return float(first), float(second)
    except (TypeError, ValueError):
        raise TypeError(
            f"FusedAdam(): expected {arg} to be a pair of numbers (beta1, beta2), but got {value!r}"
        ) from None
