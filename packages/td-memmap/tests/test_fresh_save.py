"""The fresh packed save's fast paths give what the general ones give.

A fresh save of many small leaves builds its result leaves, its metadata and
its writes in one pass each (`views_at`, `MemoryMappedTensor._adopt`, one
JSON encoder a `json_bytes` call): these tests hold them to the slower,
general forms they replace.
"""

import json

import pytest
import torch

from td_core import TensorDict
from td_memmap import MemoryMappedTensor, load_memmap
from td_memmap._io import json_bytes, map_storage, view_at, views_at

_PLACES = [
    (0, torch.float32, (3, 4)),
    (64, torch.int16, (5,)),
    (128, torch.bool, ()),
    (192, torch.complex32, (2, 2)),  # an experimental dtype: its own path
    (256, torch.bfloat16, (1, 3, 1)),
    (320, torch.float64, (2, 0, 3)),
    (384, torch.float32, (2, 2)),  # a dtype seen before
]


@pytest.fixture
def storage(tmp_path):
    path = tmp_path / "data.pack"
    path.write_bytes(bytes(range(256)) * 2)
    return map_storage(str(path), True, 512)


def test_views_at_gives_what_view_at_gives(storage):
    for (offset, dtype, shape), got in zip(_PLACES, views_at(storage, _PLACES)):
        want = view_at(storage, offset, dtype, shape)
        assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
        assert got.storage_offset() == want.storage_offset()
        assert got.untyped_storage().data_ptr() == storage.data_ptr()
        assert not got._is_view() and not got.requires_grad  # detach_() works on it
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_adopt_gives_what_wrap_gives(storage):
    for writable in (True, False):
        tensors = views_at(storage, _PLACES)
        shapes = [shape for _, _, shape in _PLACES]
        for tensor, shape in zip(MemoryMappedTensor._adopt(tensors, shapes, "f", writable), shapes):
            want = MemoryMappedTensor._wrap(tensor, "f", writable, shape)
            assert type(tensor) is type(want)
            assert (tensor.filename, tensor._mm_writable, tensor._mm_parent_shape) == (
                "f",
                writable,
                shape,
            )


def test_a_fresh_save_of_many_leaves_returns_leaves_on_its_data_file(tmp_path):
    leaves = {f"l{i}": torch.full((i % 5, 3), float(i)) for i in range(200)}
    leaves["i"] = torch.arange(7, dtype=torch.int8)
    leaves["c"] = torch.ones(2, 2, dtype=torch.float16).view(torch.complex32)  # no warning
    td = TensorDict({**leaves, "sub": {"b": torch.ones(2, dtype=torch.bool)}}, [])
    out = td.memmap(tmp_path / "save")
    pack = str(tmp_path / "save" / "data.pack")
    for key, leaf in out.items(True, True):
        assert type(leaf) is MemoryMappedTensor and leaf.filename == pack, key
        assert leaf.dtype == td[key].dtype and leaf.shape == td[key].shape, key
        assert torch.equal(leaf.view(torch.uint8), td[key].view(torch.uint8)), key
    out.unlock_().detach_()  # not views: torch can detach each in place
    out["l7"][0, 1] = -1.0  # written through to the file
    assert load_memmap(tmp_path / "save")["l7"][0, 1] == -1.0


@pytest.mark.parametrize("mode", [None, "r"])
def test_a_packed_load_gives_each_leaf_its_own_tensor_on_the_data_file(tmp_path, mode):
    leaves = {"a": torch.arange(6.0).view(2, 3), "e": torch.zeros(0, 2), "i": torch.ones(3).int()}
    leaves["c"] = torch.ones(2, 2, dtype=torch.float16).view(torch.complex32)
    TensorDict({**leaves, "sub": {"b": torch.ones(2, dtype=torch.bool)}}, []).memmap(tmp_path)
    back = load_memmap(tmp_path, mode=mode)
    for key, leaf in back.items(True, True):
        assert isinstance(leaf, MemoryMappedTensor) and leaf.filename.endswith("data.pack"), key
        assert leaf._mm_writable is (mode is None) and leaf._mm_parent_shape == leaf.shape, key
        assert not leaf._is_view(), key  # detach_ works on every leaf
    assert torch.equal(back["a"], leaves["a"]) and back["sub", "b"].all()


@pytest.mark.parametrize(
    "data",
    [
        {"entries": [{"key": 'a\u00e9\n"', "shape": [2, 3], "offset": 64}, {"x": [1.5, None]}]},
        {"index": {"sub/a": [[1, 2], {"entries": []}]}, "generation": 12, "ok": True},
        ["a", {"b": -0.0}],
        "\u2603",
    ],
)
def test_json_bytes_writes_what_the_standard_encoder_writes(data):
    encode = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode
    raw = json_bytes(data)
    assert json.loads(raw) == data
    if type(data) is dict:  # one line per field and per item of entries and index
        for key, value in data.items():
            items = value.items() if key == "index" else value if key == "entries" else ()
            for item in items:
                text = f"{encode(item[0])}: {encode(item[1])}" if key == "index" else encode(item)
                assert f"\n  {text}".encode() in raw
    else:
        assert raw == (encode(data) + "\n").encode()


def test_json_bytes_refuses_what_the_standard_encoder_refuses():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="ircular"):
        json_bytes({"entries": [loop]})
    with pytest.raises(ValueError, match="JSON compliant"):
        json_bytes({"entries": [{"v": float("nan")}]})
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_bytes({"x": object()})
    # a failed call leaves nothing behind for the next one
    assert json.loads(json_bytes({"entries": [[1], [1]]})) == {"entries": [[1], [1]]}
