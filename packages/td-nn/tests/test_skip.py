"""set_skip_existing / skip_existing."""

import threading
from typing import ClassVar

import pytest
import torch

from td_core import TensorDict
from td_nn import (
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
    set_skip_existing,
    skip_existing,
)


def _module():
    return TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["y"])


def test_default_and_context():
    assert skip_existing() is False
    with set_skip_existing():
        assert skip_existing() is True
        with set_skip_existing(False):
            assert skip_existing() is False
        assert skip_existing() is True
    assert skip_existing() is False
    with set_skip_existing(["a", ("b", "c")]):
        assert skip_existing() == ["a", ("b", "c")]


def test_module_skips_existing_outputs():
    td = TensorDict(x=torch.zeros(()), y=torch.zeros(()))
    with set_skip_existing():
        assert _module()(td)["y"] == 0
    assert _module()(td)["y"] == 1


def test_list_mode_only_skips_listed_outputs():
    td = TensorDict(x=torch.zeros(()), y=torch.zeros(()))
    with set_skip_existing(["z"]):
        assert _module()(td)["y"] == 1
    td["y"] = torch.zeros(())
    with set_skip_existing(["y"]):
        assert _module()(td)["y"] == 0


def test_module_whose_input_is_an_output_always_runs():
    module = TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["x"])
    td = TensorDict(x=torch.zeros(()))
    with set_skip_existing():
        assert module(td)["x"] == 1


def test_sequence_skips_whole_and_per_member():
    seq = TensorDictSequential(
        _module(), TensorDictModule(lambda y: y * 10, in_keys=["y"], out_keys=["z"])
    )
    td = TensorDict(x=torch.zeros(()), y=torch.full((), 5.0))
    with set_skip_existing():
        out = seq(td)
    assert out["y"] == 5 and out["z"] == 50


class Writes(TensorDictModuleBase):
    in_keys: ClassVar[list] = []
    out_keys: ClassVar[list] = ["out"]

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, tensordict):
        self.calls += 1
        return tensordict.set("out", torch.zeros(()))


def test_base_subclasses_honour_the_mode():
    module = Writes()
    with set_skip_existing():
        module(TensorDict(out=torch.ones(())))
    assert module.calls == 0
    module(TensorDict(out=torch.ones(())))
    assert module.calls == 1


def test_decorator_forms():
    class Always(TensorDictModuleBase):
        in_keys: ClassVar[list] = []
        out_keys: ClassVar[list] = ["out"]
        _native_call = True  # only the decorator decides

        def __init__(self):
            super().__init__()
            self.calls = 0

        @set_skip_existing()
        def forward(self, tensordict):
            self.calls += 1
            assert skip_existing() is True
            return tensordict.set("out", torch.zeros(()))

    class Follows(Always):
        @set_skip_existing(None)
        def forward(self, tensordict):
            self.calls += 1
            return tensordict.set("out", torch.zeros(()))

    always = Always()
    always(TensorDict(out=torch.ones(())))
    assert always.calls == 0
    always(TensorDict())
    assert always.calls == 1
    follows = Follows()
    follows(TensorDict(out=torch.ones(())))
    assert follows.calls == 1
    with set_skip_existing(True):
        follows(TensorDict(out=torch.ones(())))
    assert follows.calls == 1


def test_none_is_refused_as_context_and_bad_modes():
    with pytest.raises(RuntimeError, match=r"It seems.*decorator"), set_skip_existing(None):
        pass
    with pytest.raises(TypeError, match="mode"):
        set_skip_existing(3)


def test_mode_does_not_leak_to_other_threads():
    seen = []
    with set_skip_existing():
        thread = threading.Thread(target=lambda: seen.append(skip_existing()))
        thread.start()
        thread.join()
    assert seen == [False]


def test_exception_restores_mode():
    with pytest.raises(RuntimeError), set_skip_existing():
        raise RuntimeError("boom")
    assert skip_existing() is False
