"""`with td.<view op>(...) as view:` writes back into `td`; `with td.lock_():` restores the lock.

The property test over every kind is `contract/test_views.py`; these are the
cases it does not draw: nested blocks, locked sources, lock blocks on views,
parameters, tensorclass fields and dtype views.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, TensorDictParams, tensorclass
from td_core.errors import LockedError


def _td() -> TensorDict:
    return TensorDict({"a": torch.zeros(3, 4, 2), "n": {"b": torch.zeros(3, 4)}}, [3, 4])


def test_new_nested_and_deleted_keys_reach_the_source() -> None:
    td = _td()
    with td.transpose(1, 0) as tdt:
        tdt.set("c", torch.arange(12.0).reshape(4, 3))
        tdt["n", "x"] = torch.ones(4, 3, 5)
        del tdt["n", "b"]
    assert (td["c"] == torch.arange(12.0).reshape(4, 3).T).all()
    assert td["n", "x"].shape == (3, 4, 5)
    assert ("n", "b") not in td.keys(True)


def test_nested_blocks_write_back_through_every_level() -> None:
    td = _td()
    with td.flatten_keys(",") as flat:
        with flat.unflatten_keys(",") as again:
            again["new", "data"] = torch.ones(3, 4)
        assert (flat["new,data"] == 1).all()
    assert (td["new", "data"] == 1).all()


def test_deleting_a_sub_tensordict_in_a_flat_view_deletes_its_leaves() -> None:
    td = _td()
    with td.flatten_keys() as flat:
        del flat["n.b"]
    assert "b" not in td["n"].keys()


@pytest.mark.parametrize(
    "op",
    [
        lambda t: t.unsqueeze(0),
        lambda t: t.squeeze(),
        lambda t: t.view(-1),
        lambda t: t.flatten(0, 1),
        lambda t: t.unflatten(0, (3, 1)),
        lambda t: t.movedim(0, 1),
        lambda t: t.select("a"),
    ],
)
def test_every_view_op_writes_back(op: Any) -> None:
    td = TensorDict({"a": torch.zeros(3, 1, 2)}, [3, 1])
    with op(td) as view:
        view["z"] = torch.ones(view.shape)
    assert td["z"].shape == (3, 1)
    assert (td["z"] == 1).all()


def test_a_locked_source_refuses_new_keys_and_changes_nothing() -> None:
    td = _td().lock_()
    with pytest.raises(LockedError, match="'c'"):
        with td.transpose(0, 1) as tdt:
            tdt["c"] = torch.zeros(4, 3)
            tdt["a"] = torch.ones(4, 3, 2)
    assert "c" not in td.keys()
    assert (td["a"] == 0).all()


def test_a_view_of_a_locked_source_is_locked_and_refuses_a_replaced_leaf_at_once() -> None:
    td = _td().lock_()
    a = td["a"]
    with pytest.raises(LockedError, match="'a'"):
        with td.transpose(0, 1) as tdt:
            assert tdt.is_locked and tdt["n"].is_locked
            tdt["a"] = torch.ones(4, 3, 2)
    assert td["a"] is a
    assert (a == 0).all()


def test_an_in_place_write_through_a_view_of_a_locked_source_reaches_it() -> None:
    td = _td().lock_()
    a = td["a"]
    with td.transpose(0, 1) as tdt:
        tdt.set_("a", torch.ones(4, 3, 2))
    assert td["a"] is a
    assert (a == 1).all()


def test_a_locked_source_refuses_deletions() -> None:
    td = _td().lock_()
    with pytest.raises(LockedError, match="delete"):
        with td.unsqueeze(0) as view:
            view.unlock_()
            del view["a"]
    assert "a" in td.keys()


def test_lock_blocks_on_a_view_restore_the_lock_and_write_nothing_back() -> None:
    td = _td()
    tdt = td.transpose(0, 1).lock_()
    with tdt.unlock_():
        tdt["c"] = torch.zeros(4, 3)
    assert tdt.is_locked
    assert "c" not in td.keys()


def test_an_error_in_the_block_writes_nothing_back() -> None:
    td = _td()
    with pytest.raises(ZeroDivisionError):
        with td.permute(1, 0) as view:
            view["c"] = torch.zeros(4, 3)
            raise ZeroDivisionError
    assert "c" not in td.keys()


def test_parameters_not_touched_in_the_view_stay_the_same_objects() -> None:
    params = TensorDictParams(TensorDict({"w": torch.zeros(3, 4), "v": torch.zeros(3, 4)}, [3, 4]))
    w = params["w"]
    with params.transpose(0, 1) as view:
        view["v"] = torch.ones(4, 3)
    assert params["w"] is w
    assert isinstance(params["v"], torch.nn.Parameter)
    assert (params["v"] == 1).all()


@tensorclass
class _Data:
    X: Any
    z: str


def test_a_tensorclass_field_set_in_the_view_reaches_the_instance() -> None:
    data = _Data(X=None, z="text", batch_size=[3, 4])
    with data.view(-1) as viewed:
        assert isinstance(viewed, _Data)
        viewed.X = torch.zeros(12, 5)
    assert data.X.shape == (3, 4, 5)


def test_a_dtype_view_writes_back_in_the_source_dtype() -> None:
    td = TensorDict({"a": torch.zeros(3, 2)}, [3])
    with td.view(torch.int32) as view:
        view["a"] = torch.full((3, 2), 7, dtype=torch.int32)
        view["b"] = torch.ones(3)
    assert td["a"].dtype == torch.float32
    assert (td["a"].view(torch.int32) == 7).all()
    assert (td["b"] == 1).all()


def test_a_transpose_dim_out_of_range_names_both_dims_in_upstreams_words() -> None:
    with pytest.raises(ValueError, match="dim0 and dim1 must be within the range") as info:
        _td().transpose(-5, -6)
    assert "The provided dimensions are incompatible" in str(info.value)
    assert "[3, 4]" in str(info.value)


def test_movedim_is_a_torch_function_and_names_its_mistakes() -> None:
    td = TensorDict({"a": torch.zeros(4, 5, 6, 2)}, [4, 5, 6])
    assert torch.movedim(td, 0, 2).batch_size == (5, 6, 4)
    assert torch.moveaxis(td, -1, 0).batch_size == (6, 4, 5)
    with pytest.raises(RuntimeError, match="repeated dim in source"):
        td.movedim((0, 0), (1, 2))
    with pytest.raises(RuntimeError, match="repeated dim in destination"):
        td.movedim((0, 1), (2, 2))
    with pytest.raises(ValueError, match="same number of elements"):
        td.movedim((0,), (1, 2))
    with pytest.raises(IndexError):
        td.movedim(0, 5)


def test_an_identity_rearrangement_is_the_tensordict_itself() -> None:
    td = TensorDict({"a": torch.zeros(4, 5, 6)}, [4, 5, 6])
    assert td.movedim(1, 1) is td
    assert td.transpose(0, 0) is td
    assert td.permute(0, 1, 2) is td
    assert td.permute(2, 1, 0) is not td


@pytest.mark.parametrize("make", [_td, lambda: LazyStackedTensorDict(_td(), _td())])
def test_a_view_does_not_keep_its_source_alive(make: Any) -> None:
    source = make()
    view = source.unsqueeze(0)
    gone = weakref.ref(source)
    del source
    gc.collect()
    assert gone() is None
    with view:  # nothing left to write back to: the block is a no-op
        view["c"] = torch.zeros(view.batch_size)
    assert "c" in view.keys()


def test_a_later_lock_block_on_a_view_drops_its_write_back() -> None:
    td = _td()
    view = td.transpose(0, 1)
    with view.lock_():
        pass
    with view:  # the record went with the lock block: this block writes nothing back
        view["c"] = torch.zeros(4, 3)
    assert "c" not in td.keys()
