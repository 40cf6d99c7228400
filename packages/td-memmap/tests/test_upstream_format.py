"""Folders saved by upstream tensordict's `memmap`: loaded by td, checked like td's own."""

import hashlib
import json
import os
import sys

import pytest
import torch

from td_core import TensorDict
from td_memmap import (
    LeafSizeError,
    MemmapFormatError,
    MissingLeafError,
    ReadOnlyMemmapError,
    UnsafePathError,
    load_memmap,
)


def _upstream():
    return pytest.importorskip(
        "tensordict", reason="upstream tensordict (a dev dependency) writes the folders"
    )


def _snapshot(folder):
    """Every file under `folder` with its bytes' hash and its mtime."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[path] = (hashlib.sha256(f.read()).hexdigest(), os.stat(path).st_mtime_ns)
    return out


def _write(folder, meta, files=()):
    """A folder in upstream's layout, by hand: `meta` as its meta.json, `files` as (name, bytes)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)
    for name, data in files:
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    return folder


_TD = "<class 'tensordict._td.TensorDict'>"
_NT = "<class 'tensordict.tensorclass.NonTensorData'>"


def _td_meta(shape, entries=None):
    """The meta.json of an upstream TensorDict folder of batch size `shape` holding `entries`."""
    return {**(entries or {}), "shape": shape, "device": "cpu", "_type": _TD}


def _leaf(shape, dtype="torch.float32"):
    return {"device": "cpu", "shape": shape, "dtype": dtype, "is_nested": False}


@pytest.fixture
def saved(tmp_path):
    """A folder saved by upstream: nested, several dtypes, JSON values, keys that need encoding."""
    up = _upstream()
    data = {
        "a": torch.arange(6.0).reshape(2, 3),
        "ints": torch.tensor([[1], [2]]),
        "weird key/.": torch.tensor([True, False]),
        # keys that name fields of td's own metadata
        "format": torch.tensor([3, 4], dtype=torch.int16),
        "index": {"version": torch.zeros(2, dtype=torch.uint8)},
        "n": {
            "b": torch.ones(2, dtype=torch.bfloat16),
            "s": "hello",
            "x": up.NonTensorData({"k": [1, 2.5, None], "$td": "tag"}, batch_size=[2]),
        },
    }
    source = up.TensorDict(data, batch_size=[2])
    source["stack"] = ["u", "v"]  # a NonTensorStack
    folder = str(tmp_path / "up")
    source.memmap(folder)
    return folder


def test_load_upstream_folder(saved):
    before = _snapshot(saved)
    td = load_memmap(saved)
    assert td.batch_size == torch.Size([2])
    assert torch.equal(td["a"], torch.arange(6.0).reshape(2, 3))
    assert td["ints"].dtype == torch.int64 and td["ints"].tolist() == [[1], [2]]
    assert td["weird key/."].tolist() == [True, False]
    assert td["format"].dtype == torch.int16 and td["format"].tolist() == [3, 4]
    assert td["index", "version"].dtype == torch.uint8 and td["index", "version"].tolist() == [0, 0]
    assert td["n", "b"].dtype == torch.bfloat16 and td["n", "b"].tolist() == [1.0, 1.0]
    assert td["n", "s"] == "hello"
    assert td["n", "x"] == {"k": [1, 2.5, None], "$td": "tag"}
    assert td["stack"] == ["u", "v"]
    # a sub-folder loads alone
    assert torch.equal(load_memmap(os.path.join(saved, "n"))["b"], td["n", "b"])
    assert _snapshot(saved) == before  # loading wrote nothing


def test_upstream_folder_is_read_only_by_default(saved):
    td = load_memmap(saved)
    assert td.is_locked
    with pytest.raises(ReadOnlyMemmapError):
        td["a"][0, 0] = 100.0
    assert td["a"][0, 0] == 0.0


def test_upstream_folder_mode_r_plus_writes_through(saved):
    up = _upstream()
    td = load_memmap(saved, mode="r+")
    td["a"][0, 0] = 100.0
    del td
    assert up.TensorDict.load_memmap(saved)["a"][0, 0] == 100.0


def test_upstream_format_version_0_and_longer_files(tmp_path):
    # the layout of upstream's 0.x releases before "_format_version": no version, no "_class";
    # its leaf files may run past the data (upstream maps their first bytes)
    top = str(tmp_path / "old")
    _write(top, _td_meta([2, 1], {"nested": {"type": "TensorDict"}}))
    nested = _write(
        os.path.join(top, "nested"),
        _td_meta(
            [2, 1], {"int64": _leaf([2, 1], "torch.int64"), "string": {"type": "NonTensorData"}}
        ),
        [("int64.memmap", torch.tensor([1, 2]).numpy().tobytes() + b"\x00")],
    )
    _write(
        os.path.join(nested, "string"),
        {"_type": _NT, "data": ["a string!"], "_metadata": None},
    )
    td = load_memmap(top)
    assert td.batch_size == torch.Size([2, 1])
    assert td["nested", "int64"].tolist() == [[1], [2]]
    assert td["nested", "string"] == ["a string!"]
    assert (load_memmap(nested) == td["nested"]).all()


def test_legacy_raw_key_file_name(tmp_path):
    # versions before key encoding named the file by the key itself
    folder = _write(
        str(tmp_path / "raw"),
        _td_meta([2], {"a b": _leaf([2])}),
        [("a b.memmap", torch.ones(2).numpy().tobytes())],
    )
    assert load_memmap(folder)["a b"].tolist() == [1.0, 1.0]


def test_td_format_is_not_taken_for_upstream(tmp_path):
    folder = str(tmp_path / "td")
    TensorDict({"a": torch.ones(2)}, batch_size=[2]).memmap(folder)
    td = load_memmap(folder)
    assert not td.is_locked  # td's own folders keep their read-write default


# ---------------------------------------------------------------------------------------------
# tampered or unsupported folders


def _one_leaf(tmp_path, entry, data=None, **meta):
    body = {**_td_meta([2], {"a": entry}), **meta}
    data = torch.zeros(2).numpy().tobytes() if data is None else data
    return _write(str(tmp_path / "f"), body, [("a.memmap", data)])


def test_truncated_leaf_is_refused(tmp_path):
    folder = _one_leaf(tmp_path, _leaf([2]), data=b"\x00" * 7)
    with pytest.raises(LeafSizeError, match=r"'a'.*7 bytes.*needs 8"):
        load_memmap(folder)


@pytest.mark.parametrize("dtype", ["float32", "torch.evil", "torch.Tensor", None])
def test_unknown_dtype_is_refused(tmp_path, dtype):
    folder = _one_leaf(tmp_path, _leaf([2], dtype))
    with pytest.raises(MemmapFormatError, match=r"entry 'a' has dtype"):
        load_memmap(folder)


def test_shape_not_matching_batch_is_refused(tmp_path):
    folder = _one_leaf(tmp_path, _leaf([3]), data=b"\x00" * 12)
    with pytest.raises(MemmapFormatError, match=r"'a' has shape \[3\].*batch_size \[2\]"):
        load_memmap(folder)


def test_nested_tensor_and_other_device_are_refused(tmp_path):
    folder = _one_leaf(tmp_path, {**_leaf([2]), "is_nested": True})
    with pytest.raises(MemmapFormatError, match=r"'a' is a nested"):
        load_memmap(folder)
    folder = _one_leaf(tmp_path, _leaf([2]), device="cuda:0")
    with pytest.raises(MemmapFormatError, match=r"device 'cuda:0'"):
        load_memmap(folder)


def test_classes_named_in_the_file_are_refused_not_imported(tmp_path):
    folder = _write(str(tmp_path / "tc"), {"_type": "<class 'td_memmap_never_imported_module.C'>"})
    with pytest.raises(MemmapFormatError, match=r"td_memmap_never_imported_module\.C"):
        load_memmap(folder)
    assert "td_memmap_never_imported_module" not in sys.modules


def test_upstream_tensorclass_and_lazy_stack_are_refused(tmp_path):
    up = _upstream()
    lazy = str(tmp_path / "lazy")
    up.lazy_stack([up.TensorDict(a=torch.ones(2)), up.TensorDict(a=torch.ones(3))]).memmap(lazy)
    with pytest.raises(MemmapFormatError, match="LazyStackedTensorDict"):
        load_memmap(lazy)


def test_pickled_value_is_refused(tmp_path):
    folder = _write(str(tmp_path / "p"), _td_meta([], {"v": {"type": "NonTensorData"}}))
    _write(os.path.join(folder, "v"), {"_type": _NT}, [("other.pickle", b"cos\nsystem\n.")])
    with pytest.raises(MemmapFormatError, match=r"'v'.*pickle"):
        load_memmap(folder, allow_pickle=True)


def test_key_leaving_the_folder_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    _write(str(outside), _td_meta([]))
    folder = _write(str(tmp_path / "f"), _td_meta([], {"..": {"type": "TensorDict"}}))
    with pytest.raises(MissingLeafError, match=r"%2E%2E"):  # encoded, never followed
        load_memmap(folder)
    os.symlink(str(outside), os.path.join(folder, "link"))
    _write(folder, _td_meta([], {"link": {"type": "TensorDict"}}))  # now names the link
    with pytest.raises(UnsafePathError, match="leaves the saved folder"):
        load_memmap(folder)


def test_mixed_writers_are_refused(tmp_path):
    folder = _write(str(tmp_path / "f"), _td_meta([], {"sub": {"type": "TensorDict"}}))
    TensorDict({"a": torch.ones(1)}, batch_size=[]).memmap(os.path.join(folder, "sub"))
    with pytest.raises(
        MemmapFormatError, match="td-memmap folder inside a folder saved by upstream"
    ):
        load_memmap(folder)
