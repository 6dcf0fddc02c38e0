# SPDX-License-Identifier: Apache-2.0
"""Runs the scripts in examples/ with small settings, as a user would, in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from device_params import cuda_only

ROOT = Path(__file__).resolve().parents[2]
SDF_EIKONAL = ROOT / "examples" / "sdf_eikonal.py"
# A grid and batch small enough to train in a few seconds on two CPU cores.
TINY = ["--steps", "40", "--batch", "512", "--n-levels", "4", "--log2-hashmap-size", "12",
        "--hidden", "16", "--layers", "1"]
NUMBER = r"([0-9]+\.[0-9]+)"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SDF_EIKONAL), *args], capture_output=True,
                          text=True, timeout=300)


def _reported(stdout: str) -> dict[str, float]:
    """The final numbers the example prints (each line must be there)."""
    patterns = {"eikonal": rf"^eikonal residual mean \|‖∇f‖ − 1\|: {NUMBER}$",
                "surface": rf"^surface error mean \|f\| on the torus: {NUMBER}$",
                "sdf": rf"^sdf error mean \|f − sdf\| where \|sdf\| < 0\.1: {NUMBER}$"}
    found = {name: re.search(pattern, stdout, re.M) for name, pattern in patterns.items()}
    assert all(found.values()), f"missing lines {[n for n, m in found.items() if not m]}:\n{stdout}"
    return {name: float(match.group(1)) for name, match in found.items()}


def _check_trained(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr
    numbers = _reported(result.stdout)
    # Untrained, ‖∇f‖ ≈ 0 (a U(±1e-4) table), so the residual is ≈ 1; any training lowers it.
    assert 0 <= numbers["eikonal"] < 0.9
    assert 0 <= numbers["surface"] < 0.1 and 0 <= numbers["sdf"] < 1


def test_sdf_eikonal_trains_on_cpu():
    _check_trained(_run(*TINY))


def test_sdf_eikonal_fails_when_the_loss_does_not_decrease():
    # One step: the last loss is the first one, so it did not decrease.
    result = _run(*TINY[2:], "--steps", "1")
    assert result.returncode == 1
    assert "error: the loss did not decrease" in result.stderr
    _reported(result.stdout)


def test_sdf_eikonal_help_documents_every_flag():
    result = _run("--help")
    assert result.returncode == 0
    for flag in ("--device", "--steps", "--batch", "--n-levels", "--log2-hashmap-size",
                 "--hidden", "--layers", "--lr", "--normal-weight", "--seed"):
        assert flag in result.stdout


@cuda_only
def test_sdf_eikonal_trains_on_cuda():
    _check_trained(_run("--device", "cuda", "--steps", "100", "--batch", "8192"))


# --- examples/tomo_kplanes_torch.py ---------------------------------------------------------------

TOMO_TWIN = ROOT / "examples" / "tomo_kplanes_torch.py"
TOMO_TINY = ["--phantom-size", "16", "--iterations", "40", "--rays", "256", "--tv-points", "200",
             "--lr-planes", "0.1"]


def _run_twin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOMO_TWIN), *args], capture_output=True, text=True,
                          timeout=300)


def test_tomo_twin_trains_and_agrees_with_the_cxx_route():
    result = _run_twin(*TOMO_TINY, "--compare", "--seeds", "2")
    assert result.returncode == 0, result.stderr
    steps = re.search(rf"loss {NUMBER} -> {NUMBER}", result.stdout)
    assert steps and float(steps.group(2)) < float(steps.group(1)), result.stdout
    psnr = re.search(rf"^torch twin: PSNR {NUMBER} dB, SSIM {NUMBER}$", result.stdout, re.M)
    assert psnr and float(psnr.group(1)) > 10, result.stdout
    for route in ("torch twin", "C\\+\\+ route "):
        assert re.search(rf"^SSIM {route} *{NUMBER} \(seeds ", result.stdout, re.M), result.stdout
    assert re.search(r"^routes differ by [0-9.]+; seed spread [0-9.]+: (agree|DIFFER)$",
                     result.stdout, re.M), result.stdout


def test_tomo_twin_reads_a_stack_file(tmp_path):
    from fieldfuse import tomo
    import numpy as np
    ph = tomo.phantom(12, angles=[-30.0, 0.0, 30.0])
    np.save(tmp_path / "stack.npy", ph["stack"].numpy())
    np.save(tmp_path / "truth.npy", ph["truth"].numpy())
    out = tmp_path / "volume.npy"
    result = _run_twin("--stack", str(tmp_path / "stack.npy"), "--angles=-30:30:30",
                       "--truth", str(tmp_path / "truth.npy"), "--iterations", "20", "--rays",
                       "128", "--tv-points", "50", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert np.load(out).shape == (12, 12, 12)
    bad = _run_twin("--stack", str(tmp_path / "stack.npy"), "--angles=-30:30:60")
    assert bad.returncode != 0 and "2 angles for 3 projections" in bad.stderr
