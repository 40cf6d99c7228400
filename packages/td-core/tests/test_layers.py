"""td-core's layers import one way: each module only from its own layer or below.

The order is the one `docs/architecture.md` draws. Imports under `if TYPE_CHECKING:`
count (a reader follows them too), and no module imports td_core inside a function.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import td_core

SRC = pathlib.Path(td_core.__file__).parent
# bottom to top; `errors` and `_version` are public leaves every layer may use
LAYERS = [
    "errors",
    "_version",
    "_core",
    "_leaves",
    "_ops",
    "_io",
    "_parallel",
    "_kinds",
    "_functions",
    "_shared",
]
MODULES = sorted(p for p in SRC.rglob("*.py") if p.parent != SRC or p.name != "__init__.py")


def _layer(path: pathlib.Path) -> str:
    part = path.relative_to(SRC).parts[0]
    return part.removesuffix(".py")


def _target(node: ast.ImportFrom | ast.Import, path: pathlib.Path) -> list[str]:
    """The td_core modules (as dotted names below td_core) one import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif node.level:
        base = list(path.relative_to(SRC).parent.parts)
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        names = [".".join(["td_core", *base, *([node.module] if node.module else [])])]
    else:
        names = [node.module or ""]
    # the package itself (`from td_core import X`) is the face, above every layer
    return [
        n.removeprefix("td_core.") if n != "td_core" else "<face>"
        for n in names
        if n == "td_core" or n.startswith("td_core.")
    ]


def test_every_subpackage_is_a_layer() -> None:
    found = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert found <= set(LAYERS), (
        f"sub-packages not in the layer order: {sorted(found - set(LAYERS))}"
    )
    assert {_layer(p) for p in MODULES} <= set(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_run_down(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text())
    own = LAYERS.index(_layer(path))
    wrong: list[str] = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _target(node, path):
                    wrong.append(f"line {node.lineno}: td_core imported inside {fn.name}()")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in _target(node, path):
                layer = target.split(".")[0]
                if LAYERS.index(layer) > own if layer in LAYERS else layer == "<face>":
                    wrong.append(
                        f"line {node.lineno}: imports td_core.{target}, a layer above {_layer(path)}"
                    )
    assert not wrong, "\n".join(wrong)
