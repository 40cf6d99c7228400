"""HDF5 interchange: to_h5/from_h5 round trips, PersistentTensorDict, bad files refused."""

from __future__ import annotations

import pytest
import torch

h5py = pytest.importorskip("h5py")

import td_core  # noqa: E402
import td_memmap  # noqa: E402
from td_core import TensorDict  # noqa: E402
from td_memmap import MemmapFormatError, PersistentTensorDict  # noqa: E402


def _sample() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(12.0).reshape(4, 3),
            "b": {"c": torch.arange(4), "bf": torch.randn(4, 2).to(torch.bfloat16)},
            "m": torch.tensor([True, False, True, True]),
        },
        batch_size=[4],
    )


def test_round_trip_nested_and_batch_size(tmp_path):
    td = _sample()
    path = tmp_path / "t.h5"
    ptd = td.to_h5(path)
    assert isinstance(ptd, PersistentTensorDict)
    ptd.close()
    with TensorDict.from_h5(path) as loaded:
        assert loaded.batch_size == torch.Size([4])
        assert loaded["b"].batch_size == torch.Size([4])
        out = loaded.to_tensordict()
    assert set(out.keys(True, True)) == set(td.keys(True, True))
    for key in td.keys(True, True):
        assert out[key].dtype == td[key].dtype
        assert torch.equal(out[key], td[key])


@pytest.mark.parametrize(
    "index",
    [1, slice(1, 3), [3, 0, 3], torch.tensor([2, 1]), torch.tensor([True, False, True, False])],
)
def test_indexing_reads_rows(tmp_path, index):
    td = _sample()
    with td_memmap.to_h5(td, tmp_path / "t.h5") as ptd:
        got = ptd[index]
    want = td[index]
    assert got.batch_size == want.batch_size
    for key in td.keys(True, True):
        assert torch.equal(got[key], want[key])


def test_get_set_keys(tmp_path):
    with td_memmap.to_h5(_sample(), tmp_path / "t.h5") as ptd:
        ptd["b", "d"] = torch.zeros(4, 5)
        ptd.set("e", TensorDict({"f": torch.ones(4)}, [4]))
        assert ("b", "d") in ptd and "e" in ptd
        assert ptd.get("missing", None) is None
        assert set(ptd.keys(True, True)) == {
            "a",
            "m",
            ("b", "c"),
            ("b", "bf"),
            ("b", "d"),
            ("e", "f"),
        }
        assert torch.equal(ptd["e", "f"], torch.ones(4))
        with pytest.raises(KeyError):
            ptd["missing"]
        with pytest.raises(ValueError, match="batch size"):
            ptd.batch_size = [5]


def test_auto_batch_size_and_group(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = torch.zeros(5, 2, 3).numpy()
        f.create_group("g")["y"] = torch.ones(5, 2).numpy()
    assert td_memmap.from_h5(path).batch_size == torch.Size([])
    ptd = td_core.from_h5(path, auto_batch_size=True)
    assert ptd.batch_size == torch.Size([5, 2])
    ptd.close()
    with h5py.File(path, "r") as f:
        ptd = PersistentTensorDict(group=f, batch_size=[5])
        assert ptd["g", "y"].shape == (5, 2)
        assert td_memmap.from_h5(f, batch_dims=1, auto_batch_size=True).batch_size == (5,)


def test_non_json_value_refused(tmp_path):
    td = TensorDict({"a": torch.zeros(2), "s": "text", "o": {1, 2}}, [2])
    with pytest.raises(TypeError, match="non-tensor value at key 'o'"):
        td.to_h5(tmp_path / "t.h5")
    assert not (tmp_path / "t.h5").exists()


def test_slash_key_refused(tmp_path):
    with pytest.raises(ValueError, match="a/b"):
        TensorDict({"a/b": torch.zeros(2)}, [2]).to_h5(tmp_path / "t.h5")


def test_missing_file_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.h5"):
        td_memmap.from_h5(tmp_path / "nope.h5")


def test_garbage_file_named(tmp_path):
    path = tmp_path / "junk.h5"
    path.write_bytes(b"not hdf5 at all")
    with pytest.raises(MemmapFormatError, match=r"junk\.h5"):
        td_memmap.from_h5(path)


def test_opaque_dataset_refused(tmp_path):
    import numpy as np

    path = tmp_path / "obj.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("o", data=np.void(b"\x80\x04K\x01."))  # a pickle, as opaque bytes
    with td_memmap.from_h5(path) as ptd, pytest.raises(MemmapFormatError, match=r"obj\.h5"):
        ptd["o"]


def test_unknown_td_dtype_refused(tmp_path):
    path = tmp_path / "dt.h5"
    with h5py.File(path, "w") as f:
        f["x"] = torch.zeros(2).numpy()
        f["x"].attrs["td_dtype"] = "evil"
    with td_memmap.from_h5(path) as ptd, pytest.raises(MemmapFormatError, match=r"dt\.h5"):
        ptd["x"]


def test_missing_h5py_names_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ImportError, match=r"td-memmap\[h5\]"):
        _sample().to_h5(tmp_path / "t.h5")


def test_requires_grad_refused_like_upstream(tmp_path):
    td = TensorDict({"w": torch.zeros(2, requires_grad=True)}, [2])
    with pytest.raises(RuntimeError, match="requires_grad=True"):
        td.to_h5(tmp_path / "t.h5")
    assert not (tmp_path / "t.h5").exists()
