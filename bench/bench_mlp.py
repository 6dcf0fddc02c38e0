# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.mlp against PyTorch eager (nn.Sequential with the same weights; torch.autocast for
16-bit compute) and torch.compile: an MLP 32 → W×4 → 16 (ReLU) at B = 2^18, inference and
forward + backward, in float32 / float16 / bfloat16 compute and widths 16…256; and the Eikonal
step of an SDF 3 → 64×4 → 1 (Softplus β = 100) with each precision's error against float64,
through fieldfuse.mlp + autograd.grad(create_graph=True) and through
fieldfuse.mlp_value_and_input_grad.

    python bench/bench_mlp.py [--cpu] [--quick] [--no-compile] [--widths 64 16 ...]
                              [--no-eikonal] [--computes fp32 fp16 bf16] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import torch

import _timing as tm
import fieldfuse

SEED = 0
GPU_BATCH, CPU_BATCH, QUICK_BATCH = 1 << 18, 1 << 16, 1 << 12
MLP_WIDTHS = (64, 16, 32, 128, 256)  # 64 is the headline; the others in float32 and float16
COMPUTE_LABELS = {None: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
GPU_COMPUTE = (None, torch.float16, torch.bfloat16)
CPU_COMPUTE = (None,)
SOFTPLUS_BETA = 100.0
# torch.amp.GradScaler's default scale. The Eikonal step's loss is a mean over B rows, so its
# upstream gradients are about 1/B, below float16's normal range (2^-14) once B > 2^14; the
# Eikonal rows also report the error with the loss scaled by this before the backward.
LOSS_SCALE = 2.0**16
TABLE_HEADERS = ["case", "compute", "pass", "fieldfuse ms", "p10–p90", "eager ms", "compile ms",
                 "vs eager", "vs compile", "rel err vs fp64"]


def network(sizes: list[int], device: torch.device) -> tuple[list, list]:
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    weights = [layer.weight.detach().to(device).requires_grad_() for layer in layers]
    biases = [layer.bias.detach().to(device).requires_grad_() for layer in layers]
    return weights, biases


def sequential(weights, biases, activation: Callable[[], torch.nn.Module],
               dtype=torch.float32) -> torch.nn.Sequential:
    """nn.Sequential sharing the same values (copies in `dtype`)."""
    modules = []
    for k, (w, b) in enumerate(zip(weights, biases)):
        linear = torch.nn.Linear(w.shape[1], w.shape[0], device=w.device, dtype=dtype)
        with torch.no_grad():
            linear.weight.copy_(w)
            linear.bias.copy_(b)
        modules.append(linear)
        if k + 1 < len(weights):
            modules.append(activation())
    return torch.nn.Sequential(*modules)


def autocast(device: torch.device, compute):
    return torch.autocast(device.type, dtype=compute, enabled=compute is not None)


def relative_error(ours: list[torch.Tensor], exact: list[torch.Tensor]) -> float:
    got = torch.cat([t.detach().double().flatten() for t in ours])
    ref = torch.cat([t.detach().double().flatten() for t in exact])
    return (torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref)).item()


# --- the MLP table ---------------------------------------------------------------------------


def mlp_case(width: int, compute, pass_name: str, args: argparse.Namespace) -> dict[str, Any]:
    device = args.device
    weights, biases = network([32] + [width] * 4 + [16], device)
    params = [*weights, *biases]
    net = sequential(weights, biases, torch.nn.ReLU)
    inputs = [torch.randn(args.batch, 32, device=device).requires_grad_()
              for _ in range(tm.rotation_count(args.batch * 32 * 4, device))]

    def ours(x):
        if pass_name == "inference":
            with torch.no_grad():
                return [fieldfuse.mlp(x, weights, biases, compute_dtype=compute)]
        y = fieldfuse.mlp(x, weights, biases, compute_dtype=compute)
        return [y, *torch.autograd.grad(y.square().sum(), [x, *params])]

    def eager(x, model=net):
        if pass_name == "inference":
            with torch.no_grad(), autocast(device, compute):
                return [model(x)]
        with autocast(device, compute):
            y = model(x)
        return [y, *torch.autograd.grad(y.float().square().sum(), [x, *model.parameters()])]

    compiled = torch.compile(net, fullgraph=True, dynamic=False) if args.compile else None
    x = inputs[0]
    exact_net = sequential(weights, biases, torch.nn.ReLU, torch.float64)
    exact = eager(x.detach().double().requires_grad_(), exact_net)
    got = ours(x)
    # ours returns (y, x, weights..., biases...); eager (y, x, w0, b0, w1, b1, ...)
    if pass_name != "inference":
        exact = exact[:2] + exact[2::2] + exact[3::2]
    return {
        "case": f"MLP 32→{width}×4→16 ReLU, B={args.batch}", "compute": COMPUTE_LABELS[compute],
        "pass": pass_name, "rel_err": relative_error(got, exact),
        "results": {
            "fieldfuse": tm.measure(ours, inputs, args.budget, memory=False),
            "eager": tm.measure(eager, inputs, args.budget, memory=False),
            "compile": (tm.measure(lambda x: eager(x, compiled), inputs, args.budget, memory=False)
                        if compiled else {"stats": None}),
        },
    }


# --- the Eikonal step --------------------------------------------------------------------------


def eikonal_terms(y: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return (grad.float().norm(dim=1) - 1).square().mean() + y.float().abs().mean()


def eikonal_loss(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    return eikonal_terms(y, grad)


def eikonal_case(compute, args: argparse.Namespace, fused: bool = False) -> dict[str, Any]:
    """The Eikonal step; `fused`: fieldfuse through mlp_value_and_input_grad (y and ∇y from one
    op, one double-backward sweep for both loss terms) instead of mlp + autograd.grad."""
    device = args.device
    weights, biases = network([3, 64, 64, 64, 64, 1], device)
    params = [*weights, *biases]
    net = sequential(weights, biases, lambda: torch.nn.Softplus(beta=SOFTPLUS_BETA))
    inputs = [(torch.rand(args.batch, 3, device=device) - 0.5).requires_grad_()
              for _ in range(tm.rotation_count(args.batch * 3 * 4, device))]

    options = dict(activation="softplus", softplus_beta=SOFTPLUS_BETA, compute_dtype=compute)

    def ours(x, loss_scale=None):
        if fused:
            loss = eikonal_terms(*fieldfuse.mlp_value_and_input_grad(x, weights, biases, **options))
        else:
            loss = eikonal_loss(fieldfuse.mlp(x, weights, biases, **options), x)
        if loss_scale is None:
            return list(torch.autograd.grad(loss, params))
        return [g / loss_scale for g in torch.autograd.grad(loss * loss_scale, params)]

    def eager(x, model=net, loss_scale=None):
        with autocast(device, compute):
            y = model(x)
            loss = eikonal_loss(y, x)
        if loss_scale is not None:
            loss = loss * loss_scale
        grads = torch.autograd.grad(loss, list(model.parameters()))
        if loss_scale is not None:
            grads = [g / loss_scale for g in grads]
        return list(grads[0::2]) + list(grads[1::2])  # weights, then biases

    def compiled_step(model):
        # Dynamo traces the inner autograd.grad only with trace_autograd_ops.
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            fn = torch.compile(lambda x: eager(x, model), fullgraph=True, dynamic=False)
            fn(inputs[0])
        return fn

    compiled = None
    if args.compile:
        try:
            compiled = compiled_step(net)
        except Exception as err:  # noqa: BLE001 -- reported in the table as a missing cell
            print(f"  eikonal compile failed: {type(err).__name__}: {err}".splitlines()[0],
                  file=sys.stderr)
    exact_net = sequential(weights, biases, lambda: torch.nn.Softplus(beta=SOFTPLUS_BETA),
                           torch.float64)
    x = inputs[0]
    exact = eager(x.detach().double().requires_grad_(), exact_net)
    return {
        "case": f"Eikonal SDF 3→64×4→1 Softplus β={SOFTPLUS_BETA:g}, B={args.batch}",
        "compute": COMPUTE_LABELS[compute],
        "pass": "eikonal step" + (" (value_and_input_grad)" if fused else ""),
        "rel_err": relative_error(ours(x), exact),
        "rel_err_eager": relative_error(eager(x), exact),
        "rel_err_loss_scaled": relative_error(ours(x, LOSS_SCALE), exact),
        "rel_err_eager_loss_scaled": relative_error(eager(x, loss_scale=LOSS_SCALE), exact),
        "results": {
            "fieldfuse": tm.measure(ours, inputs, args.budget, memory=False),
            "eager": tm.measure(eager, inputs, args.budget, memory=False),
            "compile": (tm.measure(compiled, inputs, args.budget, memory=False)
                        if compiled else {"stats": None}),
        },
    }


# --- report ----------------------------------------------------------------------------------


def medians(row: dict[str, Any]) -> dict[str, float | None]:
    return {name: tm.median(result) for name, result in row["results"].items()}


def table_row(row: dict[str, Any]) -> list[str]:
    ms = medians(row)
    ff = row["results"]["fieldfuse"].get("stats")
    spread = f"{tm.fmt_num(ff.p10_ms)}–{tm.fmt_num(ff.p90_ms)}" if ff else tm.MISSING
    return [row["case"], row["compute"], row["pass"], tm.ms_cell(row["results"]["fieldfuse"]),
            spread, tm.ms_cell(row["results"]["eager"]), tm.ms_cell(row["results"]["compile"]),
            tm.fmt(tm.ratio(ms["eager"], ms["fieldfuse"]), ".1f", "×"),
            tm.fmt(tm.ratio(ms["compile"], ms["fieldfuse"]), ".1f", "×"),
            tm.fmt(row["rel_err"], ".1e")]


def progress(row: dict[str, Any]) -> None:
    cells = ", ".join(f"{name} {tm.fmt_num(ms)}" for name, ms in medians(row).items())
    print(f"  {row['case']} {row['compute']} {row['pass']}: {cells} ms", file=sys.stderr,
          flush=True)


def loss_scale_lines(rows: list[dict[str, Any]]) -> str:
    lines = [f"- {row['case']} {row['compute']} {row['pass']}: fieldfuse "
             f"{row['rel_err']:.1e} → {row['rel_err_loss_scaled']:.1e}, eager "
             f"{row['rel_err_eager']:.1e} → {row['rel_err_eager_loss_scaled']:.1e}"
             for row in rows if "rel_err_loss_scaled" in row]
    if not lines:
        return ""
    return ("\n\nError against float64 of the Eikonal rows with the loss scaled by "
            f"{LOSS_SCALE:g} before the backward and the gradients divided by it after "
            "(torch.amp.GradScaler's default scale), against the table's unscaled error:\n\n" +
            "\n".join(lines))


def error_notes(rows: list[dict]) -> list[str]:
    return [f"- {row['case']} {row['compute']} {row['pass']} {name}: {result['error']}"
            for row in rows for name, result in row["results"].items() if "error" in result]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = tm.bench_parser(__doc__)
    parser.add_argument("--widths", type=int, nargs="*", default=list(MLP_WIDTHS),
                        help="hidden widths of the MLP rows (default: all; none: no MLP rows)")
    parser.add_argument("--eikonal", action=argparse.BooleanOptionalAction, default=True,
                        help="time the Eikonal step rows (default: on)")
    parser.add_argument("--computes", nargs="+", choices=list(COMPUTE_LABELS.values()),
                        help="compute precisions of the rows (default: all the device has)")
    args = tm.parse_bench_args(parser, argv)
    args.batch = QUICK_BATCH if args.quick else CPU_BATCH if args.cpu else GPU_BATCH
    available = CPU_COMPUTE if args.cpu else GPU_COMPUTE
    args.computes = tuple(c for c in available
                          if args.computes is None or COMPUTE_LABELS[c] in args.computes)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    began = time.perf_counter()
    torch.manual_seed(SEED)
    env = tm.fieldfuse_environment(args.device)
    rows = []
    for width in args.widths:
        # The headline width in every precision, the others in float32 and (GPU) float16.
        computes = args.computes if width == 64 else args.computes[:2]
        for compute in computes:
            for pass_name in ("inference", "fwd+bwd"):
                torch._dynamo.reset()
                rows.append(mlp_case(width, compute, pass_name, args))
                progress(rows[-1])
                tm.release(args.device)
    for compute in args.computes if args.eikonal else ():
        for fused in (False, True):
            torch._dynamo.reset()
            rows.append(eikonal_case(compute, args, fused))
            progress(rows[-1])
            tm.release(args.device)
    elapsed_s = time.perf_counter() - began
    markdown = (tm.header_line("fieldfuse mlp benchmark", env) +
                f"\n\nfieldfuse {env['fieldfuse']}; run took {elapsed_s:.0f} s. Eager 16-bit "
                "rows run under torch.autocast; errors are ‖result − float64‖ / ‖float64‖ over "
                "the output and every gradient.\n\n" +
                tm.markdown_table(TABLE_HEADERS, [table_row(row) for row in rows]) +
                loss_scale_lines(rows))
    stem = f"mlp_{args.device.type}" + ("_quick" if args.quick else "")
    payload = {"env": env, "elapsed_s": elapsed_s, "rows": rows}
    tm.publish(args.out, stem, payload, markdown, error_notes(rows))


if __name__ == "__main__":
    main()
