# SPDX-License-Identifier: Apache-2.0
"""Runs the README's Python examples (blocks whose first line is `# readme-example`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = re.findall(r"```python\n(# readme-example.*?)```", README.read_text(), re.S)


def test_readme_has_python_examples():
    assert EXAMPLES, "README.md lost its `# readme-example` Python blocks"


@pytest.mark.parametrize("source", EXAMPLES, ids=lambda s: f"{len(s.splitlines())}-lines")
def test_readme_python_example_runs(source):
    exec(compile(source, str(README), "exec"), {"__name__": "readme_example"})
