"""Every public name has an entry on its API page, checked without building the site.

The docs build (docs/_hooks/td_docs.py) fails on a name of a package's `__all__` that
its `docs/api/<module>.md` page does not render; this test gives the same answer in
seconds, so `uv run pytest` catches a new name without an entry.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = ["td_core", "td_nn", "td_distributions", "td_memmap", "td_query"]


def _hook_module():
    spec = importlib.util.spec_from_file_location("td_docs", ROOT / "docs/_hooks/td_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_has_an_api_entry(module: str) -> None:
    page = (ROOT / "docs" / "api" / f"{module}.md").read_text()
    names = _hook_module().public_names(module)
    if re.search(rf"^::: {module}\s*$", page, re.M):
        return  # the page renders the whole module: every name of its __all__
    entries = set(re.findall(rf"^::: {module}\.(\w+)\s*$", page, re.M))
    missing = [name for name in names if name not in entries]
    assert not missing, f"docs/api/{module}.md: add `::: {module}.<name>` for {missing}"
    unknown = sorted(entries - set(names))
    assert not unknown, f"docs/api/{module}.md documents names not in {module}.__all__: {unknown}"
