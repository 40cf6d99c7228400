"""Missing inputs raise, functional parameter resets, key errors of the upstream class (issue 14)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import TensorDict
from td_nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential


class Passthrough(TensorDictModuleBase):
    """Writes ``y`` only when its input is there (skips silently otherwise)."""

    in_keys = ("missing",)
    out_keys = ("y",)

    def forward(self, tensordict):
        value = tensordict.get("missing", None)
        if value is not None:
            tensordict["y"] = value
        return tensordict


@pytest.mark.parametrize(
    "member",
    [lambda: TensorDictModule(lambda a: a, in_keys=["missing"], out_keys=["y"]), Passthrough],
    ids=["wrapped-callable", "custom-module"],
)
def test_sequence_member_with_a_missing_input_raises_keyerror(member) -> None:
    seq = TensorDictSequential(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["h"]), member()
    )
    with pytest.raises(KeyError, match="missing") as info:
        seq(TensorDict(x=torch.zeros(3), batch_size=[3]))
    text = str(info.value)
    assert "Passthrough" in text or "<lambda>" in text  # names the module


def test_partial_tolerant_sequences_still_skip() -> None:
    seq = TensorDictSequential(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["h"]),
        Passthrough(),
        partial_tolerant=True,
    )
    out = seq(TensorDict(x=torch.zeros(3), batch_size=[3]))
    assert "h" in out.keys() and "y" not in out.keys()


def test_modules_that_handle_a_missing_input_still_run() -> None:
    def fn(x, hidden=None):
        return x + (0 if hidden is None else hidden)

    seq = TensorDictSequential(TensorDictModule(fn, in_keys=["x", "hidden"], out_keys=["y"]))
    assert "y" in seq(TensorDict(x=torch.zeros(3), batch_size=[3])).keys()


def test_reset_parameters_recursive_with_a_parameter_tensordict() -> None:
    torch.manual_seed(0)
    module = TensorDictModule(
        nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), in_keys=["x"], out_keys=["y"]
    )
    own = TensorDict.from_module(module).detach().clone()
    params = TensorDict.from_module(module).detach().clone()
    out = module.reset_parameters_recursive(params)
    assert out is params
    assert not torch.equal(params["module", "0", "weight"], own["module", "0", "weight"])
    assert (TensorDict.from_module(module) == own).all()  # the module is untouched
    assert module.reset_parameters_recursive() is None


def test_select_subsequence_with_an_unknown_out_key_raises_valueerror() -> None:
    seq = TensorDictSequential(TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["h"]))
    with pytest.raises(ValueError, match="'nope'"):
        seq.select_subsequence(out_keys=["nope"])
    with pytest.raises(KeyError):  # td's error is both
        seq.select_subsequence(out_keys=["nope"])


def test_from_modules_with_different_shapes_raises_runtimeerror() -> None:
    from td_core import from_modules

    with pytest.raises(RuntimeError, match="different shapes"):
        from_modules(nn.Linear(2, 3), nn.Linear(2, 4))
