"""TensorDictParams: ``to`` returns a new container; value writes run under no_grad (as upstream)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import TensorDict, TensorDictParams


def _params() -> TensorDictParams:
    return TensorDictParams(
        TensorDict(
            {"w": torch.ones(3), "i": torch.zeros(3, dtype=torch.long), "n": {"b": torch.ones(3)}},
            [3],
        )
    )


def test_to_dtype_returns_a_new_params_and_leaves_self() -> None:
    params = _params()
    out = params.to(torch.float64)
    assert isinstance(out, TensorDictParams) and out is not params
    assert out["w"].dtype == torch.float64 and isinstance(out["w"], nn.Parameter)
    assert out["n", "b"].dtype == torch.float64
    assert params["w"].dtype == torch.float32 and params["n", "b"].dtype == torch.float32


def test_to_batch_size_returns_a_new_params_of_that_batch_size() -> None:
    params = _params()
    out = params.to(batch_size=[])
    assert isinstance(out, TensorDictParams) and out.batch_size == torch.Size([])
    assert out["n"].batch_size == torch.Size([])
    assert out["w"] is params["w"] and params.batch_size == torch.Size([3])
    cast = params.to(torch.int, batch_size=[])
    assert cast.batch_size == torch.Size([]) and cast["w"].dtype == torch.int
    with pytest.raises(RuntimeError, match="batch"):
        params.to(batch_size=[4])
    assert params.batch_size == torch.Size([3])


def test_a_parent_module_to_still_casts_in_place() -> None:
    holder = nn.Module()
    holder.params = _params()
    weight = holder.params["w"]
    holder.to(torch.float64)
    assert holder.params["w"].dtype == torch.float64
    assert holder.params["w"] is weight  # optimizers keep their reference


@pytest.mark.parametrize(
    "write",
    [
        lambda p: p.zero_(),
        lambda p: p.fill_("w", 0.0),
        lambda p: p.set_("w", torch.zeros(3)),
        lambda p: p.update_({"w": torch.zeros(3)}),
        lambda p: p.apply_(lambda t: t * 0),
        lambda p: p.copy_(p.clone().zero_()),
    ],
    ids=["zero_", "fill_", "set_", "update_", "apply_", "copy_"],
)
def test_value_writes_on_parameters_need_no_no_grad(write) -> None:
    params = _params()
    write(params)
    assert (params["w"] == 0).all() and params["w"].requires_grad


def test_clone_is_a_tensordictparams_of_new_leaf_parameters():
    params = TensorDictParams(TensorDict({"w": torch.randn(3), "n": {"b": torch.ones(3)}}, [3]))
    copied = params.clone()
    assert type(copied) is TensorDictParams and type(torch.clone(params)) is TensorDictParams
    assert isinstance(copied.get("w"), torch.nn.Parameter) and copied.get("w").grad_fn is None
    assert copied.get("w") is not params.get("w") and torch.equal(copied.get("w"), params.get("w"))
    assert len(list(copied.parameters())) == 2
    shallow = params.clone(recurse=False)
    assert type(shallow) is TensorDictParams and shallow.get("w") is params.get("w")
    assert shallow.get(("n", "b")) is params.get(("n", "b"))


def test_zero_of_a_tensordict_holding_params_zeroes_them_under_no_grad() -> None:
    params = _params()
    x = torch.ones(3, requires_grad=True) * 2  # not a leaf: its zeroing is recorded
    td = TensorDict({"parent": params, "x": x}, [3])
    td.zero_()
    assert (params["w"] == 0).all() and (params["n", "b"] == 0).all()
    assert isinstance(params["w"], nn.Parameter) and params["w"].requires_grad
    assert (td["x"] == 0).all() and td["x"].grad_fn is not None
