"""consolidate(): one buffer for every tensor leaf, and what moves it as one block."""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from td_core import TensorDict, from_consolidated


def _td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "obs": torch.randn(4, 3, generator=g),
            "done": torch.zeros(4, dtype=torch.bool),
            "count": torch.arange(4, dtype=torch.int16),
            "nested": {"x": torch.randn(4, 2, 2, generator=g).double()},
            "label": "hello",
        },
        [4],
    )


def _storages(td: TensorDict) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in td.values(True, True)}


def test_consolidate_views_one_buffer_and_keeps_values() -> None:
    td = _td()
    c = td.consolidate()
    assert c.is_consolidated() and not td.is_consolidated()
    assert len(_storages(c)) == 1
    assert (c == td).all()
    assert c["label"] == "hello"
    assert c.batch_size == td.batch_size
    # a write through a view lands in the buffer, and td is untouched
    c["obs"][0, 0] = 100.0
    assert td["obs"][0, 0] != 100.0


def test_index_or_clone_of_consolidated_is_not_consolidated() -> None:
    c = _td().consolidate()
    assert not c[0].is_consolidated()
    assert not c.clone().is_consolidated()
    assert not TensorDict({}, []).is_consolidated()
    # a leaf that owns its storage is not a consolidated buffer, even alone
    assert not TensorDict({"a": torch.zeros(16)}, []).is_consolidated()
    assert not TensorDict({"n": {"a": torch.zeros(4)}}, []).is_consolidated()


def test_inplace_replaces_leaves() -> None:
    td = _td()
    before = td.clone()
    assert td.consolidate(inplace=True) is td
    assert td.is_consolidated() and (td == before).all()


def test_return_early_gives_a_future() -> None:
    fut = _td().consolidate(return_early=True)
    assert fut.result(timeout=30).is_consolidated()


def test_share_memory() -> None:
    c = _td().consolidate(share_memory=True)
    assert c.is_consolidated() and c["obs"].is_shared()


def test_pickle_and_torch_save_move_one_buffer() -> None:
    td = TensorDict({f"k{i}": torch.randn(64, 8) for i in range(40)}, [64])
    c = td.consolidate()
    data = pickle.dumps(c)
    # one buffer: about the size of the data, not 40 copies of it
    assert len(data) < 1.2 * sum(t.numel() * t.element_size() for t in td.values())
    back = pickle.loads(data)
    assert back.is_consolidated() and (back == td).all()
    buf = io.BytesIO()
    torch.save(c, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert loaded.is_consolidated() and (loaded == td).all()


def test_to_meta_device() -> None:
    c = _td().consolidate()
    m = c.to("meta")
    assert m["obs"].device.type == "meta" and m["nested", "x"].dtype == torch.float64


def test_filename_round_trip(tmp_path) -> None:
    td = _td()
    path = tmp_path / "td.bin"
    c = td.consolidate(filename=path)
    assert c.is_consolidated()
    back = TensorDict.from_consolidated(path)
    assert (back == td).all() and back["label"] == "hello"
    assert back.is_consolidated()
    # the file is a shared mapping: writes reach the other view
    back["obs"][0, 0] = 7.0
    assert from_consolidated(path)["obs"][0, 0] == 7.0


@pytest.mark.parametrize(
    "damage",
    ["truncate", "magic", "json", "offset"],
)
def test_from_consolidated_refuses_bad_files(tmp_path, damage: str) -> None:
    path = tmp_path / "td.bin"
    _td().consolidate(filename=path)
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[:4]
    elif damage == "magic":
        raw[-8:] = b"XXXXXXXX"
    elif damage == "json":
        start = raw.index(b'{"total"')
        raw[start] = ord("[")
    else:
        raw = raw.replace(b'"offset": 16', b'"offset": 99999984', 1)
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"td\.bin"):
        from_consolidated(path)


def test_non_json_value_with_filename_names_the_key(tmp_path) -> None:
    td = TensorDict({"a": torch.zeros(2), "obj": object()}, [2])
    with pytest.raises(TypeError, match="'obj'"):
        td.consolidate(filename=tmp_path / "x.bin")
