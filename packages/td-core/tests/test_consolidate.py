"""consolidate(): one buffer for every tensor leaf, and what moves it as one block."""

from __future__ import annotations

import io
import pickle
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from td_core import TensorDict, from_consolidated, lazy_stack, tensorclass


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


def test_consolidate_of_consolidated_is_itself() -> None:
    c = _td().consolidate()
    assert c.consolidate() is c and c.consolidate(inplace=True) is c
    assert c.consolidate(share_memory=True) is not c


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


class _CountTransfers(TorchFunctionMode):
    """Counts `Tensor.to` calls that name a device."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is torch.Tensor.to and (
            "device" in kwargs or any(isinstance(a, (str, torch.device)) for a in args[1:])
        ):
            self.calls.append(args[0].numel())
        return func(*args, **kwargs)


def _buffer_bytes(td: TensorDict) -> int:
    return next(iter(td.values(True, True))).untyped_storage().nbytes()


@pytest.mark.parametrize("non_blocking", [False, True])
def test_to_device_of_consolidated_moves_one_buffer(non_blocking: bool) -> None:
    td = TensorDict({f"k{i}": {"x": torch.randn(4, i + 1)} for i in range(20)}, [4])
    c = td.consolidate()
    with _CountTransfers() as mode:
        m = c.to("meta", non_blocking=non_blocking)
    assert mode.calls == [_buffer_bytes(c)]  # one transfer: the whole buffer
    assert m.device == torch.device("meta") and m.is_consolidated()
    assert len({t.untyped_storage().nbytes() for t in m.values(True, True)}) == 1
    assert _buffer_bytes(m) == _buffer_bytes(c)
    for key in td.keys(True, True):
        assert m[key].shape == td[key].shape and m[key].dtype == td[key].dtype
    # a TensorDict that is not consolidated still moves leaf by leaf
    with _CountTransfers() as mode:
        td.to("meta")
    assert len(mode.calls) == 20


def test_to_device_of_consolidated_keeps_non_tensor_and_kind() -> None:
    m = _td().consolidate().to("meta")
    assert m["label"] == "hello"
    assert type(m) is TensorDict and m["nested"].device == torch.device("meta")


def test_to_device_of_consolidated_ragged_lazy_stack() -> None:
    stack = lazy_stack(
        [
            TensorDict(a=torch.arange(2.0), b={"c": torch.ones(3, dtype=torch.int32)}),
            TensorDict(a=torch.arange(5.0), b={"c": torch.ones(3, dtype=torch.int32)}),
        ]
    )
    c = stack.consolidate()
    assert type(c) is type(stack) and c.is_consolidated()
    assert [m["a"].shape[0] for m in c.tensordicts] == [2, 5]
    with _CountTransfers() as mode:
        m = c.to("meta")
    assert len(mode.calls) == 1
    assert type(m) is type(stack) and m.is_consolidated() and m.device == torch.device("meta")
    assert [t["a"].shape[0] for t in m.tensordicts] == [2, 5]
    data = pickle.dumps(c)
    buffer_bytes = _buffer_bytes(c.tensordicts[0])
    assert len(data) < 2 * buffer_bytes + 2000  # the buffer once, not once per leaf
    back = pickle.loads(data)
    assert type(back) is type(stack) and back.is_consolidated()
    assert torch.equal(back.tensordicts[1]["a"], torch.arange(5.0))


def test_to_dtype_of_consolidated_is_an_ordinary_cast() -> None:
    c = _td().consolidate()
    d = c.to(torch.float16)
    assert not d.is_consolidated() and d["obs"].dtype == torch.float16
    assert d["done"].dtype == torch.float16  # upstream casts every leaf


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("non_blocking", [False, True])
def test_to_cuda_and_back_of_consolidated(non_blocking: bool) -> None:
    td = _td()
    c = td.consolidate(pin_memory=non_blocking)
    with _CountTransfers() as mode:
        g = c.to("cuda", non_blocking=non_blocking)
    assert len(mode.calls) == 1
    assert g.is_consolidated() and g.device.type == "cuda" and g["obs"].is_cuda
    back = g.to("cpu", non_blocking=non_blocking)
    if non_blocking:
        torch.cuda.synchronize()
    assert back.is_consolidated() and back.device == torch.device("cpu")
    assert (back == td).all() and back["label"] == "hello"


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


def test_consolidate_to_a_file_reports_the_cpu_device(tmp_path) -> None:
    td = _td()
    assert td.device is None
    c = td.consolidate(filename=tmp_path / "td.bin")
    assert c.device == torch.device("cpu")
    assert all(t.device.type == "cpu" for t in c.values(True, True))


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_consolidate_keeps_the_buffer_where_the_leaves_are(device: str) -> None:
    td = TensorDict({"a": torch.zeros(2, 3), "n": {"b": torch.ones(2)}}, [2]).to(device)
    for source in (td, td.clear_device_()):
        c = source.consolidate()
        assert c.device == source.device
        assert {t.device.type for t in c.values(True, True)} == {device}


def test_consolidate_refuses_leaves_on_several_devices_without_a_device() -> None:
    td = TensorDict({"a": torch.zeros(2), "b": torch.zeros(2, device="meta")}, [2])
    with pytest.raises(ValueError, match="several devices"):
        td.consolidate()
    assert td.consolidate(device="meta")["a"].device.type == "meta"


@tensorclass
class _Saved:
    x: torch.Tensor
    inner: Any = None


def test_a_consolidated_file_gives_its_tensorclass_back(tmp_path) -> None:
    nested = _Saved(x=torch.ones(2), inner=_Saved(x=torch.zeros(2), batch_size=[2]), batch_size=[2])
    nested.consolidate(filename=tmp_path / "tc.bin")
    back = from_consolidated(tmp_path / "tc.bin")
    assert type(back) is _Saved and type(back.inner) is _Saved
    assert torch.equal(back.x, torch.ones(2)) and torch.equal(back.inner.x, torch.zeros(2))


def test_a_tensorclass_whose_module_is_not_loaded_comes_back_as_a_tensordict(tmp_path) -> None:
    import json

    from td_core._io.consolidate_format import build_from_layout

    tree = {"batch_size": [], "entries": {}, "class": "not_a_loaded_module:Thing"}
    with pytest.warns(UserWarning, match="not loaded in this process"):
        out = build_from_layout(
            json.loads(json.dumps(tree)), torch.zeros(0, dtype=torch.uint8), 0, "x"
        )
    assert type(out) is TensorDict
    assert "not_a_loaded_module" not in __import__("sys").modules  # nothing was imported
