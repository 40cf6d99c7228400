"""consolidate() of nested jagged leaves and lazy stacks, the `_consolidated` record, futures."""

from __future__ import annotations

import io
import pickle
import warnings

import pytest
import torch

from td_core import NonTensorStack, TensorDict, TensorDictFuture, from_consolidated, lazy_stack


def _njt_td() -> TensorDict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that nested tensors are a prototype
        ragged = torch.nested.as_nested_tensor(
            [torch.arange(6.0 * i).view(2, 3, i) for i in range(1, 5)], layout=torch.jagged
        )
    lengths = torch.nested.nested_tensor_from_jagged(
        torch.arange(10.0),
        offsets=torch.tensor([0, 2, 5, 8, 10]),
        lengths=torch.tensor([2, 3, 3, 2]),
    )
    return TensorDict(
        {"ragged": ragged, "n": {"lengths": lengths}, "a": torch.arange(4), "s": "x"}, [4]
    )


def _same_njt(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x._ragged_idx == y._ragged_idx and all(
        torch.equal(u, v) for u, v in zip(x.unbind(), y.unbind())
    )


def _parts(td: TensorDict) -> list[torch.Tensor]:
    out = []
    for t in td.values(True, True):
        out += [t.values(), t.offsets()] if t.is_nested else [t]
        if t.is_nested and t.lengths() is not None:
            out.append(t.lengths())
    return out


def test_nested_jagged_leaves_share_the_buffer() -> None:
    td = _njt_td()
    c = td.consolidate()
    assert c.is_consolidated()
    assert len({p.untyped_storage().data_ptr() for p in _parts(c)}) == 1
    assert _same_njt(c["ragged"], td["ragged"]) and c["ragged"]._ragged_idx == 3
    assert torch.equal(c["n", "lengths"].lengths(), td["n", "lengths"].lengths())
    c._consolidated["storage"].zero_()
    assert (c["ragged"].values() == 0).all() and (c["ragged"].offsets() == 0).all()
    assert not (td["ragged"].values() == 0).all()


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_nested_jagged_round_trips_consolidated(how: str) -> None:
    td = _njt_td()
    c = td.consolidate()
    if how == "pickle":
        back = pickle.loads(pickle.dumps(c))
    else:
        buf = io.BytesIO()
        torch.save(c, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=True)
    assert back.is_consolidated()
    assert _same_njt(back["ragged"], td["ragged"])
    assert torch.equal(back["n", "lengths"].lengths(), td["n", "lengths"].lengths())


def test_nested_jagged_to_a_file(tmp_path) -> None:
    td = _njt_td()
    c = td.consolidate(filename=tmp_path / "njt.bin")
    back = from_consolidated(tmp_path / "njt.bin")
    assert back.is_consolidated() and back["s"] == "x"
    assert _same_njt(back["ragged"], td["ragged"]) and _same_njt(c["ragged"], td["ragged"])
    assert torch.equal(back["n", "lengths"].lengths(), td["n", "lengths"].lengths())


def test_sparse_leaves_are_refused_by_layout() -> None:
    td = TensorDict({"sp": torch.eye(2).to_sparse()}, [])
    with pytest.raises(ValueError, match="sparse_coo"):
        td.consolidate()


def test_lazy_stack_with_values_to_a_file(tmp_path) -> None:
    dense = TensorDict(
        {"a": torch.arange(3).view(1, 3), "b": {"c": torch.ones(1, 3)}, "d": "s"}, [1, 3]
    )
    td = lazy_stack(list(dense.unbind(1)), 1)
    c = td.consolidate(filename=tmp_path / "lazy.bin")
    assert type(c) is type(td) and c.device == torch.device("cpu")
    back = from_consolidated(tmp_path / "lazy.bin")
    assert type(back) is type(td) and back.is_consolidated()
    assert (back == td).all() and back["d"] == [["s"] * 3]


def test_non_tensor_stack_to_a_file(tmp_path) -> None:
    td = TensorDict({"a": torch.zeros(2, 2), "v": NonTensorStack(["x", 1], ["y", 2])}, [2])
    td.consolidate(filename=tmp_path / "v.bin")
    back = from_consolidated(tmp_path / "v.bin")
    assert back["v"] == [["x", 1], ["y", 2]]


def test_private_consolidated_record_is_the_buffer() -> None:
    td = TensorDict({"a": torch.ones(3), "b": torch.ones(2, dtype=torch.float64)}, [])
    assert not hasattr(td, "_consolidated")
    c = td.consolidate()
    storage = c._consolidated["storage"]
    assert storage.dtype == torch.uint8
    assert storage.untyped_storage().data_ptr() == c["a"].untyped_storage().data_ptr()
    storage.zero_()
    assert (c["a"] == 0).all() and (td["a"] == 1).all()


@pytest.mark.parametrize("length", [1, 70_001], ids=["small", "over-1MiB"])
def test_equal_tensordicts_give_equal_buffers(length: int) -> None:
    # the alignment padding is zeroed (small buffers whole, large ones byte by byte):
    # the buffers compare equal byte for byte
    td = TensorDict(
        {f"k{i}": torch.full((i % 7 + length,), i, dtype=torch.float16) for i in range(20)}, []
    )
    for _ in range(3):
        a, b = td.consolidate(), td.consolidate()
        assert torch.equal(a._consolidated["storage"], b._consolidated["storage"])


def test_return_early_gives_a_tensordict_future(tmp_path) -> None:
    td = TensorDict({"a": torch.ones(3), "s": "x"}, [3])
    future = td.consolidate(num_threads=4, return_early=True)
    assert isinstance(future, TensorDictFuture)
    assert future.result(timeout=30).is_consolidated()
    with pytest.raises(NotImplementedError, match="use_buffer"):
        td.consolidate(filename=tmp_path / "x.bin", return_early=True, use_buffer=True)
    with pytest.raises(NotImplementedError, match="non_blocking"):
        td.consolidate(return_early=True, non_blocking=True)
