# SPDX-License-Identifier: Apache-2.0
"""Runs the Python examples (blocks starting `# doc-example`) of README.md and docs/*.md."""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "# doc-example"
# Every page that documents Python must keep at least one runnable example; a page added to docs/
# has its marked blocks run without being listed here.
MUST_HAVE_EXAMPLES = ("README.md", "docs/tv.md", "docs/kplanes.md", "docs/render.md",
                      "docs/hash_grid.md", "docs/mlp.md", "docs/optim.md", "docs/project.md",
                      "docs/optics.md")
PAGES = sorted({ROOT / name for name in MUST_HAVE_EXAMPLES} | set((ROOT / "docs").glob("*.md")))
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number of the block's first line, source) of every ```python block of a page."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in PYTHON_BLOCK.finditer(text)]


EXAMPLES = [
    pytest.param(page, line, source, id=f"{page.relative_to(ROOT)}:{line}")
    for page in PAGES
    for line, source in python_blocks(page)
    if source.startswith(MARKER + "\n")
]


@pytest.mark.parametrize("name", MUST_HAVE_EXAMPLES)
def test_page_has_python_examples(name):
    page = ROOT / name
    assert page.is_file(), f"{name} is missing"
    assert any(p.values[0] == page for p in EXAMPLES), f"{name} lost its `{MARKER}` Python blocks"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_is_an_example(page):
    # An unmarked block would be shown to readers but never run, so it could rot unnoticed.
    unmarked = [line for line, source in python_blocks(page)
                if not source.startswith(MARKER + "\n")]
    assert not unmarked, f"{page.name}: ```python blocks at lines {unmarked} lack `{MARKER}`"


@pytest.mark.parametrize(("page", "line", "source"), EXAMPLES)
def test_python_example_runs(page, line, source):
    # Padding with blank lines makes a traceback point at the page's own line numbers. Compiled
    # under a name that is no file, with the source put in linecache for tracebacks: torch 2.4's
    # dynamo tokenises the whole file named by a traced function's code object as Python, and the
    # pages' prose made it raise (torch 2.11 copes).
    padded = "\n" * (line - 1) + source
    filename = f"<{page.relative_to(ROOT)}>"
    linecache.cache[filename] = (len(padded), None, padded.splitlines(True), filename)
    exec(compile(padded, filename, "exec"), {"__name__": "doc_example"})
