# SPDX-License-Identifier: Apache-2.0
"""Runs the README's Python examples (blocks whose first line is `# readme-example`)."""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_TEXT = README.read_text()
# Each example padded with the newlines before it, so its line numbers are README.md's.
EXAMPLES = [
    "\n" * _TEXT.count("\n", 0, m.start(1)) + m.group(1)
    for m in re.finditer(r"```python\n(# readme-example.*?)```", _TEXT, re.S)
]


def test_readme_has_python_examples():
    assert EXAMPLES, "README.md lost its `# readme-example` Python blocks"


def _first_line(source: str) -> str:
    return f"line-{len(source) - len(source.lstrip(chr(10))) + 1}"


@pytest.mark.parametrize("source", EXAMPLES, ids=_first_line)
def test_readme_python_example_runs(source):
    # Compiled under a name that is no file, with the source put in linecache for tracebacks:
    # torch 2.4's dynamo tokenises the whole file named by a traced function's code object as
    # Python, and README.md's prose made it raise (torch 2.11 copes).
    filename = f"<{README.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), {"__name__": "readme_example"})
