"""Single-file archives: pack, unpack, load in place, save to `.tdz`, and their safety rules."""

import gc
import inspect
import os
import pickle
import stat
import struct
import zipfile

import pytest
import torch

from td_core import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    lazy_stack,
    tensorclass,
)
from td_memmap import (
    IncompleteSaveError,
    MemmapExistsError,
    MemmapFormatError,
    MemoryMappedTensor,
    PickleNotAllowedError,
    ReadOnlyMemmapError,
    _archive,
    is_memmap_archive,
    load_memmap,
    pack_memmap,
    refresh_archive_checksums,
    save,
    unpack_memmap,
)


@tensorclass
class Sample:
    obs: torch.Tensor
    tag: str = ""


def _flat() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(12.0).view(3, 4),
            "i": torch.arange(3, dtype=torch.int16),
            "b": torch.tensor([True, False, True]),
            "h": torch.randn(3, 5, dtype=torch.float64),
            "name": "cartpole",
        },
        batch_size=[3],
    )


def _nested() -> TensorDict:
    return TensorDict(
        {
            "a": torch.arange(6.0).view(3, 2),
            "n": {"x": torch.ones(3, 2, 2), "m": {"y": torch.zeros(3)}},
        },
        batch_size=[3],
    )


def _lazy() -> LazyStackedTensorDict:
    return lazy_stack(
        [
            TensorDict({"a": torch.zeros(3), "s": "left"}, []),
            TensorDict({"a": torch.ones(5), "only": torch.ones(2)}, []),
        ]
    )


def _tensorclass() -> Sample:
    return Sample(obs=torch.arange(8.0).view(2, 4), tag="run", batch_size=[2])


KINDS = {"flat": _flat, "nested": _nested, "lazy": _lazy, "tensorclass": _tensorclass}


def _same(a, b) -> None:
    assert type(a) is type(b)
    assert a.batch_size == b.batch_size
    if isinstance(a, LazyStackedTensorDict):
        for x, y in zip(a.tensordicts, b.tensordicts):
            _same(x, y)
        return
    td_a = a if isinstance(a, TensorDict) else a._tensordict
    td_b = b if isinstance(b, TensorDict) else b._tensordict
    assert sorted(td_a.keys(True, True), key=str) == sorted(td_b.keys(True, True), key=str)
    for key in td_a.keys(True, True):
        x, y = td_a.get(key), td_b.get(key)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), key
        else:
            assert td_a[key] == td_b[key], key


# ------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("kind", KINDS)
def test_save_to_tdz_and_load_gives_the_same(tmp_path, kind):
    td = KINDS[kind]()
    out = td.memmap(tmp_path / "x.tdz")
    assert os.path.isfile(tmp_path / "x.tdz") and is_memmap_archive(tmp_path / "x.tdz")
    assert out.is_locked
    _same(out, td)
    _same(load_memmap(tmp_path / "x.tdz"), td)
    assert sorted(os.listdir(tmp_path)) == ["x.tdz"]  # no staging left behind


@pytest.mark.parametrize("kind", KINDS)
def test_archive_load_matches_folder_load(tmp_path, kind):
    td = KINDS[kind]()
    td.memmap(tmp_path / "folder")
    pack_memmap(tmp_path / "folder", tmp_path / "packed.tdz")
    _same(load_memmap(tmp_path / "packed.tdz"), load_memmap(tmp_path / "folder"))
    unpack_memmap(tmp_path / "packed.tdz", tmp_path / "back")
    _same(load_memmap(tmp_path / "back"), load_memmap(tmp_path / "folder"))


def test_archive_entries_mirror_the_folder_and_payloads_are_aligned(tmp_path):
    save(_nested(), tmp_path / "f", layout="files")  # an archive mirrors the files layout
    pack_memmap(tmp_path / "f", tmp_path / "f.tdz")
    on_disk = sorted(
        os.path.relpath(os.path.join(r, n), tmp_path / "f").replace(os.sep, "/")
        for r, _, names in os.walk(tmp_path / "f")
        for n in names
    )
    with zipfile.ZipFile(tmp_path / "f.tdz") as zf:
        files = [i for i in zf.infolist() if not i.is_dir()]
        assert sorted(i.filename for i in files) == on_disk
        assert files[0].filename == "meta.json"
        assert zf.testzip() is None
        raw = (tmp_path / "f.tdz").read_bytes()
        for info in files:
            if info.filename.endswith(".memmap"):
                assert info.compress_type == zipfile.ZIP_STORED
                n, m = struct.unpack_from("<2H", raw, info.header_offset + 26)
                assert (info.header_offset + 30 + n + m) % 64 == 0, info.filename


def test_load_maps_the_archive_without_copies(tmp_path):
    td = _flat().memmap(tmp_path / "x.tdz")
    loaded = load_memmap(tmp_path / "x.tdz")
    leaf = loaded["a"]
    assert isinstance(leaf, MemoryMappedTensor) and leaf.filename == str(tmp_path / "x.tdz")
    assert leaf.untyped_storage().nbytes() == os.path.getsize(tmp_path / "x.tdz")
    assert torch.equal(pickle.loads(pickle.dumps(leaf)), td["a"])


def test_unaligned_zip_of_a_folder_loads_read_only(tmp_path):
    td = _nested()
    save(td, tmp_path / "f", layout="files")  # archives hold the files layout
    with zipfile.ZipFile(tmp_path / "plain.zip", "w") as zf:  # like `zip -r`: not aligned
        for root, _, names in os.walk(tmp_path / "f"):
            for name in names:
                path = os.path.join(root, name)
                zf.write(path, os.path.relpath(path, tmp_path / "f"))
    loaded = load_memmap(tmp_path / "plain.zip")
    _same(loaded, td)
    with pytest.raises(ReadOnlyMemmapError):
        loaded["a"].add_(1)


@pytest.mark.parametrize("compress_type", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_zip_of_a_packed_folder_loads(tmp_path, compress_type):
    # a fresh save is packed (one data file); zipping that folder gives an archive
    # whose leaves lie inside the data file's member
    td = _nested()
    save(td, tmp_path / "f")
    assert "data.pack" in os.listdir(tmp_path / "f")
    with zipfile.ZipFile(tmp_path / "p.zip", "w", compression=compress_type) as zf:
        for name in os.listdir(tmp_path / "f"):
            zf.write(tmp_path / "f" / name, name)
    loaded = load_memmap(tmp_path / "p.zip")
    _same(loaded, td)
    with pytest.raises(ReadOnlyMemmapError):
        loaded["a"].add_(1)


@pytest.mark.parametrize("compression", ["deflate", "bzip2", "lzma", zipfile.ZIP_DEFLATED])
def test_compressed_archives_load_read_only(tmp_path, compression):
    td = _flat()
    out = td.memmap(tmp_path / "c.tdz", compression=compression)
    _same(out, td)
    with zipfile.ZipFile(tmp_path / "c.tdz") as zf:  # packed: every leaf in data.pack
        assert zf.getinfo("data.pack").compress_type != zipfile.ZIP_STORED
    loaded = load_memmap(tmp_path / "c.tdz")
    _same(loaded, td)
    with pytest.raises(ReadOnlyMemmapError):
        loaded["a"].add_(1)
    with pytest.raises(ReadOnlyMemmapError, match=r"data\.pack.*compressed"):
        load_memmap(tmp_path / "c.tdz", mode="r+")


def test_pack_memmap_with_compression_and_level(tmp_path):
    _flat().memmap(tmp_path / "f")
    out = pack_memmap(tmp_path / "f", tmp_path / "f.tdz", compression="deflate", compresslevel=9)
    assert out == tmp_path / "f.tdz"
    _same(load_memmap(out), load_memmap(tmp_path / "f"))


def test_tensorclass_archive_restores_the_class(tmp_path):
    out = _tensorclass().memmap(tmp_path / "p.tdz")
    assert type(out) is Sample and out.tag == "run"
    assert type(load_memmap(tmp_path / "p.tdz")) is Sample
    assert type(Sample.load_memmap(tmp_path / "p.tdz")) is Sample
    assert type(load_memmap(tmp_path / "p.tdz", cls=TensorDict)) is TensorDict


def test_save_and_memmap_write_an_archive_by_suffix_or_keyword(tmp_path):
    td = _flat()
    td.save(tmp_path / "s.tdz")
    assert is_memmap_archive(tmp_path / "s.tdz")
    td.memmap(tmp_path / "k", archive=True)
    assert is_memmap_archive(tmp_path / "k")
    td.memmap(tmp_path / "d.tdz", archive=False)
    assert os.path.isdir(tmp_path / "d.tdz")
    same = td.clone()
    assert same.memmap_(tmp_path / "m.tdz") is same
    assert isinstance(same["a"], MemoryMappedTensor)
    _same(TensorDict.load_memmap(tmp_path / "m.tdz"), td)


def test_memmap_like_to_an_archive_writes_through(tmp_path):
    td = _flat()
    like = td.memmap_like(tmp_path / "l.tdz")
    assert like["a"].eq(0).all()
    like["a"][1] = 7.0
    assert load_memmap(tmp_path / "l.tdz")["a"][1].eq(7).all()
    assert load_memmap(tmp_path / "l.tdz")["name"] == "cartpole"


def test_memmap_like_shares_non_tensor_values_in_a_folder(tmp_path):
    like = _flat().memmap_like(tmp_path / "f", share_non_tensor=True)
    like.get("name").data = "mountaincar"
    assert load_memmap(tmp_path / "f")["name"] == "mountaincar"


# ----------------------------------------------------------------------------- modes, writes


def test_default_and_r_modes_refuse_writes_r_plus_writes_through(tmp_path):
    _flat().memmap(tmp_path / "x.tdz")
    default = load_memmap(tmp_path / "x.tdz")
    assert not default.is_locked
    with pytest.raises(ReadOnlyMemmapError):
        default["a"].add_(1)
    ro = load_memmap(tmp_path / "x.tdz", mode="r")
    assert ro.is_locked
    with pytest.raises(ReadOnlyMemmapError):
        ro["a"][0] = 5
    rw = load_memmap(tmp_path / "x.tdz", mode="r+")
    rw["a"][0] = 5.0
    assert load_memmap(tmp_path / "x.tdz")["a"][0].eq(5).all()


def test_r_plus_on_a_read_only_archive_is_refused(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write any file")
    _flat().memmap(tmp_path / "x.tdz")
    os.chmod(tmp_path / "x.tdz", stat.S_IRUSR)
    with pytest.raises(PermissionError, match="r\\+"):
        load_memmap(tmp_path / "x.tdz", mode="r+")


def test_refresh_archive_checksums_after_writes(tmp_path):
    _flat().memmap(tmp_path / "x.tdz")
    load_memmap(tmp_path / "x.tdz", mode="r+")["a"].add_(1)
    with zipfile.ZipFile(tmp_path / "x.tdz") as zf:
        assert zf.testzip() == "data.pack"  # packed: the leaf is in the data file
    with pytest.raises(MemmapFormatError, match=r"x\.tdz.*'data\.pack'.*CRC"):
        unpack_memmap(tmp_path / "x.tdz", tmp_path / "u")
    assert not os.path.exists(tmp_path / "u")
    assert refresh_archive_checksums(tmp_path / "x.tdz") == tmp_path / "x.tdz"
    with zipfile.ZipFile(tmp_path / "x.tdz") as zf:
        assert zf.testzip() is None
    unpack_memmap(tmp_path / "x.tdz", tmp_path / "u")
    assert load_memmap(tmp_path / "u")["a"][0, 0] == 1.0


# ------------------------------------------------------------------------------ options


def test_option_errors(tmp_path):
    td = _flat()
    with pytest.raises(ValueError, match="compression is only supported for archives"):
        td.memmap(tmp_path / "f", compression="deflate")
    with pytest.raises(ValueError, match="unknown compression 'zstdx'"):
        td.memmap(tmp_path / "f.tdz", compression="zstdx")
    with pytest.raises(ValueError, match="needs a prefix"):
        td.memmap(None, archive=True)
    with pytest.raises(ValueError, match="share_non_tensor=True needs a folder"):
        td.memmap(tmp_path / "s.tdz", share_non_tensor=True)
    assert not os.listdir(tmp_path)
    td.memmap(tmp_path / "x.tdz")
    with pytest.raises(MemmapExistsError) as info:
        td.memmap(tmp_path / "x.tdz", existsok=False)
    assert isinstance(info.value, RuntimeError)  # what upstream raises
    os.mkdir(tmp_path / "dir.tdz")
    with pytest.raises(ValueError, match="is a folder"):
        td.memmap(tmp_path / "dir.tdz", archive=True)


def test_pack_errors(tmp_path):
    _flat().memmap(tmp_path / "f")
    with pytest.raises(ValueError, match="outside the folder"):
        pack_memmap(tmp_path / "f", tmp_path / "f" / "in.tdz")
    with pytest.raises(IncompleteSaveError):
        pack_memmap(tmp_path / "nothing", tmp_path / "o.tdz")
    assert not os.path.exists(tmp_path / "o.tdz")


def test_is_memmap_archive(tmp_path):
    _flat().memmap(tmp_path / "x.tdz")
    _flat().memmap(tmp_path / "f")
    (tmp_path / "text").write_text("hello")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("a.txt", "x")
    assert is_memmap_archive(tmp_path / "x.tdz")
    for path in ("f", "text", "other.zip", "missing"):
        assert not is_memmap_archive(tmp_path / path)


def test_a_failed_archive_save_leaves_the_previous_archive(tmp_path):
    _flat().memmap(tmp_path / "x.tdz")
    before = (tmp_path / "x.tdz").read_bytes()
    bad = TensorDict({"a": torch.zeros(3), "obj": object()}, [3])
    with pytest.raises(PickleNotAllowedError):
        bad.memmap(tmp_path / "x.tdz")
    assert (tmp_path / "x.tdz").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["x.tdz"]


@pytest.mark.parametrize("layout", ["packed", "files"])
@pytest.mark.parametrize(
    "entries",
    [
        {},
        {"s": "text"},
        {"c": NonTensorStack(NonTensorData(1 + 2j), NonTensorData(3j))},
        {"e": torch.zeros(0, 3), "n": {"e": torch.zeros(0)}, "s": "hi"},
    ],
    ids=["empty", "string", "complex-stack", "zero-size-leaves"],
)
def test_an_archive_with_no_tensor_bytes_saves_and_loads(tmp_path, entries, layout):
    td = TensorDict(entries, [2] if "c" in entries else [])
    save(td, tmp_path / "x.tdz", layout=layout)
    back = load_memmap(tmp_path / "x.tdz")
    keys = sorted(td.keys(True, True), key=str)
    assert sorted(back.keys(True, True), key=str) == keys
    for key in keys:
        want, got = td.get(key), back.get(key)
        if isinstance(want, torch.Tensor):
            assert got.shape == want.shape and torch.equal(got, want), key
        else:
            assert got.tolist() == want.tolist(), key
    assert sorted(os.listdir(tmp_path)) == ["x.tdz"]


def test_a_failed_archive_write_leaves_no_zip_open(tmp_path, monkeypatch):
    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    td = TensorDict({"a": torch.arange(4.0)}, [4])
    monkeypatch.setattr(_archive, "_placed_chunks", _failing_chunks)
    with pytest.raises(OSError, match="disk full"):
        td.memmap(tmp_path / "x.tdz")
    gc.collect()
    assert unraisable == []
    assert os.listdir(tmp_path) == []


def _failing_chunks(placed, size):
    yield b"\0"
    raise OSError("disk full")


def test_signatures_match_upstream():
    upstream = pytest.importorskip("tensordict")
    import td_memmap

    for name in (
        "pack_memmap",
        "unpack_memmap",
        "append_memmap",
        "is_memmap_archive",
        "refresh_archive_checksums",
    ):
        ours = inspect.signature(getattr(td_memmap, name))
        theirs = inspect.signature(getattr(upstream, name))
        assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
            (p.name, p.kind, p.default) for p in theirs.parameters.values()
        ], name
    ours = inspect.signature(MemoryMappedTensor.from_handler).parameters
    theirs = inspect.signature(upstream.MemoryMappedTensor.from_handler).parameters
    assert list(ours) == list(theirs)


# ------------------------------------------------------------------------ the same as upstream


def test_behaviour_matches_upstream_on_the_same_data(tmp_path):
    upstream = pytest.importorskip("tensordict")
    data = {"a": torch.arange(12.0).view(3, 4), "n": {"x": torch.ones(3, 2, dtype=torch.int32)}}
    ours = TensorDict(data, batch_size=[3])
    theirs = upstream.TensorDict(data, batch_size=[3])
    ours.memmap(tmp_path / "ours.tdz")
    theirs.memmap(tmp_path / "theirs.tdz")
    a, b = (
        load_memmap(tmp_path / "ours.tdz"),
        upstream.TensorDict.load_memmap(tmp_path / "theirs.tdz"),
    )
    for key in (("a",), ("n", "x")):
        assert torch.equal(a[key], b[key])
    assert is_memmap_archive(tmp_path / "ours.tdz") and upstream.is_memmap_archive(
        tmp_path / "theirs.tdz"
    )
    # td reads upstream's archive too (its folder layout, see test_upstream_format), read-only
    mine = load_memmap(tmp_path / "theirs.tdz")
    for key in (("a",), ("n", "x")):
        assert torch.equal(mine[key], b[key])
    with pytest.raises(ReadOnlyMemmapError):
        mine["a"][0, 0] = 1.0
    for fn in (upstream.unpack_memmap, unpack_memmap):
        with pytest.raises(ValueError):
            fn(tmp_path / "missing.tdz", tmp_path / "out")


def test_in_place_loads_and_refresh_from_an_archive(tmp_path):
    td = _flat()
    td.memmap(tmp_path / "x.tdz")
    target = td.clone().zero_()
    target.load_memmap_(tmp_path / "x.tdz")
    _same(target, td)
    loaded = load_memmap(tmp_path / "x.tdz")
    assert loaded.memmap_refresh_()["a"].equal(td["a"])
    with pytest.raises(RuntimeError, match="archive"):
        loaded.make_memmap("new", (3,))


@pytest.mark.parametrize("kind", KINDS)
def test_memmap_like_to_an_archive_on_every_kind(tmp_path, kind):
    td = KINDS[kind]()
    like = td.memmap_like(tmp_path / "l.tdz")
    assert type(like) is type(td) and like.batch_size == td.batch_size
    loaded = load_memmap(tmp_path / "l.tdz")
    assert type(loaded) is type(td)
    leaves = loaded.tensordicts if isinstance(loaded, LazyStackedTensorDict) else [loaded]
    for member in leaves:
        for value in member.values(True, True):
            if isinstance(value, torch.Tensor):
                assert not value.any()


def test_lazy_stack_archive_matches_upstream(tmp_path):
    upstream = pytest.importorskip("tensordict")
    members = [{"a": torch.zeros(3)}, {"a": torch.ones(5), "only": torch.ones(2)}]
    lazy_stack([TensorDict(m, []) for m in members]).memmap(tmp_path / "ours.tdz")
    upstream.lazy_stack([upstream.TensorDict(m, batch_size=[]) for m in members]).memmap(
        tmp_path / "theirs.tdz"
    )
    ours = load_memmap(tmp_path / "ours.tdz")
    theirs = upstream.TensorDict.load_memmap(tmp_path / "theirs.tdz")
    assert type(ours).__name__ == type(theirs).__name__ == "LazyStackedTensorDict"
    for mine, other in zip(ours.tensordicts, theirs.tensordicts):
        assert sorted(mine.keys()) == sorted(other.keys())
        for key in mine.keys():
            assert torch.equal(mine[key], other[key])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_an_archive_save_killed_at_random_points_keeps_the_previous_archive(tmp_path):
    import random
    import signal
    import time

    rng = random.Random(3)

    def layout(value: float) -> TensorDict:
        return TensorDict({f"w{i}": torch.full((1 << 16,), value) for i in range(16)}, [])

    archive = tmp_path / "run.tdz"
    layout(0.0).memmap(archive)
    start = time.perf_counter()
    layout(0.0).memmap(tmp_path / "timing.tdz")
    scale = time.perf_counter() - start
    current, interrupted = 0.0, 0
    for trial in range(1, 13):
        pid = os.fork()
        if pid == 0:
            try:
                layout(float(trial)).memmap(archive)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0, 1.3 * scale))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        finished = os.WIFEXITED(status)
        scale *= 0.7 if finished else 1.1
        found = {v.unique().item() for v in load_memmap(archive).values()}
        assert found in ({current}, {float(trial)}), (trial, found)
        current = found.pop()
        interrupted += not finished
    assert interrupted >= 3, "the saves finished before SIGKILL: the test proves nothing"
    layout(99.0).memmap(archive)  # the next save cleans what the killed ones left
    assert sorted(os.listdir(tmp_path)) == ["run.tdz", "timing.tdz"]


def test_an_archive_keeps_no_blocks_reserved_past_its_end(tmp_path):
    # the writer reserves blocks for the payloads ahead (see `_io.reserve_ahead`), then
    # gives back what it did not use: the file occupies about its size, no more
    td = TensorDict({f"w{i}": torch.ones(1 << 18) for i in range(4)}, [])  # 4 MB
    td.memmap(tmp_path / "a.tdz")
    (tmp_path / "copy").write_bytes((tmp_path / "a.tdz").read_bytes())  # plainly written
    st, plain = os.stat(tmp_path / "a.tdz"), os.stat(tmp_path / "copy")
    if not getattr(st, "st_blocks", 0):
        pytest.skip("the file system reports no block count")
    assert st.st_size == plain.st_size
    assert st.st_blocks <= plain.st_blocks + 8  # one 4 KiB block of rounding at most
    assert (load_memmap(tmp_path / "a.tdz") == td).all()
