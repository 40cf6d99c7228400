"""Indexing over the batch dims like a tensor, in-place writes, lazy pre-allocation."""

import pytest
import torch

from td_core import TensorDict, lazy_stack

BATCH = (4, 5)


def make_td():
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "a": torch.randn(*BATCH, 3, generator=g),
            "i": torch.arange(20).reshape(*BATCH),
            "nested": {"b": torch.randn(*BATCH, 2, generator=g)},
            "sub": TensorDict({"x": torch.randn(*BATCH, 6, generator=g)}, [*BATCH, 6]),
        },
        batch_size=BATCH,
    )


LEAVES = ["a", "i", ("nested", "b"), ("sub", "x")]

INDICES = {
    "int": 1,
    "neg-int": -1,
    "slice": slice(1, 3),
    "step-slice": slice(None, None, 2),
    "empty-slice": slice(2, 2),
    "ellipsis": ...,
    "ellipsis-int": (..., 2),
    "ellipsis-slice": (..., slice(0, 2)),
    "none": None,
    "none-int": (None, 0),
    "int-none": (1, None),
    "int-int": (1, 2),
    "int-slice": (0, slice(1, 4)),
    "slice-int": (slice(None), 3),
    "neg-int-neg-slice": (-1, slice(-3, None)),
    "step-slice-neg-int": (slice(None, None, 3), -2),
    "slice-slice": (slice(1, None), slice(None, 10, 2)),
    "empty-tuple": (),
    "bool-1d": torch.tensor([True, False, True, True]),
    "bool-2d": torch.arange(20).reshape(BATCH) % 3 == 0,
    "bool-all-false": torch.zeros(4, dtype=torch.bool),
    "long": torch.tensor([3, 0, 0]),
    "long-2d": torch.tensor([[0, 1], [2, 3]]),
    "list": [0, 2],
    "long-pair": (torch.tensor([0, 1]), torch.tensor([4, 2])),
    "slice-long": (slice(None), torch.tensor([0, 4])),
    "long-slice": (torch.tensor([2, 1]), slice(1, 3)),
    "int-long": (2, torch.tensor([1, 1, 0])),
    "bool-then-slice": (torch.tensor([True, False, True, False]), slice(0, 2)),
    "ellipsis-long": (..., torch.tensor([3])),
    "none-slice-none": (None, slice(1, 3), None),
}


def leaf_index(idx, feature_dims):
    """The index a leaf with ``feature_dims`` trailing dims gets: ``...`` covers batch dims only."""
    parts = idx if isinstance(idx, tuple) else (idx,)
    if any(p is Ellipsis for p in parts):
        return (*parts, *([slice(None)] * feature_dims))
    return idx


def index_leaf(tensor, idx):
    return tensor[leaf_index(idx, tensor.ndim - len(BATCH))]


@pytest.mark.parametrize("idx", list(INDICES.values()), ids=list(INDICES))
def test_getitem_matches_tensor_indexing(idx):
    td = make_td()
    sub = td[idx]
    expected_batch = torch.empty(BATCH)[idx].shape
    assert isinstance(sub, TensorDict)
    assert sub.batch_size == expected_batch
    for key in LEAVES:
        assert torch.equal(sub[key], index_leaf(td[key], idx)), key
    assert sub["nested"].batch_size == expected_batch
    assert sub["sub"].batch_size == index_leaf(torch.empty(*BATCH, 6), idx).shape


@pytest.mark.parametrize("idx", list(INDICES.values()), ids=list(INDICES))
def test_setitem_with_tensordict_writes_in_place(idx):
    td = make_td()
    originals = {key: td[key] for key in LEAVES}
    expected = {key: td[key].clone() for key in LEAVES}
    sub_batch = td[idx].batch_size
    value = TensorDict(
        {
            "a": torch.full((*sub_batch, 3), 7.0),
            "i": torch.full(sub_batch, -1, dtype=torch.int64),
            "nested": {"b": torch.full((*sub_batch, 2), 8.0)},
            "sub": TensorDict({"x": torch.full((*sub_batch, 6), 9.0)}, [*sub_batch, 6]),
        },
        batch_size=sub_batch,
    )
    td[idx] = value
    fills = {"a": 7.0, "i": -1, ("nested", "b"): 8.0, ("sub", "x"): 9.0}
    for key in LEAVES:
        expected[key][leaf_index(idx, expected[key].ndim - len(BATCH))] = fills[key]
        assert td[key] is originals[key], key
        assert torch.equal(td[key], expected[key]), key


@pytest.mark.parametrize("idx", [0, slice(1, 3), torch.tensor([True, False, False, True])])
def test_setitem_with_tensor_broadcasts_to_every_leaf(idx):
    td = make_td()
    td[idx] = torch.tensor(5)
    for key in LEAVES:
        assert (td[key][idx] == 5).all(), key
    rest = torch.ones(4, dtype=torch.bool)
    rest[idx] = False
    assert not (td["a"][rest] == 5).any()


@pytest.mark.parametrize(
    "idx",
    [
        1,
        slice(1, 3),
        torch.tensor([0, 2]),
        [2, 0],
        torch.tensor([True, False, True, False]),
        (0, torch.tensor([1, 3])),
    ],
    ids=["int", "slice", "long", "list", "bool", "int-long"],
)
def test_setitem_with_python_scalar(idx):
    # like tensor[idx] = 3.0, the scalar is cast to each leaf's dtype (int64 leaf "i" included)
    td = make_td()
    expected = {key: td[key].clone() for key in LEAVES}
    td[idx] = 3.0
    for key in LEAVES:
        expected[key][idx] = 3.0
        assert td[key].dtype == expected[key].dtype, key
        assert torch.equal(td[key], expected[key]), key


def test_setitem_with_plain_dict():
    td = TensorDict({"a": torch.zeros(4, 3), "n": {"b": torch.zeros(4)}}, [4])
    td[2] = {"a": torch.ones(3), "n": {"b": torch.tensor(2.0)}}
    assert torch.equal(td["a"][2], torch.ones(3))
    assert td["n", "b"][2] == 2.0
    assert (td["a"][[0, 1, 3]] == 0).all()


def test_basic_indexing_returns_views():
    td = make_td()
    sub = td[1:3]
    sub["a"].zero_()
    assert (td["a"][1:3] == 0).all()
    row = td[0]
    row.set_(("nested", "b"), torch.full((5, 2), 4.0))
    assert (td["nested", "b"][0] == 4).all()


def test_advanced_indexing_copies():
    td = make_td()
    sub = td[torch.tensor([0, 1])]
    sub["a"].zero_()
    assert not (td["a"][:2] == 0).all()


def test_getitem_string_vs_tuple_of_ints():
    td = make_td()
    assert td["nested", "b"].shape == torch.Size([4, 5, 2])
    assert td[(1, 2)].batch_size == torch.Size([])
    assert td[(1, 2)]["a"].shape == torch.Size([3])


def test_index_scalar_batch_with_none_and_ellipsis():
    td = TensorDict({"a": torch.zeros(3)}, [])
    assert td[None].batch_size == torch.Size([1])
    assert td[None]["a"].shape == torch.Size([1, 3])
    assert td[...].batch_size == torch.Size([])


@pytest.mark.parametrize("idx", [4, -5, (0, 5)])
def test_index_out_of_range_raises_index_error(idx):
    td = make_td()
    with pytest.raises(IndexError):
        td[idx]


def test_negative_step_raises_as_a_tensor_does():
    td = make_td()
    with pytest.raises(ValueError, match="step must be greater than zero"):
        td[0, ::-1]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        TensorDict({}, [4, 5])[:, ::-1]  # no leaf: the batch size alone says so


def test_index_past_batch_dims_raises_index_error():
    td = make_td()
    # a tensor of shape BATCH has only two dims to index
    with pytest.raises(IndexError):
        td[0, 0, 0]


def test_bool_mask_of_wrong_shape_raises():
    td = make_td()
    with pytest.raises(IndexError):
        td[torch.tensor([True, False])]


def test_non_tensor_survives_indexing():
    td = make_td()
    td["s"] = "text"
    assert td[torch.tensor([0, 2])]["s"] == "text"
    assert td[1, 2]["s"] == "text"


# ---------------------------------------------------------------- lazy pre-allocation


def row(i):
    return TensorDict(
        {
            "a": torch.full((3,), float(i)),
            "b": TensorDict({"c": torch.full((2,), i, dtype=torch.int64)}, []),
        },
        [],
    )


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [3, 1, 0, 4, 2], [4, 3, 2, 1, 0]])
def test_lazy_preallocation_any_order(order):
    td = TensorDict({}, [5])
    for i in order:
        td[i] = row(i)
    assert td.batch_size == torch.Size([5])
    assert td["a"].shape == torch.Size([5, 3])
    assert td["b", "c"].shape == torch.Size([5, 2])
    assert td["b", "c"].dtype == torch.int64
    assert isinstance(td["b"], TensorDict)
    assert td["b"].batch_size == torch.Size([5])
    assert torch.equal(td["a"][:, 0], torch.arange(5.0))
    assert torch.equal(td["b", "c"][:, 1], torch.arange(5))


def test_lazy_preallocation_writes_in_place_after_first_row():
    td = TensorDict({}, [3])
    td[0] = row(0)
    a = td["a"]
    td[2] = row(2)
    td[1] = row(1)
    assert td["a"] is a
    assert torch.equal(a[:, 0], torch.tensor([0.0, 1.0, 2.0]))


def test_lazy_preallocation_first_row_only():
    td = TensorDict({}, [4])
    td[2] = row(7)
    assert td["a"].shape == torch.Size([4, 3])
    assert torch.equal(td["a"][2], torch.full((3,), 7.0))
    assert torch.equal(td["b", "c"][2], torch.full((2,), 7))


def test_lazy_preallocation_multi_dim_batch():
    td = TensorDict({}, [4, 5])
    td[1, 2] = TensorDict({"a": torch.ones(3)}, [])
    assert td["a"].shape == torch.Size([4, 5, 3])
    assert torch.equal(td["a"][1, 2], torch.ones(3))


def test_lazy_preallocation_with_slice():
    td = TensorDict({}, [5])
    td[1:3] = TensorDict({"a": torch.ones(2, 3)}, [2])
    assert td["a"].shape == torch.Size([5, 3])
    assert torch.equal(td["a"][1:3], torch.ones(2, 3))


def test_lazy_preallocation_keeps_device():
    td = TensorDict({}, [3], device="meta")
    td[0] = TensorDict({"a": torch.ones(2)}, [])
    assert td["a"].device.type == "meta"
    assert td["a"].shape == torch.Size([3, 2])


def test_lazy_preallocation_matches_stack():
    rows = [row(i) for i in range(6)]
    pre = TensorDict({}, [6])
    for i, r in enumerate(rows):
        pre[i] = r
    stacked = torch.stack(rows)
    assert pre.batch_size == stacked.batch_size
    for key in ["a", ("b", "c")]:
        assert torch.equal(pre[key], stacked[key])


def _kinds_for_writes():
    def member():
        return TensorDict(
            {"a": torch.randn(4, 3, 1, 5), "n": {"b": torch.randn(4, 3, 1)}}, [4, 3, 1]
        )

    dense = TensorDict(
        {"a": torch.randn(4, 3, 2, 1, 5), "n": {"b": torch.randn(4, 3, 2, 1)}}, [4, 3, 2, 1]
    )
    return {"dense": dense, **{f"lazy{d}": lazy_stack([member(), member()], d) for d in range(4)}}


@pytest.mark.parametrize("kind", ["dense", "lazy0", "lazy1", "lazy2", "lazy3"])
def test_setitem_broadcasts_a_value_with_fewer_or_leading_one_dims(kind):
    td = _kinds_for_writes()[kind]
    td[:1] = td[0].clone().zero_()  # batch [3, 2, 1] broadcast into [1, 3, 2, 1], as torch
    assert (td[:1] == 0).all() and not (td[1:] == 0).all()
    td[1] = td[:1].clone().fill_("a", 7.0)  # an extra leading 1 is dropped, as torch
    assert (td[1]["a"] == 7).all()
    td[:, :2] = td[:, :2].clone().zero_().to_dict()  # a dict of the indexed shape
    assert (td[:, :2] == 0).all()
    before = td.clone()
    with pytest.raises(
        RuntimeError, match=r"batch dimension mismatch.*Cannot broadcast the tensordict"
    ):
        td[:1] = torch.cat([td[:1], td[:1]], 0)
    assert (td == before).all()


def test_setitem_row_with_a_leading_one_leaf():
    td = TensorDict({"images": torch.zeros(5, 28, 28)}, [5])
    td[2] = TensorDict({"images": torch.ones(1, 28, 28)}, [])  # torch broadcasts [1, 28, 28]
    assert td["images"][2].sum() == 28 * 28 and td["images"].sum() == 28 * 28


@pytest.mark.parametrize("kind", ["lazy0", "lazy1", "lazy2", "lazy3"])
def test_lazy_setitem_with_a_mask_over_the_stack_dim(kind):
    td = _kinds_for_writes()[kind]
    dense = td.contiguous()
    mask = torch.zeros(td.shape, dtype=torch.bool).bernoulli_(
        0.6, generator=torch.Generator().manual_seed(0)
    )
    n = int(mask.sum())
    value = TensorDict({"a": torch.randn(n, 5), "n": {"b": torch.randn(n)}}, [n])
    td[mask] = value
    dense[mask] = value
    assert (td.contiguous() == dense).all()
    td[mask] = 0.0
    dense[mask] = 0.0
    assert (td.contiguous() == dense).all()


def test_setitem_with_a_mismatched_batch_says_what_the_destination_is():
    td = TensorDict(a=torch.zeros(3, 4), batch_size=[3, 4])
    with pytest.raises(
        RuntimeError, match=r"indexed destination TensorDict batch size is \[3, 2\]"
    ):
        td[:, [1, 2]] = td.clone()
    assert (td["a"] == 0).all()
