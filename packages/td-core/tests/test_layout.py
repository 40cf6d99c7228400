"""Layout ops: error messages, all-or-nothing in-place forms, lazy stacks and non-tensor leaves."""

from __future__ import annotations

import pytest
import torch

from td_core import LazyStackedTensorDict, NonTensorStack, TensorDict, TensorDictParams, lazy_stack
from td_core.errors import BatchSizeError, DimError, LockedError


def make_td() -> TensorDict:
    return TensorDict(
        {"a": torch.arange(12.0).view(4, 3), "n": {"b": torch.zeros(4, 3, 2)}, "s": "hi"}, [4, 3]
    )


def ragged() -> LazyStackedTensorDict:
    return lazy_stack([TensorDict({"r": torch.zeros(3, i + 1)}, [3]) for i in range(3)], 0)


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.narrow(5, 0, 1),
        lambda td: td.movedim(0, 5),
        lambda td: td.swapdims(0, 5),
        lambda td: td.repeat_interleave(2, dim=5),
        lambda td: td.tensor_split(2, 5),
        lambda td: td.unsqueeze(5),
        lambda td: td.flip(5),
        lambda td: td.rot90(1, (0, 5)),
    ],
)
def test_dim_out_of_range_names_dim_and_batch_size(op) -> None:
    td = make_td()
    with pytest.raises(DimError, match=r"dim 5 is out of range for batch_size \[4, 3\]") as info:
        op(td)
    assert isinstance(info.value, (IndexError, ValueError, RuntimeError))


def test_repeat_wrong_count_names_it() -> None:
    with pytest.raises(ValueError, match=r"got 1 counts \[2\] for batch_size \[4, 3\] \(2 dims\)"):
        make_td().repeat(2)


def test_pad_errors() -> None:
    td = make_td()
    with pytest.raises(RuntimeError, match="pairs"):
        td.pad([1])
    with pytest.raises(RuntimeError, match="more than 2 entries per batch dim"):
        td.pad([1] * 6)
    with pytest.raises(BatchSizeError, match="below zero"):
        td.pad([-5, 0])


def test_inplace_shape_change_on_locked_td_changes_nothing() -> None:
    td = make_td().lock_()
    before = td["a"].clone()
    for op in (lambda: td.repeat(2, 1, inplace=True), lambda: td.pad([1, 0], inplace=True)):
        with pytest.raises(LockedError):
            op()
        assert td.batch_size == torch.Size([4, 3])
        assert torch.equal(td["a"], before)


def test_inplace_shape_change_on_params_restores_entries() -> None:
    params = TensorDictParams(TensorDict({"w": torch.ones(4, 3)}, [4, 3]))
    with pytest.raises(RuntimeError):
        params.repeat(2, 1, inplace=True)
    assert params.batch_size == torch.Size([4, 3]) and params["w"].shape == (4, 3)
    assert [name for name, _ in params.named_parameters()] == ["w"]


def test_inplace_forms_return_self() -> None:
    td = make_td()
    assert td.repeat(2, 1, inplace=True) is td and td.batch_size == torch.Size([8, 3])
    assert td.pad([0, 0, 1, 1], inplace=True) is td and td.batch_size == torch.Size([8, 5])
    assert td.flatten(inplace=True) is td and td["n", "b"].shape == (40, 2)


def test_non_tensor_leaves_follow_batch_ops() -> None:
    td = TensorDict({"a": torch.arange(4)}, [4])
    td.set("s", NonTensorStack.from_list(["w", "x", "y", "z"]))
    assert td.repeat(2)["s"] == ["w", "x", "y", "z"] * 2
    assert td.repeat_interleave(2, 0)["s"] == ["w", "w", "x", "x", "y", "y", "z", "z"]
    assert td.narrow(0, 1, 2)["s"] == ["x", "y"]
    assert td.tensor_split(2)[1]["s"] == ["y", "z"]
    assert td.pad([1, 0])["s"] == [None, "w", "x", "y", "z"]
    assert make_td().pad([1, 0])["s"] == [[None] * 3] + [["hi"] * 3] * 4
    assert make_td().rot90()["s"] == "hi"


def test_pad_values_and_bool_leaves() -> None:
    td = TensorDict({"a": torch.ones(2), "m": torch.ones(2, dtype=torch.bool)}, [2])
    out = td.pad([1, 1], value=0)
    assert out["a"].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert out["m"].tolist() == [False, True, True, False]


def test_lazy_stack_ops_stay_lazy_and_write_through() -> None:
    stack = ragged()
    moved = stack.movedim(0, 1)
    assert isinstance(moved, LazyStackedTensorDict) and moved.batch_size == (3, 3)
    moved.tensordicts[0]["r"].fill_(1.0)
    assert stack.tensordicts[0]["r"][0].eq(1).all()
    assert stack.unsqueeze(-1).batch_size == (3, 3, 1)
    assert stack.repeat(2, 1).batch_size == (6, 3)
    assert stack.repeat_interleave(2, dim=1).batch_size == (3, 6)
    assert [p.batch_size for p in stack.tensor_split(2, dim=1)] == [(3, 2), (3, 1)]
    assert stack.view(-1).batch_size == (9,)
    assert stack.reshape(9).get_item_shape("r") == (9, -1)
    assert stack.densify()["r"].is_nested
    padded = stack.densify().to_padded_tensor(padding=-1.0)
    assert padded["r"].shape == (3, 3, 3) and padded["r"][0, 0, 1] == -1
    with pytest.raises(RuntimeError, match="ragged batch dim"):
        stack.densify().to_padded_tensor(mask_key="mask")
    assert stack.depth == 0


def test_lazy_pad_inplace_grows_the_stack() -> None:
    stack = lazy_stack([TensorDict({"a": torch.ones(2)}, [2]) for _ in range(3)], 0)
    assert stack.pad([1, 0, 0, 1], value=5.0, inplace=True) is stack
    assert stack.batch_size == (4, 3)
    assert stack["a"][0].eq(5).all() and stack["a"][1:, 2].eq(5).all()


def test_new_constructors() -> None:
    td = make_td()
    z = td.new_zeros(2, 5, dtype=torch.float64)
    assert (
        z.batch_size == (2, 5) and z["n", "b"].shape == (2, 5, 2) and z["a"].dtype == torch.float64
    )
    assert z["s"] == "hi"
    assert td.new_full((2,), 7)["a"].tolist() == [7.0, 7.0]
    assert td.new_ones(3, requires_grad=True)["a"].requires_grad
    assert td.new_empty(1, device="meta").is_meta
    with pytest.warns(UserWarning, match="To copy construct from a tensor") as caught:
        t = td.new_tensor(torch.ones(2, 3, dtype=torch.int32))
    assert len(caught) == 1  # once per call, not once per leaf
    assert t.batch_size == (2, 3) and t["a"].dtype == torch.float32
    with pytest.warns(UserWarning, match="clone"):
        copied = td.new_tensor(td)
    td.new_tensor([1.0, 2.0])  # not a tensor: no warning (warnings are errors here)
    assert copied["a"].data_ptr() != td["a"].data_ptr() and torch.equal(copied["a"], td["a"])
    with pytest.raises(RuntimeError, match="non-negative"):
        td.new_zeros(-1)


def test_new_tensor_lives_where_its_data_does() -> None:
    """As upstream: without `device=`, `new_tensor(data)` is on `data`'s device, not the
    TensorDict's (the meta device stands in for a GPU here)."""
    td = TensorDict(a=torch.zeros(3, 2), b={"c": torch.ones(3)}, batch_size=[3], device="cpu")
    with pytest.warns(UserWarning, match="copy construct"):
        meta = td.new_tensor(torch.zeros(2, device="meta"))
    assert meta.device == torch.device("meta") and meta["a"].is_meta and meta["b", "c"].is_meta
    on_meta = td.to("meta")
    with pytest.warns(UserWarning, match="copy construct"):
        back = on_meta.new_tensor(torch.zeros(2))
    assert back.device == torch.device("cpu") and not back["a"].is_meta
    assert on_meta.new_tensor([1.0]).device == torch.device("cpu")  # a list: the default device
    assert td.new_tensor([1.0], device="meta")["a"].is_meta


def test_queries() -> None:
    td = make_td()
    assert td.get_item_shape("a") == (4, 3) and td.get_item_shape("n") == (4, 3)
    assert td.entry_class("n") is TensorDict and td.entry_class("missing") is type(None)
    assert td.depth == 1 and TensorDict({"a": torch.ones(1)}, [1]).depth == 0
    assert not td.is_cpu and td.to("cpu").is_cpu and not td.is_cuda
    ptrs = td.data_ptr()
    assert ptrs["a"].item() == td["a"].data_ptr() and ptrs.batch_size == ()
    assert sorted(ragged().data_ptr().keys()) == ["0", "1", "2"]
    assert ragged().entry_class("r") is torch.Tensor


def test_depth_counts_the_levels_of_leaves_not_of_empty_sub_tensordicts() -> None:
    td = TensorDict({"a": {"b": {"c": {}}, "f": 0}, "g": 0})
    assert td.depth == 1
    assert TensorDict({"a": {}, "g": 0}).depth == 0
    assert TensorDict({"a": {"b": {"s": "text"}}}).depth == 2  # a non-tensor value is a leaf
    stack = lazy_stack([TensorDict({"a": {"b": {}}}, []), TensorDict({"a": {"x": 1}}, [])])
    assert stack.depth == 1


def test_keyword_spellings() -> None:
    td = make_td()
    assert td.view(size=(12,)).batch_size == (12,)
    assert td.view(torch.int32)["a"].dtype == torch.int32
    assert td.reshape(size=(3, 4)).batch_size == (3, 4)
    assert td.permute(dims=(1, 0)).batch_size == (3, 4)
    assert td.expand(size=(2, 4, 3)).batch_size == (2, 4, 3)
    assert td.flip(dims=0)["a"][0, 0] == 9.0
    with pytest.raises(TypeError):
        td.reshape(shape=(12,))
