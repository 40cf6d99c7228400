"""Nested (ragged) memory-mapped tensors: a shape tensor of per-component shapes, stored flat."""

import os
import pickle
import warnings

import pytest
import torch

from td_memmap import MemoryMappedTensor

SHAPES = torch.tensor([[2, 3], [2, 4], [3, 2]])


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():  # torch: "nested tensors are in prototype stage"
        warnings.simplefilter("ignore", UserWarning)
        yield


def _source() -> torch.Tensor:
    return torch.nested.nested_tensor(
        [
            torch.arange(int(s.prod()), dtype=torch.float32).view(*s.tolist()) + 100 * i
            for i, s in enumerate(SHAPES)
        ]
    )


def _assert_same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.is_nested and b.is_nested and a.dtype == b.dtype
    for x, y in zip(a.unbind(), b.unbind(), strict=True):
        assert torch.equal(x, y)


class TestAllocation:
    @pytest.mark.parametrize("in_file", [False, True])
    @pytest.mark.parametrize(
        "make, value",
        [
            (lambda **kw: MemoryMappedTensor.zeros(SHAPES, dtype=torch.int32, **kw), 0),
            (lambda **kw: MemoryMappedTensor.ones(shape=SHAPES, dtype=torch.int32, **kw), 1),
            (
                lambda **kw: MemoryMappedTensor.full(SHAPES, fill_value=3, dtype=torch.int32, **kw),
                3,
            ),
        ],
    )
    def test_factories(self, tmp_path, in_file, make, value):
        t = make(filename=tmp_path / "x.memmap" if in_file else None)
        assert type(t) is MemoryMappedTensor and t.is_nested and t.dtype == torch.int32
        assert torch.equal(t._nested_tensor_size(), SHAPES)
        assert [tuple(c.shape) for c in t.unbind()] == [(2, 3), (2, 4), (3, 2)]
        assert all(bool((c == value).all()) for c in t.unbind())
        if in_file:
            assert t.filename == str(tmp_path / "x.memmap")
            assert os.path.getsize(t.filename) == 4 * int(SHAPES.prod(-1).sum())

    def test_like_and_bad_shapes(self):
        like = MemoryMappedTensor.ones_like(_source())
        assert like.is_nested and all(bool((c == 1).all()) for c in like.unbind())
        with pytest.raises(ValueError, match="2-d integer tensor"):
            MemoryMappedTensor.zeros(torch.tensor([2, 3]))
        with pytest.raises(ValueError, match="negative"):
            MemoryMappedTensor.zeros(torch.tensor([[2, -1]]))


class TestFromData:
    @pytest.mark.parametrize("in_file", [False, True])
    def test_from_tensor_copies_the_components(self, tmp_path, in_file):
        src = _source()
        t = MemoryMappedTensor.from_tensor(src, filename=tmp_path / "x.memmap" if in_file else None)
        assert type(t) is MemoryMappedTensor
        _assert_same(t, src)
        t[0].fill_(-1)  # a copy: the source is unchanged
        assert src.unbind()[0].min() == 0

    def test_from_filename_maps_the_same_file(self, tmp_path):
        t = MemoryMappedTensor.from_tensor(_source(), filename=tmp_path / "x.memmap")
        again = MemoryMappedTensor.from_filename(tmp_path / "x.memmap", torch.float32, SHAPES)
        _assert_same(again, t)
        again[2].fill_(7.0)  # shared: the write reaches the other mapping
        assert bool((t[2] == 7.0).all())
        with pytest.raises(ValueError, match="nested"):
            MemoryMappedTensor.from_filename(tmp_path / "x.memmap", torch.float32, SHAPES[:2])

    @pytest.mark.parametrize("in_file", [False, True])
    def test_from_storage_views_without_a_copy(self, tmp_path, in_file):
        filename = str(tmp_path / "x.memmap") if in_file else None
        flat = MemoryMappedTensor.from_tensor(
            torch.arange(10, dtype=torch.float64), filename=filename
        )
        t = MemoryMappedTensor.from_storage(
            flat.untyped_storage(),
            filename=filename,
            shape=torch.tensor([[2, 2], [2, 3]]),
            dtype=flat.dtype,
        )
        assert type(t) is MemoryMappedTensor
        assert torch.equal(t[0], torch.arange(4.0, dtype=torch.float64).view(2, 2))
        assert torch.equal(t[1], torch.arange(4.0, 10.0, dtype=torch.float64).view(2, 3))
        t[1].zero_()
        assert flat[4:].sum() == 0


class TestPickleAndRepr:
    @pytest.mark.parametrize("in_file", [False, True])
    def test_pickle_round_trip(self, tmp_path, in_file):
        t = MemoryMappedTensor.from_tensor(
            _source(), filename=tmp_path / "x.memmap" if in_file else None
        )
        back = pickle.loads(pickle.dumps(t))
        assert type(back) is MemoryMappedTensor
        _assert_same(back, t)
        if in_file:  # the file is shared, not the bytes
            back[1].fill_(5.0)
            assert bool((t[1] == 5.0).all())

    def test_repr(self):
        text = repr(MemoryMappedTensor.from_tensor(_source()))
        assert text.startswith("MemoryMappedTensor(nested_tensor(")


# ------------------------------------------------ nested tensors as leaves of a saved TensorDict
@pytest.mark.parametrize("where", ["folder", "archive"])
def test_a_nested_leaf_saves_and_loads_as_a_nested_memmap(tmp_path, where):
    from td_core import TensorDict  # the container is td-core's; the save is this package's

    source = _source()
    td = TensorDict({"nt": source, "x": torch.arange(3.0)}, batch_size=[])
    path = tmp_path / ("s.tdz" if where == "archive" else "s")
    td.memmap(path)
    for mode in (None, "r+"):
        back = TensorDict.load_memmap(path, mode=mode)
        nt = back["nt"]
        assert isinstance(nt, MemoryMappedTensor) and nt.is_nested
        assert (nt._nested_tensor_size() == SHAPES).all()
        for got, want in zip(nt.unbind(), source.unbind()):
            assert (got == want).all()
    back["nt"].unbind()[2].add_(1)  # mode="r+": the write reaches the file
    again = TensorDict.load_memmap(path)["nt"].unbind()
    assert (again[2] == source.unbind()[2] + 1).all() and (again[0] == source.unbind()[0]).all()


def test_memmap_like_of_a_nested_leaf_keeps_its_components_shapes(tmp_path):
    from td_core import TensorDict

    like = TensorDict({"nt": _source()}, batch_size=[]).memmap_like(tmp_path / "s")
    assert (like["nt"]._nested_tensor_size() == SHAPES).all()
    assert all((part == 0).all() for part in like["nt"].unbind())


def test_a_nested_entry_whose_components_do_not_match_its_file_is_refused(tmp_path):
    import json

    from td_core import TensorDict
    from td_memmap import MemmapFormatError

    TensorDict({"nt": _source()}, batch_size=[]).memmap(tmp_path / "s")
    meta_path = tmp_path / "s" / "meta.json"
    meta = json.loads(meta_path.read_text())
    (entry,) = [e for e in meta["entries"] if e["key"] == "nt"]
    entry["nested"] = [[2, 3], [2, 4], [3, 3]]  # one element more than the file holds
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(MemmapFormatError, match="nested"):
        TensorDict.load_memmap(tmp_path / "s")


def test_a_nested_leaf_under_batch_dims_round_trips(tmp_path):
    from td_core import TensorDict

    nt = torch.nested.nested_tensor([torch.arange(12.0).view(3, 4), torch.arange(15.0).view(3, 5)])
    td = TensorDict({"a": nt}, batch_size=[2, 3])
    td.memmap(tmp_path / "s")
    back = TensorDict.load_memmap(tmp_path / "s")
    assert back.batch_size == (2, 3)
    for i in range(2):
        for j in range(3):
            assert (back[i, j]["a"] == td[i, j]["a"]).all()
