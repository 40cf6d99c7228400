"""`isin` and `remove_duplicates`: elements compared by the slices of one entry."""

import warnings

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, isin, lazy_stack, remove_duplicates


def _td() -> TensorDict:
    return TensorDict(
        x=torch.tensor([[1, 2], [3, 4], [1, 2], [5, 6]]),
        y=torch.arange(4),
        n=TensorDict(z=torch.tensor([7, 1, 7, 3]), batch_size=[4]),
        s="text",
        batch_size=[4],
    )


def test_isin_compares_whole_slices_along_dim() -> None:
    ref = TensorDict(x=torch.tensor([[1, 2], [5, 6], [2, 1]]), batch_size=[3])
    assert isin(_td(), ref, "x").tolist() == [True, False, True, True]
    assert isin(_td(), ref, "x", dim=-1).tolist() == [True, False, True, True]


def test_isin_along_the_second_batch_dim() -> None:
    values = torch.ones(3, 4)
    values[:, 2] = 5
    td = TensorDict(a=values, batch_size=[3, 4])
    ref = TensorDict(a=torch.ones(3, 2), batch_size=[3, 2])
    assert isin(td, ref, "a", dim=1).tolist() == [True, True, False, True]


def test_isin_promotes_dtypes_and_handles_empty_sides() -> None:
    ref = TensorDict(x=torch.tensor([[1.0, 2.0]]), batch_size=[1])
    assert isin(_td(), ref, "x").tolist() == [True, False, True, False]
    empty = TensorDict(x=torch.zeros(0, 2, dtype=torch.long), batch_size=[0])
    assert isin(_td(), empty, "x").tolist() == [False] * 4
    assert isin(empty, _td(), "x").shape == (0,)


def test_isin_nested_key_and_lazy_stack() -> None:
    ref = TensorDict(n=TensorDict(z=torch.tensor([3]), batch_size=[1]), batch_size=[1])
    assert isin(_td(), ref, ("n", "z")).tolist() == [False, False, False, True]
    lazy = lazy_stack([TensorDict(x=torch.tensor(i % 2)) for i in range(4)])
    assert isin(lazy, lazy[:1], "x").tolist() == [True, False, True, False]


def _ref(*shape: int) -> TensorDict:
    """A reference TensorDict of zeros whose batch dims are all but the last of `shape`."""
    return TensorDict(x=torch.zeros(*shape), batch_size=list(shape[:-1]))


@pytest.mark.parametrize(
    "ref,key,dim,error,match",
    [
        (_ref(1, 2), "y", 0, KeyError, "'y' not found in reference"),
        (_ref(1, 2), "s", 0, KeyError, "'s' not found in input"),
        (_ref(1, 2), "n", 0, KeyError, "'n' not found in input"),
        (_ref(1, 1, 2), "x", 0, ValueError, "number of dim"),
        (_ref(1, 2), "x", 1, ValueError, "dimension '1' is invalid"),
        (_ref(1, 3), "x", 0, RuntimeError, r"\(4, 2\) in input"),
    ],
)
def test_isin_errors(ref, key, dim, error, match) -> None:
    with pytest.raises(error, match=match):
        isin(_td(), ref, key, dim)


def test_remove_duplicates_keeps_the_first_of_each_value_sorted_by_value() -> None:
    td = _td()
    out, indices = remove_duplicates(td, ("n", "z"), return_indices=True)
    assert out["n", "z"].tolist() == [1, 3, 7]
    assert out["y"].tolist() == [1, 3, 0]
    assert out["s"] == "text" and out.batch_size == (3,)
    assert indices.tolist() == [2, 0, 2, 1]
    out["y"] += 10  # new tensors: the input is left as it was
    assert td["y"].tolist() == [0, 1, 2, 3]
    assert remove_duplicates(td, "x")["y"].tolist() == [0, 1, 3]


def test_remove_duplicates_along_the_second_batch_dim() -> None:
    td = TensorDict(
        a=torch.tensor([[3, 1, 3], [3, 1, 3]]), b=torch.arange(6).view(2, 3), batch_size=[2, 3]
    )
    out, indices = remove_duplicates(td, "a", dim=-1, return_indices=True)
    assert out.batch_size == (2, 2)
    assert out["b"].tolist() == [[1, 0], [4, 3]]
    assert indices.tolist() == [1, 0, 1]


def test_remove_duplicates_keeps_the_kind_and_handles_empty() -> None:
    lazy = lazy_stack([TensorDict(x=torch.tensor(i % 2)) for i in range(4)])
    out = remove_duplicates(lazy, "x")
    assert isinstance(out, LazyStackedTensorDict) and out["x"].tolist() == [0, 1]
    empty, indices = remove_duplicates(_td()[:0], "x", return_indices=True)
    assert empty.batch_size == (0,) and indices.shape == (0,)
    no_values = TensorDict(e=torch.zeros(3, 0), batch_size=[3])
    assert remove_duplicates(no_values, "e").batch_size == (1,)


@pytest.mark.parametrize(
    "key,dim,error,match",
    [
        ("q", 0, KeyError, "The key 'q' does not exist"),
        ("n", 0, KeyError, "'n' does not point to a tensor"),
        ("s", 0, KeyError, "'s' does not point to a tensor"),
        ("x", 1, ValueError, r"dimension '1' is invalid for a TensorDict with batch size"),
        ("x", 1.0, ValueError, r"dimension '1.0' is invalid"),
    ],
)
def test_remove_duplicates_errors(key, dim, error, match) -> None:
    with pytest.raises(error, match=match):
        remove_duplicates(_td(), key, dim)


@pytest.mark.parametrize("seed", range(6))
def test_matches_upstream_on_random_batches(seed) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        up = pytest.importorskip("tensordict")
        up_utils = pytest.importorskip("tensordict.utils")
    gen = torch.Generator().manual_seed(seed)
    batch = torch.randint(1, 5, (1 + seed % 3,), generator=gen).tolist()
    feature = [2] * (seed % 2)
    values = torch.randint(0, 2, batch + feature, generator=gen)
    rows = torch.arange(values.numel()).view(values.shape)
    for dim in range(-len(batch), len(batch)):
        ref_batch = list(batch)
        ref_batch[dim] = 3
        ref = torch.randint(0, 2, ref_batch + feature, generator=gen)
        mine = TensorDict(a=values, b=rows, batch_size=batch)
        theirs = up.TensorDict(a=values, b=rows, batch_size=batch)
        out, indices = remove_duplicates(mine, "a", dim, return_indices=True)
        up_out, up_indices = up_utils.remove_duplicates(theirs, "a", dim, return_indices=True)
        assert out.batch_size == up_out.batch_size
        assert torch.equal(out["b"], up_out["b"]) and torch.equal(indices, up_indices)
        found = isin(mine, TensorDict(a=ref, batch_size=ref_batch), "a", dim)
        up_found = up_utils.isin(theirs, up.TensorDict(a=ref, batch_size=ref_batch), "a", dim)
        assert torch.equal(found, up_found)
