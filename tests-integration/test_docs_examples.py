"""Every Python code block of the documentation (docs/**/*.md) runs.

Each page's ```python blocks run in order, in one fresh namespace per page, in a
temporary working directory, so a page reads like a session and pages do not
depend on each other. Files a page pulls in with ``--8<-- "path"`` (pymdownx
snippets, relative to the repository root) are expanded first, as the site
build does. Tracebacks point at the Markdown file and line.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)")
SNIPPET = re.compile(r'^[ \t]*--8<--[ \t]+"(?P<path>[^"]+)"[ \t]*$')
PYTHON = {"python", "py", "python3"}


def expand_snippets(text: str) -> str:
    """Inline ``--8<-- "path"`` lines (paths relative to the repository root)."""
    out = []
    for line in text.splitlines():
        match = SNIPPET.match(line)
        out.append((ROOT / match["path"]).read_text() if match else line)
    return "\n".join(out)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, code)`` of each fenced Python block, in order.

    Fences may be indented (inside admonitions or lists); the block is
    dedented by the fence's indentation. Unclosed fences are an error.
    """
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].lower()
        start = i + 1
        i += 1
        body = []
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        else:
            raise ValueError(f"unclosed code fence opened at line {start}")
        i += 1
        if info.strip("{}.").split(".")[-1] in PYTHON:
            blocks.append((start + 1, "\n".join(body) + "\n"))
    return blocks


def _pages() -> list[pathlib.Path]:
    return sorted(DOCS.rglob("*.md"))


def _pages_with_code() -> list[pathlib.Path]:
    return [p for p in _pages() if python_blocks(expand_snippets(p.read_text()))]


def test_extraction_finds_the_examples() -> None:
    # the guides, getting started, migration and format pages all carry examples:
    # if the extractor stopped seeing them, every page test would pass vacuously
    pages = {p.relative_to(DOCS).as_posix() for p in _pages_with_code()}
    expected = {
        "getting-started.md",
        "guides/core.md",
        "guides/nn.md",
        "guides/distributions.md",
        "guides/memmap.md",
        "guides/query.md",
        "memmap-format.md",
        "migration.md",
    }
    assert expected <= pages, f"pages without Python examples: {sorted(expected - pages)}"


def test_extractor_on_a_sample() -> None:
    text = "a\n```python\nx = 1\n```\n\n```bash\nls\n```\n!!! note\n    ```py\n    y = 2\n    ```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (11, "y = 2\n")]
    with pytest.raises(ValueError, match="unclosed"):
        python_blocks("```python\nx = 1\n")


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page_examples_run(
    page: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for line, code in python_blocks(expand_snippets(page.read_text())):
        # pad so that tracebacks give the line number in the Markdown file
        exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)
