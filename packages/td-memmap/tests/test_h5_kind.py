"""PersistentTensorDict as a full TensorDict kind: ops from the base, writes into the file."""

from __future__ import annotations

import enum
import pickle

import pytest
import torch

h5py = pytest.importorskip("h5py")

from td_core import (  # noqa: E402
    NonTensorData,
    TensorDict,
    TensorDictBase,
    set_get_defaults_to_none,
    tensorclass,
)
from td_core.errors import LockedError  # noqa: E402
from td_memmap import (  # noqa: E402
    NotSupportedOnFileError,
    PersistentTensorDict,
    ReadOnlyMemmapError,
    UnstorableValueError,
)


def _dense() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(12.0).reshape(4, 3),
            "n": {"b": torch.arange(8).reshape(4, 2), "bf": torch.ones(4).to(torch.bfloat16)},
        },
        batch_size=[4],
    )


@pytest.fixture
def path(tmp_path):
    return tmp_path / "data.h5"


@pytest.fixture
def ptd(path):
    out = PersistentTensorDict.from_dict(_dense(), path)
    yield out
    out.close()


def _on_disk(path) -> TensorDict:
    """What the file holds, read with h5py alone (no td object involved)."""
    with h5py.File(path, "r") as f:
        return TensorDict(
            {
                "a": torch.from_numpy(f["a"][()]),
                "n": {
                    "b": torch.from_numpy(f["n/b"][()]),
                    "bf": torch.from_numpy(f["n/bf"][()]).view(torch.bfloat16),
                },
            },
            [4],
        )


def _assert_equal(got, want) -> None:
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        assert torch.equal(got[key], want[key]), key


def test_from_dict_is_a_tensordict_kind(ptd):
    assert isinstance(ptd, TensorDictBase)
    assert ptd.batch_size == (4,) and ptd["n"].batch_size == (4,)
    assert isinstance(ptd["n"], PersistentTensorDict)
    out = ptd + 1  # every op comes from the base and gives an in-memory TensorDict
    assert type(out) is TensorDict
    _assert_equal(out, _dense() + 1)
    _assert_equal(ptd.apply(lambda t: t * 2), _dense().apply(lambda t: t * 2))
    _assert_equal(ptd.masked_select(torch.tensor([True, False, True, True])), _dense()[[0, 2, 3]])
    assert (ptd == _dense()).all()
    _assert_equal(ptd.to_tensordict(), _dense())


def test_from_dict_of_a_mapping_infers_the_batch_size(path):
    with PersistentTensorDict.from_dict(
        {"x": torch.zeros(3, 2), "y": {"z": torch.ones(3)}}, path
    ) as p:
        assert p.batch_size == (3,)
    with PersistentTensorDict.from_h5(path) as p:  # stored on the file
        assert p.batch_size == (3,) and p["y"].batch_size == (3,)


@pytest.mark.parametrize(
    "index",
    [
        1,
        -1,
        slice(1, 3),
        slice(0, 4, 2),
        [0, 3],
        [3, 0],
        [1, 1],
        torch.tensor([True, False, True, False]),
        (slice(None),),
        (Ellipsis, 2),
    ],
)
def test_setitem_by_index_writes_into_the_file(ptd, path, index):
    want = _dense()
    rows = want[index]
    value = rows.apply(lambda t: torch.full_like(t, 7))
    want[index] = value
    ptd[index] = value
    ptd.close()
    _assert_equal(_on_disk(path), want)


def test_setitem_by_index_of_scalars_and_partial_mappings(ptd, path):
    want = _dense()
    for index, value in ((2, 0.0), ([0, 1], {"a": torch.ones(2, 3)}), (slice(3, None), -1)):
        want[index] = value
        ptd[index] = value
    ptd.close()
    _assert_equal(_on_disk(path), want)


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.zero_(),
        lambda td: td.add_(1),
        lambda td: td.apply_(lambda t: t * 3),
        lambda td: td.apply(lambda t: t - 1, inplace=True),
        # upstream's private `_fast_apply`, kept as a compatibility shim that code still calls
        lambda td: td._fast_apply(lambda t: t + 1, inplace=True, num_threads=2),
        lambda td: td._fast_apply(lambda k, t: t + 1, named=True, nested_keys=True, inplace=True),
        lambda td: td._fast_apply(lambda t: t + 5, inplace=True),
        lambda td: td.__iadd__(2),
        lambda td: td.update_({"a": torch.ones(4, 3)}),
        lambda td: td.set_(("n", "b"), torch.zeros(4, 2, dtype=torch.long)),
        lambda td: td.set("a", torch.ones(4, 3), inplace=True),
        lambda td: td.masked_fill_(torch.tensor([True, False, False, True]), -1),
        lambda td: td.copy_(td.to_tensordict() * 0),
        lambda td: td.update_at_({"a": torch.ones(3)}, 2),
    ],
)
def test_inplace_ops_write_into_the_file(ptd, path, op):
    want = _dense()
    op(want)
    result = op(ptd)
    if isinstance(result, TensorDictBase):
        assert result is ptd
    ptd.close()
    _assert_equal(_on_disk(path), want)


@tensorclass
class _Fields:
    a: torch.Tensor
    n: TensorDict


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.add_(1),
        lambda td: td.mul_(2),
        lambda td: td.__iadd__(2),
        lambda td: td.masked_fill_(torch.tensor([True, False, False, True]), -1),
        lambda td: td.zero_(),
    ],
)
def test_inplace_ops_through_a_tensorclass_write_nested_groups_into_the_file(ptd, path, op):
    # pointwise ops reached the nested group "n" past its staged methods, wrote into the
    # tensors read from it, and the file kept the old values
    want = _dense()
    op(want)
    op(_Fields.from_tensordict(ptd))
    ptd.close()
    _assert_equal(_on_disk(path), want)


def test_a_failed_inplace_op_changes_nothing(ptd, path):
    calls = []

    def fn(t):
        calls.append(t)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return t + 100

    with pytest.raises(RuntimeError, match="boom"):
        ptd.apply_(fn)
    with pytest.raises(ValueError):
        ptd[0:2] = TensorDict({"a": torch.ones(2, 5)}, [2])
    ptd.close()
    _assert_equal(_on_disk(path), _dense())


def test_set_writes_new_datasets_and_groups(ptd, path):
    ptd.set("c", torch.ones(4, 5))
    ptd["d", "e"] = torch.zeros(4)
    ptd.set("g", TensorDict({"h": torch.ones(4, 2)}, [4]))
    del ptd["a"]
    assert set(ptd.keys()) == {"c", "d", "g", "n"}
    ptd.close()
    with h5py.File(path, "r") as f:
        assert f["c"].shape == (4, 5) and f["d/e"].shape == (4,) and f["g/h"].shape == (4, 2)
        assert "a" not in f


def test_read_only_file_refuses_every_write(path):
    PersistentTensorDict.from_dict(_dense(), path).close()
    with PersistentTensorDict.from_h5(path) as ptd:
        for write in (
            lambda: ptd.zero_(),
            lambda: ptd.set_("a", torch.ones(4, 3)),
            lambda: ptd.set("x", torch.ones(4)),
            lambda: ptd.__setitem__(0, 0.0),
            lambda: ptd.del_("a"),
        ):
            with pytest.raises(ReadOnlyMemmapError, match="read-only"):
                write()
    _assert_equal(_on_disk(path), _dense())


def test_values_a_file_cannot_hold_are_refused_by_key(ptd, path):
    with pytest.raises(TypeError, match="'o'"):
        ptd.set("o", object())
    with pytest.raises(TypeError, match=r"\('g', 'w'\)"):
        ptd.set("g", TensorDict({"x": torch.ones(4), "w": {1, 2}}, [4]))
    with pytest.raises(RuntimeError, match="set_non_tensor is not compatible"):
        ptd.set_non_tensor("s", "text")
    with pytest.raises(UnstorableValueError, match="requires_grad=True"):
        ptd.set("a", torch.zeros(4, 3, requires_grad=True))
    assert set(ptd.keys()) == {"a", "n"}
    ptd.close()
    _assert_equal(_on_disk(path), _dense())


def test_non_tensor_values_are_stored_as_json(ptd, path):
    ptd.set("s", "text")
    ptd["n", "cfg"] = NonTensorData({"lr": 0.1, "layers": [1, 2]}, batch_size=[4])
    # strings come back as bytes, as upstream; other values JSON-decoded
    assert ptd["s"] == b"text" and ptd["n", "cfg"] == {"lr": 0.1, "layers": [1, 2]}
    assert ptd.get("s").batch_size == (4,) and ptd[1:3]["s"] == b"text"
    ptd[0] = TensorDict({"a": torch.zeros(3), "s": b"text"}, [])  # same value: written
    with pytest.raises(TypeError, match="'s'"):
        ptd[0] = TensorDict({"s": "other"}, [])  # one row of a value: a stack, refused
    ptd.set_("s", "new")
    out = ptd.to_tensordict()
    assert out["s"] == b"new" and torch.equal(out["a"][0], torch.zeros(3))
    assert ptd.batch_size == (4,)  # string datasets are not batched
    ptd.close()
    with h5py.File(path, "r") as f:  # string datasets (JSON for non-strings), never a pickle
        assert f["n/cfg"].attrs["td_json"] == 1 and "td_json" not in f["s"].attrs
        assert h5py.check_string_dtype(f["s"].dtype) is not None
    with PersistentTensorDict.from_h5(path) as back:
        assert back["s"] == b"new" and back["n", "cfg"]["layers"] == [1, 2]


class _Level(enum.IntEnum):
    LOW = 1


@pytest.mark.parametrize("value", [(1, 2), float("nan"), {1: "a"}, _Level.LOW])
def test_value_json_does_not_give_back_as_it_was_is_refused(ptd, path, value):
    # an IntEnum member equals its int, but would come back as a plain int: refused too
    with pytest.raises(UnstorableValueError, match="'v'"):
        ptd["v"] = NonTensorData(value, batch_size=[4])
    assert "v" not in ptd.keys()


def test_foreign_string_datasets_are_read_as_upstream_reads_them(tmp_path):
    path = tmp_path / "foreign.h5"
    with h5py.File(path, "w") as f:
        f["x"] = torch.zeros(3, 2).numpy()
        f["name"] = "run-1"
        f.create_dataset("tags", data=["a", "b"], dtype=h5py.string_dtype())
    with PersistentTensorDict.from_h5(path) as ptd:
        assert ptd.batch_size == (3, 2)
        assert ptd["name"] == b"run-1" and ptd["tags"].tolist() == [b"a", b"b"]
        assert set(ptd.keys()) == {"x", "name", "tags"}


def test_pickle_reopens_by_filename(ptd):
    ptd.lock_()
    copy = pickle.loads(pickle.dumps(ptd))
    assert isinstance(copy, PersistentTensorDict) and copy.filename == ptd.filename
    assert copy.is_locked and copy.batch_size == ptd.batch_size
    _assert_equal(copy.to_tensordict(), _dense())
    sub = pickle.loads(pickle.dumps(ptd["n"]))
    _assert_equal(sub.to_tensordict(), _dense()["n"])


def test_lock_and_lock_contexts(ptd):
    ptd.lock_()
    assert ptd["n"].is_locked
    with pytest.raises(LockedError):
        ptd.set("x", torch.zeros(4))
    with pytest.raises(LockedError):
        ptd.del_("a")
    ptd.set_("a", torch.zeros(4, 3))  # in-place writes stay allowed
    with ptd.unlock_():
        ptd.set("x", torch.zeros(4))
    assert ptd.is_locked and "x" in ptd.keys()  # restored, and the file is still open
    ptd.unlock_()


def test_with_block_closes_the_file(path):
    with PersistentTensorDict.from_dict(_dense(), path) as ptd:
        pass
    assert not ptd.file.id.valid


def test_views_refused_unless_nothing_moves(path):
    data = TensorDict({"x": torch.zeros(4, 3, 2)}, [4, 3])
    with PersistentTensorDict.from_dict(data, path) as ptd:
        for view in (
            lambda: ptd.permute(1, 0),
            lambda: ptd.transpose(0, 1),
            lambda: ptd.unsqueeze(0),
            lambda: ptd.view(-1),
            lambda: ptd.movedim(0, 1),
        ):
            with pytest.raises(NotSupportedOnFileError, match="PersistentTensorDict"):
                view()
        with pytest.raises(RuntimeError, match="Make it dense"):
            ptd.permute(1, 0)
        assert ptd.permute(0, 1) is ptd and ptd.squeeze() is ptd and ptd.view(4, 3) is ptd
        with pytest.raises(IndexError):
            ptd.squeeze(7)
        assert ptd.view(torch.uint8)["x"].dtype == torch.uint8
        assert ptd.reshape(-1).batch_size == (12,)


def test_select_and_exclude(ptd, path):
    picked = ptd.select("a")
    assert type(picked) is TensorDict and set(picked.keys()) == {"a"}
    assert set(ptd.exclude("a").keys()) == {"n"}
    with ptd.lock_(), pytest.raises(LockedError):
        ptd.select("a", inplace=True)
    assert ptd.select("a", ("n", "b"), inplace=True) is ptd
    assert ptd.exclude(("n", "b"), inplace=True) is ptd
    ptd.close()
    with h5py.File(path, "r") as f:
        assert set(f) == {"a", "n"} and set(f["n"]) == set()


def test_clone_and_to(ptd, tmp_path):
    assert type(ptd.clone()) is TensorDict  # no temporary file behind the user's back
    shallow = ptd.clone(recurse=False)
    assert type(shallow) is PersistentTensorDict and shallow.filename == ptd.filename
    copy = ptd.clone(newfile=tmp_path / "copy.h5")
    assert type(copy) is PersistentTensorDict and copy.filename.endswith("copy.h5")
    copy.zero_()
    _assert_equal(ptd.to_tensordict(), _dense())  # the copy is independent
    assert copy["n"].batch_size == (4,)
    copy.close()
    moved = ptd.to(torch.float64)
    assert type(moved) is TensorDict and moved["a"].dtype == torch.float64
    assert ptd.to(None) is ptd
    with pytest.raises(RuntimeError, match="non_blocking_pin"):
        ptd.to("cpu", non_blocking_pin=True)


def test_vmap_refused_clearly(ptd):
    with pytest.raises(RuntimeError, match="Persistent tensordicts cannot be used with vmap"):
        torch.vmap(lambda td: td)(ptd)


def test_from_any_of_an_h5py_file(ptd):
    out = TensorDict.from_any({"file": ptd.file})
    assert isinstance(out["file"], PersistentTensorDict)
    assert set(out.keys(True, True)) == {("file", "a"), ("file", "n", "b"), ("file", "n", "bf")}


def test_opening_never_writes_the_file(tmp_path, path):
    PersistentTensorDict.from_dict(_dense(), path).close()
    for _ in range(2):  # the stored batch size survives opening for writing
        with TensorDict.from_h5(path, mode="r+") as ptd:
            assert ptd.batch_size == (4,)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = torch.zeros(5, 2).numpy()
    with PersistentTensorDict.from_h5(foreign, mode="r+") as ptd:
        assert ptd.batch_size == (5, 2)  # inferred, as upstream
    with h5py.File(foreign, "r") as f:
        assert dict(f.attrs) == {}


def test_from_dict_batch_size_options(tmp_path, ptd):
    data = {"x": torch.zeros(3, 2, 5)}
    for kwargs, want in (
        ({}, (3, 2, 5)),
        ({"batch_size": [3]}, (3,)),
        ({"batch_size": [3], "auto_batch_size": True}, (3, 2, 5)),
    ):
        with PersistentTensorDict.from_dict(data, tmp_path / "m.h5", **kwargs) as out:
            assert out.batch_size == want
    source = TensorDict(data, [3])
    with PersistentTensorDict.from_dict(source, tmp_path / "t.h5", auto_batch_size=True) as out:
        assert out.batch_size == (3, 2, 5) and source.batch_size == (3,)
    with PersistentTensorDict.from_dict(ptd, tmp_path / "copy.h5", batch_size=[]) as out:
        assert out.batch_size == () and ptd.batch_size == (4,)  # the source file is untouched


def test_ops_with_out_write_into_the_file(ptd, path):
    mask = torch.tensor([True, False, True, False])
    source = _dense().apply(lambda t: t + 1)
    want = source.where(mask, _dense())
    assert source.where(mask, _dense(), out=ptd) is ptd
    ptd.close()
    _assert_equal(_on_disk(path), want)
    with PersistentTensorDict.from_h5(path, mode="r+") as again:
        parts = [source[i] for i in range(4)]
        assert torch.stack(parts, 0, out=again) is again
        assert torch.cat([source[:2], source[2:]], 0, out=again) is again
    _assert_equal(_on_disk(path), source)


def test_legacy_lazy_views_read_and_write_through_the_file(ptd):
    from td_core import set_lazy_legacy

    with set_lazy_legacy(True):
        view = ptd.unsqueeze(0)
        assert view.squeeze(0) is ptd
    view.set_("a", torch.zeros(1, 4, 3))
    view["new"] = torch.ones(1, 4)
    view.apply_(lambda t: t + 1)
    assert bool((ptd["a"] == 1).all()) and bool((ptd["new"] == 2).all())
    with pytest.raises(NotSupportedOnFileError):
        ptd.unsqueeze(0)  # outside legacy mode a view could not write through


def test_a_sub_view_of_a_file_writes_into_the_file(ptd):
    sub = ptd._get_sub_tensordict(1)
    sub["a"] = torch.full((3,), -1.0)  # a read of the file is a copy: the write must not land in it
    assert bool((ptd["a"][1] == -1).all()) and bool((ptd["a"][0] != -1).all())


def test_contiguous_copies_and_refuses_inplace(ptd):
    out = ptd.contiguous(canonical=True)
    assert type(out) is TensorDict and (out == _dense()).all()
    with pytest.raises(RuntimeError, match=r"contiguous\(inplace=True\).*in a file"):
        ptd.contiguous(inplace=True)
    assert isinstance(ptd, PersistentTensorDict) and (ptd.to_tensordict() == _dense()).all()


def test_get_and_get_at_of_a_missing_key_give_none(ptd):
    assert ptd.get("missing") is None and ptd.get(("n", "missing")) is None
    assert ptd.get_at("missing", 0) is None and ptd.get_at(("n", "missing"), 0) is None
    assert ptd.get_at("missing", 0, 5) == 5
    with pytest.raises(KeyError, match="'missing'"):
        ptd["missing"]
    with set_get_defaults_to_none(False), pytest.raises(KeyError, match="'missing'"):
        ptd.get_at("missing", 0)


def test_flatten_keys_as_a_context_writes_back_into_the_file(ptd, path):
    # the flat view is in memory; on exit what changed in it (new keys too) reaches the file
    with ptd.flatten_keys(",") as flat:
        assert type(flat) is TensorDict and "n,b" in flat.keys()
        flat["new,data"] = torch.full((4,), 2.0)
        flat["a"] += 1
        with flat.unflatten_keys(",") as nested:
            nested["x", "y"] = torch.zeros(4)
    assert (ptd["new", "data"] == 2).all() and (ptd["x", "y"] == 0).all()
    assert (ptd["a"] == _dense()["a"] + 1).all()
    ptd.close()
    assert (_on_disk(path)["a"] == _dense()["a"] + 1).all()
    with h5py.File(path, "r") as f:
        assert (f["new/data"][()] == 2).all() and (f["x/y"][()] == 0).all()


def test_flatten_keys_of_a_read_only_file_writes_nothing_when_nothing_changed(ptd, path):
    ptd.close()
    ro = PersistentTensorDict.from_h5(path, mode="r")
    with ro.flatten_keys(",") as flat:
        assert (flat["n,b"] == _dense()["n", "b"]).all()
    with pytest.raises(ReadOnlyMemmapError), ro.flatten_keys(",") as flat:
        flat["new"] = torch.zeros(4)  # a change cannot reach a read-only file: loud
    ro.close()
