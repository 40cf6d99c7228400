"""TensorDictModule construction and call errors carry upstream's words (issue 22)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import InteractionType, TensorDict
from td_nn import TensorDictModule


def test_missing_input_that_breaks_the_call_names_the_key() -> None:
    module = TensorDictModule(nn.Linear(2, 3), in_keys=["a"], out_keys=["b"])
    with pytest.raises(KeyError, match=r"may not have not been found in the input.*\['a'\]"):
        module(TensorDict(c=torch.randn(())))


def test_an_unrelated_failure_is_not_turned_into_a_key_error() -> None:
    def fn(x, y):
        return x + y

    module = TensorDictModule(fn, in_keys={"1": "x", "2": "y"}, out_keys=["a"])
    with pytest.raises(TypeError, match="unexpected keyword argument '1'"):
        module(TensorDict({"1": torch.ones(1), "2": torch.ones(1)}))


@pytest.mark.parametrize("wrong", [nn.Linear, int, [123], 1, torch.randn(2)])
def test_a_class_or_a_value_is_not_a_module(wrong) -> None:
    with pytest.raises(ValueError, match=r"Module .* is not callable") as info:
        TensorDictModule(wrong, in_keys=["in"], out_keys=["out"])
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("wrong", [None, 123, [123]])
def test_keys_that_are_not_keys(wrong) -> None:
    with pytest.raises(ValueError, match="out_keys must be of type list, str or tuples of str"):
        TensorDictModule(nn.Identity(), in_keys=["in"], out_keys=wrong)
    with pytest.raises(ValueError, match="in_keys must be of type list, str or tuples of str"):
        TensorDictModule(nn.Identity(), in_keys=wrong, out_keys=["out"])


def test_construction_warnings() -> None:
    with pytest.warns(UserWarning, match='key "_" is for ignoring output'):
        TensorDictModule(nn.Identity(), in_keys=["_"], out_keys=["o"])
    with pytest.warns(UserWarning, match="out_to_in_map is not None but is only used when in_key"):
        TensorDictModule(nn.Identity(), in_keys=["x"], out_keys=["a"], out_to_in_map=False)


def test_unknown_interaction_type() -> None:
    with pytest.raises(ValueError, match="'foo' is not a valid InteractionType"):
        InteractionType.from_str("foo")


def test_reset_parameters_recursive_warns_when_nothing_is_reset() -> None:
    module = TensorDictModule(nn.ModuleList([nn.Tanh(), nn.ReLU()]), in_keys=["a"], out_keys=["b"])
    with pytest.warns(UserWarning, match="did not find any parameters to reset"):
        module.reset_parameters_recursive()


def test_reset_parameters_recursive_refuses_batched_parameters() -> None:
    module = TensorDictModule(nn.Linear(1, 1), in_keys=["a"], out_keys=["b"])
    params = TensorDict.from_module(module).expand(2, 3).clone()
    before = params.clone()
    with pytest.raises(RuntimeError, match=r"batch_size \[2, 3\]"):
        module.reset_parameters_recursive(params)
    assert (params == before).all()


def test_ensemble_resets_through_the_original_module_once_per_copy() -> None:
    from unittest import mock

    from td_nn import EnsembleModule

    linear = nn.Linear(1, 1)
    linear.reset_parameters = mock.Mock()  # type: ignore[method-assign]
    EnsembleModule(
        TensorDictModule(nn.Sequential(linear), in_keys=["a"], out_keys=["b"]), num_copies=2
    )
    assert linear.reset_parameters.call_count == 2
