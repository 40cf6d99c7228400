"""The shortcut of `TensorDictModule.__call__` keeps every behaviour of the ordinary call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import TensorDict
from td_nn import TensorDictModule


def _td() -> TensorDict:
    return TensorDict(x=torch.ones(2, 3), batch_size=[2])


def _module() -> TensorDictModule:
    return TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])


def test_module_and_global_hooks_still_run() -> None:
    module = _module()
    seen: list[str] = []
    handle = module.register_forward_pre_hook(lambda m, args: seen.append("pre"))
    module(_td())
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append("global"))
    try:
        module(_td())
    finally:
        handle.remove()
    assert seen == ["pre", "global", "global"]  # the wrapper and the Linear inside it
    module(_td())
    assert len(seen) == 3


def test_a_subclass_forward_is_called() -> None:
    class Marked(TensorDictModule):
        def forward(self, tensordict: TensorDict) -> TensorDict:  # type: ignore[override]
            return tensordict.set("mark", torch.zeros(2))

    assert "mark" in Marked(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"])(_td()).keys()


def test_options_set_after_construction_are_honoured() -> None:
    module = _module()
    module.inplace = False
    out = module(_td())
    assert list(out.keys()) == ["y"]
    module.inplace = True
    module.strict = True
    with pytest.raises(KeyError, match="'x'"):
        module(TensorDict(z=torch.ones(2), batch_size=[2]))
    module.strict = False
    with pytest.raises(KeyError, match="'x'"):
        module(TensorDict(z=torch.ones(2), batch_size=[2]))


def test_selected_out_keys_and_several_outputs() -> None:
    module = TensorDictModule(lambda x: (x + 1, x - 1), in_keys=["x"], out_keys=["a", "b"])
    assert sorted(module(_td()).keys()) == ["a", "b", "x"]
    module.select_out_keys("b")
    assert sorted(module(_td()).keys()) == ["b", "x"]
    single = _module().select_out_keys("y")
    assert single(_td())["y"].shape == (2, 4)


def test_replacing_the_wrapped_module() -> None:
    module = _module()
    module.module = nn.Linear(3, 5)
    assert module(_td())["y"].shape == (2, 5)


def test_compiled_call() -> None:
    module = _module()

    @torch.compile(fullgraph=True, backend="eager")
    def run(td: TensorDict) -> torch.Tensor:
        return module(td)["y"]

    expected = module.module(torch.ones(2, 3))
    torch.testing.assert_close(run(_td()), expected)


def test_changes_after_a_call_are_seen() -> None:
    # the first call works out what the usual call does and keeps it: every later
    # change to the module (attributes, submodules, hooks, kwargs) must still count
    module = _module()
    module(_td())
    module.module = nn.Linear(3, 5)
    assert module(_td())["y"].shape == (2, 5)
    module.add_module("module", nn.Linear(3, 6))  # no setattr: _modules written directly
    assert module(_td())["y"].shape == (2, 6)
    module.inplace = False
    assert list(module(_td()).keys()) == ["y"]
    module.inplace = True
    module.strict = True
    with pytest.raises(KeyError, match="'x'"):
        module(TensorDict(z=torch.ones(2), batch_size=[2]))
    module.strict = False
    handle = module.register_forward_hook(lambda m, args, out: out.set("hooked", torch.ones(2)))
    assert "hooked" in module(_td()).keys()
    handle.remove()
    assert "hooked" not in module(_td()).keys()


def test_method_kwargs_filled_in_place_after_a_call() -> None:
    module = TensorDictModule(lambda x, scale=1.0: x * scale, in_keys=["x"], out_keys=["y"])
    torch.testing.assert_close(module(_td())["y"], torch.ones(2, 3))
    module.method_kwargs["scale"] = 3.0
    torch.testing.assert_close(module(_td())["y"], torch.full((2, 3), 3.0))


def test_copies_call_their_own_module() -> None:
    import copy
    import pickle

    module = _module()
    module(_td())
    for other in (copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        with torch.no_grad():
            other.module.weight.zero_()
            other.module.bias.fill_(2.0)
        torch.testing.assert_close(other(_td())["y"], torch.full((2, 4), 2.0))
        assert not torch.equal(module(_td())["y"], torch.full((2, 4), 2.0))


def test_hooks_and_calls_of_the_wrapped_module_run() -> None:
    # the wrapper calls the inner module's forward directly only when nn.Module's call
    # would do nothing else: its own hooks, and a class's own __call__, still run
    module = _module()
    module(_td())
    seen: list[str] = []
    inner = module.module
    handle = inner.register_forward_pre_hook(lambda m, args: seen.append("pre"))
    module(_td())
    handle.remove()
    handle = inner.register_forward_hook(lambda m, args, out: out * 0)
    assert (module(_td())["y"] == 0).all()
    handle.remove()
    assert not (module(_td())["y"] == 0).all()
    assert seen == ["pre"]

    class Called(nn.Linear):
        def __call__(self, *args: object, **kwargs: object) -> torch.Tensor:
            return torch.full((2, 4), 7.0)

    module.module = Called(3, 4)
    assert (module(_td())["y"] == 7).all()
