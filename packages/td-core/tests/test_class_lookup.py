"""A class named by a file or a peer is found among loaded modules without running any code."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from td_core import TensorDict, tensorclass
from td_core._core.class_lookup import loaded_object


@tensorclass
class Point:
    x: torch.Tensor


def test_a_module_getattr_is_never_called(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    module = types.ModuleType("td_test_lazy_module")
    module.__getattr__ = lambda name: calls.append(name)  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert loaded_object("td_test_lazy_module:Thing") is None
    assert calls == []


def test_a_consolidated_layout_naming_a_class_behind_a_module_getattr_gives_a_tensordict(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    module = types.ModuleType("td_test_lazy_module")
    module.__getattr__ = lambda name: calls.append(name) or Point  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(Point, "__module__", module.__name__)  # the layout names that module
    path = tmp_path / "point.bin"
    Point(x=torch.arange(3.0), batch_size=[3]).consolidate(filename=path)
    with pytest.warns(UserWarning, match="not loaded"):
        back = TensorDict.from_consolidated(path)
    assert type(back) is TensorDict and back["x"].tolist() == [0.0, 1.0, 2.0]
    assert calls == []  # the module's __getattr__ would have answered: it was never asked
