# SPDX-License-Identifier: Apache-2.0
"""Packaging facts of the installed fieldfuse: one version source, license metadata, type stubs."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fieldfuse

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = Path(fieldfuse.__file__).resolve().parent


def _cmake_project_version() -> str:
    match = re.search(r"project\(fieldfuse\s+VERSION\s+([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert match, "CMakeLists.txt lost its `project(fieldfuse VERSION x.y.z ...)` call"
    return match.group(1)


def test_version_has_one_source():
    # CMakeLists.txt's project() gives the C++ build its version, and pyproject.toml's regex
    # metadata provider reads it from there for the wheel, so all three must agree.
    expected = _cmake_project_version()
    assert importlib.metadata.version("fieldfuse") == expected
    assert fieldfuse.__version__ == expected
    assert fieldfuse.build_info()["version"] == expected


def test_pyproject_declares_no_version_of_its_own():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]


def test_license_metadata_points_at_the_license_file():
    metadata = importlib.metadata.metadata("fieldfuse")
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in metadata.get_all("License-File")
    assert "Apache License" in (ROOT / "LICENSE").read_text()


def test_requires_the_torch_floor():
    # torch.library.custom_op / register_fake / register_autograd arrived in torch 2.4.
    assert "torch>=2.4" in importlib.metadata.requires("fieldfuse")


def test_wheel_ships_the_type_stubs():
    assert (INSTALLED / "py.typed").is_file()
    assert (INSTALLED / "_C.pyi").read_text() == (ROOT / "python/fieldfuse/_C.pyi").read_text()


def test_checked_in_stub_matches_the_extension(tmp_path):
    # The torch-floor venv (scripts/test_torch_floor.sh) installs the wheel without build tools.
    pytest.importorskip("nanobind.stubgen", reason="nanobind (a build tool) is not installed here")
    fresh = tmp_path / "_C.pyi"
    subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "fieldfuse._C", "-o", str(fresh)],
        check=True,
        cwd=tmp_path,
    )
    checked_in = ROOT / "python/fieldfuse/_C.pyi"
    assert fresh.read_text() == checked_in.read_text(), (
        "python/fieldfuse/_C.pyi is stale: run `bash scripts/stubs.sh` and commit the result"
    )
