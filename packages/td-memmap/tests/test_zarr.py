"""to_zarr / from_zarr: round trips through zarr stores (zarr>=3.1)."""

from __future__ import annotations

import pickle

import pytest
import torch

import td_core
import td_memmap
from td_core import LazyStackedTensorDict, NonTensorData, TensorDict

# zarr>=3.1 needs Python>=3.11: the dev group installs it there only
zarr = pytest.importorskip("zarr", minversion="3.1")


def _td() -> TensorDict:
    td = TensorDict(
        {
            "a": torch.arange(12.0).view(4, 3),
            "b": {"c": torch.arange(8).view(4, 2), "d": torch.ones(4, dtype=torch.bfloat16)},
            "flag": torch.tensor([True, False, True, False]),
            "note": "hello",
        },
        batch_size=[4],
    )
    td.names = ["time"]
    return td


def test_nested_round_trip_keeps_values_batch_sizes_and_names(tmp_path):
    td = _td()
    out = td.to_zarr(tmp_path / "s.zarr")
    back = TensorDict.from_zarr(tmp_path / "s.zarr")
    for result in (out, back):
        assert result.batch_size == torch.Size([4])
        assert result["b"].batch_size == torch.Size([4])
        assert result.names == ["time"]
        assert (result == td).all()
        assert result["b", "d"].dtype == torch.bfloat16
        assert result["flag"].dtype == torch.bool
        assert isinstance(result.get("note"), NonTensorData)
        assert result["note"] == "hello"


def test_layout_is_groups_arrays_and_json_attributes(tmp_path):
    _td().to_zarr(tmp_path / "s.zarr")
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert isinstance(root["b"], zarr.Group)
    assert isinstance(root["a"], zarr.Array)
    assert root["a"].shape == (4, 3)
    meta = root.attrs["__tensordict__"]
    assert meta["batch_size"] == [4]
    assert root["note"].attrs["__tensordict_non_tensor__"] == {"encoding": "json"}
    assert root["note"][...].tobytes() == b'"hello"'
    assert root["b"].attrs["__tensordict__"]["batch_size"] == [4]


def test_lazy_stack_round_trip_keeps_heterogeneous_shapes(tmp_path):
    stack = LazyStackedTensorDict(
        TensorDict(a=torch.zeros(2), s="x"),
        TensorDict(a=torch.ones(3), s="y"),
        stack_dim=0,
    )
    out = stack.to_zarr(tmp_path / "l.zarr")
    assert isinstance(out, LazyStackedTensorDict)
    assert out.batch_size == torch.Size([2])
    assert out.tensordicts[0]["a"].shape == (2,)
    assert torch.equal(out.tensordicts[1]["a"], torch.ones(3))
    assert [t["s"] for t in out.tensordicts] == ["x", "y"]


def test_module_function_and_batch_size_options(tmp_path):
    _td().to_zarr(tmp_path / "s.zarr")
    assert td_core.from_zarr(tmp_path / "s.zarr").batch_size == torch.Size([4])
    assert td_core.from_zarr(tmp_path / "s.zarr", batch_size=[]).batch_size == torch.Size([])
    with pytest.raises(TypeError, match="batch_size"):
        td_core.from_zarr(tmp_path / "s.zarr", batch_size=[4], auto_batch_size=True)


def test_store_written_by_zarr_itself_gets_the_shared_leading_dims(tmp_path):
    root = zarr.open_group(str(tmp_path / "x.zarr"), mode="w")
    root.create_array("obs", data=torch.arange(6.0).view(3, 2).numpy())
    root.create_group("sub").create_array("r", data=torch.zeros(3, 2, 4).numpy())
    td = TensorDict.from_zarr(tmp_path / "x.zarr")
    assert td.batch_size == torch.Size([3, 2])
    assert td["sub"].batch_size == torch.Size([3, 2, 4])
    assert TensorDict.from_zarr(
        tmp_path / "x.zarr", auto_batch_size=True, batch_dims=1
    ).batch_size == (3,)
    assert torch.equal(td["obs"], torch.arange(6.0).view(3, 2))


def test_store_object_and_chunks(tmp_path):
    store = zarr.storage.LocalStore(str(tmp_path / "c.zarr"))
    td = TensorDict(a=torch.arange(40.0).view(20, 2), batch_size=[20])
    out = td_memmap.to_zarr(td, store, chunks=(8,))
    assert torch.equal(out["a"], td["a"])
    assert zarr.open_group(str(tmp_path / "c.zarr"), mode="r")["a"].chunks == (8, 2)


def test_unstorable_non_tensor_refused_before_writing(tmp_path):
    td = TensorDict(a=torch.zeros(2), obj=object(), batch_size=[2])
    with pytest.raises(TypeError, match=r"'obj'.*JSON"):
        td.to_zarr(tmp_path / "bad.zarr")
    assert not (tmp_path / "bad.zarr").exists()


@pytest.mark.parametrize("value", [(1, 2), float("nan"), {1: "a"}, b"raw"])
def test_value_json_does_not_give_back_exactly_is_refused(tmp_path, value):
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    td.set_non_tensor("v", value)
    with pytest.raises(TypeError, match=r"'v'.*JSON"):
        td.to_zarr(tmp_path / "bad.zarr")
    assert not (tmp_path / "bad.zarr").exists()


def test_bad_key_refused(tmp_path):
    td = TensorDict({"__x": torch.zeros(2)}, batch_size=[2])
    with pytest.raises(ValueError, match="'__x'"):
        td.to_zarr(tmp_path / "bad.zarr")


def test_pickled_non_tensor_is_refused(tmp_path):
    TensorDict(a=torch.zeros(2), batch_size=[2]).to_zarr(tmp_path / "p.zarr")
    root = zarr.open_group(str(tmp_path / "p.zarr"), mode="r+")
    node = root.create_array("obj", shape=(3,), dtype="uint8")
    node.attrs["__tensordict_non_tensor__"] = {"encoding": "pickle"}
    with pytest.raises(td_memmap.MemmapFormatError, match=r"'obj'.*pickle"):
        TensorDict.from_zarr(tmp_path / "p.zarr")


# ------------------------------------------------------------------ lazy, file-backed
class _CountingStore(zarr.storage.WrapperStore):
    """A store that records every key read through it."""

    def __init__(self, store):
        super().__init__(store)
        self.reads: list[str] = []

    async def get(self, key, prototype, byte_range=None):
        self.reads.append(key)
        return await self._store.get(key, prototype, byte_range)


def _chunk_reads(store) -> list[str]:
    """The chunk keys read (zarr v3 names them `<array>/c/<i>/<j>`), not metadata."""
    return sorted(
        key for key in store.reads if "/c/" in key and not key.endswith(("zarr.json", ".zattrs"))
    )


@pytest.fixture
def rows(tmp_path):
    td = TensorDict(
        {"a": torch.arange(20.0).view(10, 2), "b": {"c": torch.arange(10)}}, batch_size=[10]
    )
    td.to_zarr(tmp_path / "r.zarr", chunks=(2,))
    return tmp_path / "r.zarr", td


def test_from_zarr_is_file_backed_and_reads_nothing_on_open(rows):
    path, _ = rows
    store = _CountingStore(zarr.storage.LocalStore(str(path), read_only=True))
    out = td_memmap.from_zarr(store)
    assert isinstance(out, td_memmap.PersistentTensorDict)
    assert out.batch_size == torch.Size([10])
    assert _chunk_reads(store) == []  # only metadata so far


def test_index_reads_only_the_chunks_holding_the_rows(rows):
    path, td = rows
    store = _CountingStore(zarr.storage.LocalStore(str(path), read_only=True))
    out = td_memmap.from_zarr(store)
    part = out[2:4]
    assert _chunk_reads(store) == ["a/c/1/0", "b/c/c/1"]  # rows 2-3 are chunk 1 of each
    assert (part == td[2:4]).all()
    store.reads.clear()
    assert torch.equal(out.get_at("a", slice(4, 6)), td["a"][4:6])
    assert _chunk_reads(store) == ["a/c/2/0"]
    store.reads.clear()
    assert torch.equal(out.get_at(("b", "c"), [7, 1]), torch.tensor([7, 1]))
    assert _chunk_reads(store) == ["b/c/c/0", "b/c/c/3"]


def test_writes_go_to_the_store_and_read_only_refuses(rows):
    path, td = rows
    with pytest.raises(td_memmap.ReadOnlyMemmapError, match="zarr store"):
        td_memmap.from_zarr(path).zero_()
    out = td_memmap.from_zarr(path, mode="r+")
    out[2:4] = TensorDict({"a": torch.zeros(2, 2), "b": {"c": torch.zeros(2)}}, [2])
    out["new"] = torch.ones(10)
    out.apply_(lambda t: t + 1)
    raw = zarr.open_group(str(path), mode="r")
    expected = td["a"] + 1
    expected[2:4] = 1
    assert torch.equal(torch.from_numpy(raw["a"][...]), expected)
    assert torch.equal(torch.from_numpy(raw["new"][...]), torch.full((10,), 2.0))
    # the consolidated metadata other readers use lists the new key
    consolidated = zarr.open_group(str(path), mode="r", use_consolidated=True)
    assert "new" in consolidated.metadata.consolidated_metadata.metadata


def test_stored_lazy_stack_opens_as_a_stack_of_file_backed_members(tmp_path):
    stack = LazyStackedTensorDict(
        TensorDict(a=torch.zeros(2)), TensorDict(a=torch.ones(3)), stack_dim=0
    )
    stack.to_zarr(tmp_path / "l.zarr")
    out = TensorDict.from_zarr(tmp_path / "l.zarr", mode="r+")
    assert isinstance(out, LazyStackedTensorDict)
    assert all(isinstance(m, td_memmap.PersistentTensorDict) for m in out.tensordicts)
    out.tensordicts[1]["a"] = torch.full((3,), 5.0)
    back = TensorDict.from_zarr(tmp_path / "l.zarr")
    assert torch.equal(back.tensordicts[1]["a"], torch.full((3,), 5.0))
    assert torch.equal(back.tensordicts[0]["a"], torch.zeros(2))


def test_persistent_tensordict_backend_argument(rows, tmp_path):
    path, td = rows
    root = zarr.open_group(str(path), mode="r")
    sub = td_memmap.PersistentTensorDict(group=root["b"], backend="zarr")
    assert sub.batch_size == torch.Size([10])
    assert torch.equal(sub["c"], td["b", "c"])
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        td_memmap.PersistentTensorDict(filename=path, backend="nope")
    with pytest.raises(FileNotFoundError, match="no such zarr store"):
        td_memmap.PersistentTensorDict(filename=tmp_path / "missing.zarr", backend="zarr")
    made = td_memmap.PersistentTensorDict.from_dict(
        {"x": torch.zeros(3, 2)}, tmp_path / "d.zarr", backend="zarr"
    )
    assert made.batch_size == torch.Size([3, 2])
    assert zarr.open_group(str(tmp_path / "d.zarr"), mode="r")["x"].shape == (3, 2)


def test_pickle_reopens_the_store_not_its_data(rows):
    path, td = rows
    out = td_memmap.from_zarr(path)
    blob = pickle.dumps(out)
    assert len(blob) < 2000
    back = pickle.loads(blob)
    assert isinstance(back, td_memmap.PersistentTensorDict)
    assert (back == td).all()


def test_string_array_from_another_tool_is_refused(tmp_path):
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    root.create_array("a", data=torch.zeros(3).numpy())
    root.create_array("names", shape=(3,), dtype=str)
    with pytest.raises(td_memmap.MemmapFormatError, match="'names'"):
        td_memmap.from_zarr(tmp_path / "s.zarr")


def test_a_refused_array_deep_in_the_tree_fails_the_open(tmp_path):
    # the open lists the whole tree in one go: a bad array three groups down is still seen
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("a", data=torch.zeros(3).numpy())
    deep = root.create_group("x").create_group("y").create_group("z")
    deep.create_array("ok", data=torch.zeros(3, 2).numpy())
    deep.create_array("names", shape=(3,), dtype=str)
    with pytest.raises(td_memmap.MemmapFormatError, match="'x/y/z/names'"):
        td_memmap.from_zarr(tmp_path / "d.zarr")


def test_from_schema_zarr_writes_zero_arrays_without_data_chunks(tmp_path):
    out = TensorDict.from_schema(
        {"obs": ([4], torch.float32), ("n", "r"): ([], torch.int64)},
        batch_size=[8],
        storage="zarr",
        filename=tmp_path / "s.zarr",
        chunks=(2,),
    )
    assert isinstance(out, td_memmap.PersistentTensorDict)
    assert not list((tmp_path / "s.zarr" / "obs").glob("c/*"))  # zeros are zarr's fill value
    out[3] = TensorDict({"obs": torch.ones(4), "n": {"r": torch.tensor(7)}}, [])
    back = TensorDict.from_zarr(tmp_path / "s.zarr")
    assert back["obs"].sum() == 4 and back["obs"][3].eq(1).all()
    assert back["n", "r"].tolist() == [0, 0, 0, 7, 0, 0, 0, 0]


def test_rename_key_onto_an_existing_key_replaces_it_in_the_store(tmp_path):
    td = TensorDict({"a": torch.arange(3.0), "b": {"c": torch.zeros(3, 2)}}, [3])
    ztd = td.to_zarr(tmp_path / "s.zarr")
    ztd.rename_key_("a", "a")  # renaming to itself changes nothing (upstream raises here)
    assert torch.equal(ztd["a"], td["a"])
    ztd.rename_key_("a", ("b", "c"))  # an existing target is replaced, as on a dense TensorDict
    assert set(ztd.keys(True, True)) == {("b", "c")}
    reopened = td_memmap.from_zarr(tmp_path / "s.zarr")
    assert torch.equal(reopened["b", "c"], td["a"])


@pytest.mark.parametrize(
    "rows",
    [
        [[f"n{i}{j}" for j in range(3)] for i in range(4)],  # strings: a zarr string array
        [[{"step": i, "ok": j > 0} for j in range(3)] for i in range(4)],  # JSON values
    ],
    ids=["strings", "json"],
)
def test_a_stack_of_different_values_round_trips(tmp_path, rows):
    td = TensorDict(obs=torch.zeros(4, 3), batch_size=[4, 3])
    td["names"] = td_core.NonTensorStack.from_list(rows)
    stored = td.to_zarr(tmp_path / "s.zarr")
    node = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["names"]
    assert node.attrs["__tensordict_stack__"] == [4, 3]  # upstream's layout: files move both ways
    assert ("__tensordict_non_tensor__" in node.attrs) is (rows[0][0] != "n00")
    for out in (stored, td_memmap.from_zarr(tmp_path / "s.zarr")):
        assert type(out.get("names")) is td_core.NonTensorStack
        assert out.get("names").tolist() == rows
        assert out[1].get("names").tolist() == rows[1]  # an index read takes its rows
        assert out.to_tensordict()["names"].tolist() == rows
    stored["names"] = td_core.NonTensorStack.from_list(rows[::-1])  # replaced in the store
    assert td_memmap.from_zarr(tmp_path / "s.zarr").get("names").tolist() == rows[::-1]


def test_a_stack_json_cannot_hold_is_refused_before_writing(tmp_path):
    td = TensorDict(obs=torch.zeros(2), batch_size=[2])
    td["pairs"] = td_core.NonTensorStack.from_list([(1, 2), (3, 4)])  # tuples read back as lists
    with pytest.raises(TypeError, match=r"'pairs'.*(strings|JSON)"):
        td.to_zarr(tmp_path / "bad.zarr")
    assert not (tmp_path / "bad.zarr").exists()


# ------------------------------------------------------------------ whole reads
def _deep(tmp_path, stack: bool = True):
    td = _td()
    td["b", "e", "f"] = torch.arange(4.0) * 3
    if stack:  # heterogeneous members: a whole read gives a lazy stack back
        td["b", "s"] = LazyStackedTensorDict(
            *[TensorDict(x=torch.full((i + 1,), float(i))) for i in range(4)], stack_dim=0
        )
    td["z"] = torch.zeros(4, 5)
    td.to_zarr(tmp_path / "deep.zarr")
    return TensorDict.from_zarr(tmp_path / "deep.zarr"), td


def _same(x, y) -> None:
    assert type(x) is type(y) and x.batch_size == y.batch_size and x.names == y.names
    if isinstance(x, LazyStackedTensorDict):
        assert x.stack_dim == y.stack_dim and len(x.tensordicts) == len(y.tensordicts)
        for a, b in zip(x.tensordicts, y.tensordicts):
            _same(a, b)
        return
    assert list(x.keys()) == list(y.keys())  # the same keys, in the same order
    for key in x.keys():
        a, b = x.get(key), y.get(key)
        assert type(a) is type(b)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b) and a.dtype == b.dtype
        elif isinstance(a, NonTensorData):
            assert a.data == b.data
        else:
            _same(a, b)


@pytest.mark.parametrize("index", [(), slice(1, 3), 2])
def test_a_whole_read_is_the_read_group_by_group(tmp_path, index):
    from td_memmap._persist_backend import Snapshot

    stored, _ = _deep(tmp_path)
    piecewise = stored._dense(index, Snapshot(stored._backend))  # the backend at each step
    _same(stored._dense(index), piecewise)
    if index == ():
        _same(stored.to_tensordict(), piecewise)


def test_a_whole_read_lists_the_tree_once(tmp_path, monkeypatch):
    stored, td = _deep(tmp_path, stack=False)
    calls = []
    real = zarr.Group.members

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("max_depth", 0))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(zarr.Group, "members", counted)
    out = stored.to_tensordict()
    assert calls == [None]  # one listing of the whole tree, not one per group
    assert (out == td).all()


def test_a_nested_ragged_lazy_stack_round_trips(tmp_path):
    stored, td = _deep(tmp_path)
    out = stored.to_tensordict()
    assert [m["x"].tolist() for m in out["b", "s"].tensordicts] == [
        [float(i)] * (i + 1) for i in range(4)
    ]
    assert (out.exclude(("b", "s")) == td.exclude(("b", "s"))).all()


def test_a_whole_read_sees_the_store_as_it_is_then(tmp_path):
    stored, _ = _deep(tmp_path)
    root = zarr.open_group(str(tmp_path / "deep.zarr"), mode="r+")
    root["b"]["e"]["f"][...] = -1.0  # another writer, after the open
    assert stored.to_tensordict()["b", "e", "f"].tolist() == [-1.0] * 4


def test_a_failed_array_read_fails_the_whole_read(tmp_path, monkeypatch):
    stored, _ = _deep(tmp_path)
    backend = stored._backend
    real = backend.read

    def failing(node, index=(), device=None):
        if node.path == "b/e/f":
            raise OSError("chunk b/e/f/c/0 unreadable")
        return real(node, index, device)

    monkeypatch.setattr(backend, "read", failing)
    with pytest.raises(OSError, match="b/e/f"):
        stored.to_tensordict()


def _paths(nodes):
    return [(n.path, getattr(n, "shape", None), dict(n.attrs)) for n in nodes]


def test_the_local_listing_matches_zarrs_own_and_sees_changes_past_consolidation(tmp_path):
    from td_memmap import _zarr_listing

    path = tmp_path / "s.zarr"
    _td().to_zarr(path)  # written with consolidated metadata
    writer = zarr.open_group(str(path), mode="r+", use_consolidated=False)
    writer.create_array("late", shape=(4, 2), dtype="float32")  # not consolidated
    writer["a"].resize((5, 3))
    del writer["b/d"]
    group = zarr.open_group(str(path), mode="r", use_consolidated=False)
    assert _zarr_listing._local_members(group) is not None  # the folder's own files
    zarrs = sorted(group.members(max_depth=None), key=lambda item: item[0])
    listed = _zarr_listing.tree(group)
    assert _paths(listed) == _paths(node for _, node in zarrs)
    assert {"late", "b/c"} <= {n.path for n in listed} and "b/d" not in {n.path for n in listed}
    assert next(n for n in listed if n.path == "a").shape == (5, 3)
    arrays = {n.path: n for n in listed}
    assert torch.equal(torch.from_numpy(arrays["b/c"][...]), _td()["b", "c"])


def test_other_stores_take_zarrs_listing(tmp_path):
    from td_memmap import _zarr_listing

    group = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    group.create_group("g").create_array("x", shape=(2,), dtype="int64")
    assert _zarr_listing._local_members(group) is None
    assert [n.path for n in _zarr_listing.tree(group)] == ["g", "g/x"]
