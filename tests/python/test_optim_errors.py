# SPDX-License-Identifier: Apache-2.0
r"""Argument validation of fieldfuse.optim: exception types and messages naming the argument.

Values reach the C++ front (``^adam_step\(\): ``) at the first step, through FusedAdam or the
binding itself; FusedAdam's own checks (what Python must know to call the binding, and what
only it sees: param groups, device/dtype sets) start with ``^FusedAdam\(\): `` or
``^FusedAdam\.step\(\): ``. Each case runs on the CPU and, when there is one, on CUDA.
"""

from __future__ import annotations

import pytest
import torch

from device_params import DEVICES, F32, F64
from fieldfuse import _C
from fieldfuse.optim import FusedAdam


def _param(device, *shape, dtype=F64):
    return torch.randn(shape, dtype=dtype, device=device).requires_grad_()


def _step(params, **options):
    """Builds FusedAdam(params, **options), gives every parameter a gradient and steps."""
    opt = FusedAdam(params, **options)
    sum(p.sum() for p in params).backward()
    opt.step()


def _fused(make_params=None, **options):
    def call(device):
        params = make_params(device) if make_params else [_param(device, 3), _param(device, 2, 2)]
        _step(params, **options)

    return call


def _binding(**changes):
    """_C.adam_step on two float64 tensors with everything valid except `changes`, each a
    function of the device (or a value)."""

    def call(device):
        params = [torch.randn(3, dtype=F64, device=device), torch.randn(2, 2, dtype=F64,
                                                                         device=device)]
        args = {
            "params": params,
            "grads": [torch.randn_like(p) for p in params],
            "exp_avgs": [torch.zeros_like(p) for p in params],
            "exp_avg_sqs": [torch.zeros_like(p) for p in params],
            "lrs": [1e-3, 1e-3],
            "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
            "max_grad_norm": 0.0, "total_steps": 0,
            "step": torch.zeros(1, dtype=torch.int64, device=device),
            "grad_norm_out": None,
            "workspace": torch.empty(_C.adam_workspace_size(params), dtype=torch.uint8,
                                     device=device),
            "stream": 0,
        }
        for key, value in changes.items():
            args[key] = value(device, args) if callable(value) else value
        _C.adam_step(**args)

    return call


def _case(case_id, exc, op, rest, call):
    # (?s): a message may wrap; the op's exact name first, then what must follow.
    return pytest.param(exc, rf"(?s)^{op}\(\): .*{rest}", call, id=case_id)


def _cases():
    # --- values, checked by the C++ front at the first step ---
    yield _case("beta1", ValueError, "adam_step", r"\bbeta1\b.*\[0, 1\).*1",
                _fused(betas=(1.0, 0.999)))
    yield _case("beta2", ValueError, "adam_step", r"\bbeta2\b.*\[0, 1\).*-0.5",
                _fused(betas=(0.9, -0.5)))
    yield _case("eps", ValueError, "adam_step", r"\beps\b.*>= 0.*-1", _fused(eps=-1.0))
    yield _case("weight_decay", ValueError, "adam_step", r"\bweight_decay\b.*finite.*nan",
                _fused(weight_decay=float("nan")))
    yield _case("max_grad_norm", ValueError, "adam_step", r"\bmax_grad_norm\b.*>= 0.*-1",
                _fused(max_grad_norm=-1.0))
    yield _case("total_steps", ValueError, "adam_step", r"\btotal_steps\b.*>= 0.*-5",
                _fused(total_steps=-5))
    yield _case("lr", ValueError, "adam_step", r"\bparams\[0\]\.lr\b.*>= 0.*-0.1",
                _fused(lr=-0.1))
    yield _case("param-non-contiguous", ValueError, "adam_step",
                r"\bparams\[0\]\.param\b.*contiguous.*\[4, 3\]",
                _fused(lambda d: [torch.randn(3, 4, dtype=F64, device=d).t().requires_grad_()]))
    yield _case("param-float16", NotImplementedError, "adam_step",
                r"\bparams\[0\]\.param\b.*float16",
                _fused(lambda d: [_param(d, 3, dtype=torch.float16)]))

    # --- what only the binding's caller can get wrong ---
    yield _case("grads-count", ValueError, "adam_step", r"\bgrads\b.*2 entries.*got 1",
                _binding(grads=lambda d, a: a["grads"][:1]))
    yield _case("lrs-count", ValueError, "adam_step", r"\blrs\b.*2 entries.*got 3",
                _binding(lrs=[1e-3] * 3))
    yield _case("grad-shape", ValueError, "adam_step",
                r"\bparams\[1\]\.grad\b.*shape of params\[1\]\.param.*\[2, 2\].*\[4\]",
                _binding(grads=lambda d, a: [a["grads"][0], a["grads"][1].reshape(4)]))
    yield _case("exp-avg-dtype", TypeError, "adam_step",
                r"\bparams\[1\]\.exp_avg\b.*float64.*float32",
                _binding(exp_avgs=lambda d, a: [a["exp_avgs"][0], a["exp_avgs"][1].float()]))
    yield _case("param-dtype-mix", TypeError, "adam_step",
                r"\bparams\[1\]\.param\b.*float64.*params\[0\]\.param.*float32",
                _binding(params=lambda d, a: [a["params"][0], a["params"][1].float()]))
    yield _case("step-dtype", TypeError, "adam_step", r"\bstep\b.*int64.*int32",
                _binding(step=lambda d, a: a["step"].int()))
    yield _case("step-shape", ValueError, "adam_step", r"\bstep\b.*1 element.*\[2\]",
                _binding(step=lambda d, a: torch.zeros(2, dtype=torch.int64, device=d)))
    yield _case("grad-norm-out-dtype", TypeError, "adam_step",
                r"\bgrad_norm_out\b.*float32 or float64.*int64",
                _binding(grad_norm_out=lambda d, a: torch.zeros(1, dtype=torch.int64, device=d)))
    yield _case("overlap", ValueError, "adam_step",
                r"\bparams\[0\]\.param\b.*not to share memory with params\[0\]\.grad",
                _binding(grads=lambda d, a: [a["params"][0], a["grads"][1]]))
    yield _case("workspace", ValueError, "adam_step", r"workspace of at least \d+ bytes.*8 bytes",
                _binding(workspace=lambda d, a: torch.empty(8, dtype=torch.uint8, device=d)))

    # --- FusedAdam's own checks ---
    yield _case("betas-not-a-pair", TypeError, "FusedAdam", r"\bbetas\b.*pair.*0.9",
                _fused(betas=0.9))
    yield _case("total_steps-float", TypeError, "FusedAdam", r"\btotal_steps\b.*integer.*float",
                _fused(total_steps=2.5))
    yield _case("max_grad_norm-string", TypeError, "FusedAdam", r"\bmax_grad_norm\b.*number.*str",
                _fused(max_grad_norm="1"))
    yield _case("group-eps", ValueError, "FusedAdam",
                r"param group 1 to leave eps at the optimizer's 1e-08.*only lr.*0.1",
                lambda d: FusedAdam([{"params": [_param(d, 2)]},
                                     {"params": [_param(d, 2)], "eps": 0.1}]))
    yield _case("clip-two-dtypes", ValueError, r"FusedAdam\.step",
                r"one device with one dtype.*max_grad_norm > 0.*float32.*float64",
                _fused(lambda d: [_param(d, 2, dtype=F32), _param(d, 2)], max_grad_norm=1.0))


CASES = list(_cases())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("exc,pattern,call", CASES)
def test_bad_argument_is_rejected(device, exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call(device)


@pytest.mark.parametrize("device", DEVICES)
def test_valid_binding_call_passes(device):
    """The base case of _binding is valid, so every case above fails for its one change."""
    _binding()(device)
