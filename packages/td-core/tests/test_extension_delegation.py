"""The methods that hand their work to td-memmap pass every argument on, under its own name.

Each td-memmap function is replaced by a recorder; each method is called with a distinct
object for every parameter, and the recorded call must bind each of them to the
parameter of the same name (`renamed` lists the two whose names differ); what else
reaches it may only be defaults.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import td_core
from td_core import TensorDict

td_memmap = pytest.importorskip("td_memmap", reason="the methods delegate to td-memmap")

# (what is called, the td-memmap function it reaches, {method parameter: function parameter})
CASES: list[tuple[str, str, dict[str, str]]] = [
    ("memmap", "memmap", {}),
    ("memmap_", "memmap", {}),
    ("memmap_like", "memmap_like", {}),
    ("save", "memmap", {}),
    ("load_memmap", "load_memmap", {}),
    ("load", "load_memmap", {}),
    ("load_memmap_", "load_memmap_", {}),
    ("load_", "load_memmap_", {}),
    ("memmap_refresh_", "memmap_refresh_", {}),
    ("make_memmap", "make_memmap", {}),
    ("make_memmap_from_tensor", "make_memmap_from_tensor", {}),
    ("make_memmap_from_storage", "make_memmap_from_storage", {}),
    ("to_store", "to_store", {}),
    ("to_safetensors", "to_safetensors", {}),
    ("from_safetensors", "from_safetensors", {}),
    ("to_h5", "to_h5", {}),
    ("from_h5", "from_h5", {"filename": "h5_file"}),
    ("to_zarr", "to_zarr", {}),
    ("from_zarr", "from_zarr", {}),
    ("to_mds", "to_mds", {}),
    ("td_core.from_h5", "from_h5", {}),
    ("td_core.from_zarr", "from_zarr", {"zarr_file": "filename"}),
    ("td_core.from_safetensors", "from_safetensors", {}),
    ("td_core.to_safetensors", "to_safetensors", {}),
]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


@pytest.mark.parametrize(("method", "function", "renamed"), CASES, ids=[c[0] for c in CASES])
def test_every_argument_reaches_td_memmap(
    monkeypatch: pytest.MonkeyPatch, method: str, function: str, renamed: dict[str, str]
) -> None:
    td = TensorDict()
    if method.startswith("td_core."):
        target: Any = getattr(td_core, method.removeprefix("td_core."))
    else:
        target = getattr(td, method)
    real = getattr(td_memmap, function)
    calls: list[inspect.BoundArguments] = []

    def record(*args: Any, **kwargs: Any) -> str:
        calls.append(inspect.signature(real).bind(*args, **kwargs))
        return "done"

    monkeypatch.setattr(td_memmap, function, record)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    for name, param in inspect.signature(target).parameters.items():
        if param.kind is param.VAR_KEYWORD:
            kwargs["passed_through"] = expected["passed_through"] = _Sentinel("passed_through")
            continue
        value = _Sentinel(name)
        expected[renamed.get(name, name)] = value
        if param.kind is param.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)

    result = target(*args, **kwargs)

    assert len(calls) == 1
    got = dict(calls[0].arguments)
    first = next(iter(inspect.signature(real).parameters))
    if first not in expected:  # the TensorDict itself, for a method
        assert got.pop(first) is td
    got.update(got.pop("kwargs", {}))
    assert {name: got.get(name) for name in expected} == expected
    if method == "memmap_":
        assert got["inplace"] is True
    # what else reaches td-memmap is a default (`save` goes through `memmap`), none of ours
    assert not [
        name for name, value in got.items() if name not in expected and isinstance(value, _Sentinel)
    ]
    if function not in ("to_safetensors", "to_mds"):  # they return nothing
        assert result == "done"
