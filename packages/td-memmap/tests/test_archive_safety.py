"""Archives from strangers: no write outside the target, no unpickling, tampering refused."""

import os
import re
import stat
import struct
import zipfile

import pytest
import torch

from td_core import TensorDict
from td_memmap import (
    LeafSizeError,
    MemmapFormatError,
    PickleNotAllowedError,
    UnsafePathError,
    load_memmap,
    save,
    unpack_memmap,
)


def _td() -> TensorDict:
    return TensorDict({"a": torch.arange(12.0).view(3, 4), "n": {"b": torch.ones(3)}}, [3])


def _zip_folder(folder, archive) -> None:
    with zipfile.ZipFile(archive, "w") as zf:
        for root, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(root, name)
                zf.write(path, os.path.relpath(path, folder).replace(os.sep, "/"))


def _evil(tmp_path, name: str, *, link: bool = False):
    """A valid archive of `_td()` plus one entry named `name` (a link if `link`)."""
    save(_td(), tmp_path / "good", layout="files")  # archives hold the files layout
    archive = tmp_path / "evil.zip"
    _zip_folder(tmp_path / "good", archive)
    with zipfile.ZipFile(archive, "a") as zf:
        info = zipfile.ZipInfo(name)
        if link:
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd" if link else "pwned")
    return archive


@pytest.mark.parametrize(
    "name, link",
    [
        ("../evil", False),
        ("n/../../evil", False),
        ("/tmp/evil-absolute", False),
        ("..\\evil", False),
        ("C:evil", False),
        ("n/./evil", False),
        ("link", True),
    ],
)
def test_unsafe_entries_are_refused_and_nothing_is_written(tmp_path, name, link):
    archive = _evil(tmp_path, name, link=link)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UnsafePathError, match=r"evil\.zip"):
        unpack_memmap(archive, tmp_path / "out")
    with pytest.raises(UnsafePathError):
        load_memmap(archive)
    assert sorted(os.listdir(tmp_path)) == before  # no output folder, no staging, no evil
    assert not os.path.exists(tmp_path.parent / "evil")
    assert not os.path.exists("/tmp/evil-absolute")


def test_pickled_values_are_never_unpickled_by_default(tmp_path):
    marker = tmp_path / "ran"
    value = _Marker(str(marker))
    save(
        TensorDict({"a": torch.zeros(2), "obj": value}, [2]), tmp_path / "p.tdz", allow_pickle=True
    )
    assert not marker.exists()
    with pytest.raises(PickleNotAllowedError):
        load_memmap(tmp_path / "p.tdz")
    unpack_memmap(tmp_path / "p.tdz", tmp_path / "fresh")  # raw files only
    assert os.path.isfile(tmp_path / "fresh" / "obj.pkl")
    _td().memmap(tmp_path / "busy")
    with pytest.raises(PickleNotAllowedError, match="new or empty folder"):
        unpack_memmap(tmp_path / "p.tdz", tmp_path / "busy")
    assert not marker.exists()
    assert torch.equal(load_memmap(tmp_path / "busy")["a"], _td()["a"])  # untouched
    loaded = load_memmap(tmp_path / "p.tdz", allow_pickle=True)  # opt-in only
    assert marker.exists() and loaded["obj"] is not None


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (_touch, (self.path,))


def _touch(path: str) -> str:
    with open(path, "w") as f:
        f.write("x")
    return path


def _payload_offset(raw: bytes, info: zipfile.ZipInfo) -> int:
    n, m = struct.unpack_from("<2H", raw, info.header_offset + 26)
    return info.header_offset + 30 + n + m


#: The entry names of `_td()`'s archive in each layout: a sub-folder's metadata (the
#: packed save's one metadata file) and the leaf "a" (the packed save's data file).
_NAMES = {"files": ("n/meta.json", "a.memmap"), "packed": ("meta.json", "data.pack")}


def _saved_archive(tmp_path, layout: str = "files") -> tuple[bytearray, zipfile.ZipFile]:
    """`_td()` saved as the archive `x.tdz`: its bytes (to corrupt) and its (closed) zip."""
    save(_td(), tmp_path / "x.tdz", layout=layout)
    with zipfile.ZipFile(tmp_path / "x.tdz") as zf:
        return bytearray((tmp_path / "x.tdz").read_bytes()), zf


def _refused_by_load_and_unpack(archive, error: type[Exception], match: str) -> None:
    """Both `load_memmap` and `unpack_memmap` refuse `archive`; the unpack leaves no folder."""
    out = archive.parent / "out"
    with pytest.raises(error, match=match):
        load_memmap(archive)
    with pytest.raises(error, match=match):
        unpack_memmap(archive, out)
    assert not os.path.exists(out)


@pytest.mark.parametrize("layout", ["files", "packed"])
def test_a_bad_crc_in_metadata_is_refused_on_load_and_unpack(tmp_path, layout):
    raw, zf = _saved_archive(tmp_path, layout)
    meta, _ = _NAMES[layout]
    at = raw.index(b'"generation"', _payload_offset(raw, zf.getinfo(meta)))
    raw[at + 1 : at + 2] = b"G"  # same size, different bytes
    (tmp_path / "x.tdz").write_bytes(bytes(raw))
    _refused_by_load_and_unpack(
        tmp_path / "x.tdz", MemmapFormatError, rf"x\.tdz.*'{re.escape(meta)}'.*CRC"
    )


@pytest.mark.parametrize("layout", ["files", "packed"])
def test_a_bad_crc_in_a_leaf_is_refused_on_unpack(tmp_path, layout):
    raw, zf = _saved_archive(tmp_path, layout)
    _, leaf = _NAMES[layout]
    at = _payload_offset(raw, zf.getinfo(leaf))
    raw[at] ^= 0xFF
    (tmp_path / "x.tdz").write_bytes(bytes(raw))
    with pytest.raises(MemmapFormatError, match=rf"'{re.escape(leaf)}'.*CRC"):
        unpack_memmap(tmp_path / "x.tdz", tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == ["x.tdz"]


def test_an_entry_size_that_does_not_match_the_metadata_is_refused(tmp_path):
    save(_td(), tmp_path / "f", layout="files")  # archives hold the files layout
    with open(tmp_path / "f" / "a.memmap", "r+b") as f:
        f.truncate(20)
    _zip_folder(tmp_path / "f", tmp_path / "short.zip")
    _refused_by_load_and_unpack(
        tmp_path / "short.zip", LeafSizeError, r"short\.zip.*a\.memmap.*20 bytes"
    )


def test_overlapping_entries_are_refused(tmp_path):
    raw, zf = _saved_archive(tmp_path)
    info = zf.getinfo("a.memmap")
    central = zf.start_dir
    # grow the recorded sizes of a.memmap in the central directory: its data now covers the next entry
    at = raw.index(b"PK\x01\x02", central)
    while raw[at + 46 : at + 46 + 8] != b"a.memmap":
        at = raw.index(b"PK\x01\x02", at + 4)
    struct.pack_into("<2I", raw, at + 20, info.file_size + 100, info.file_size + 100)
    (tmp_path / "x.tdz").write_bytes(bytes(raw))
    _refused_by_load_and_unpack(
        tmp_path / "x.tdz", MemmapFormatError, r"x\.tdz.*overlaps entry 'a\.memmap'"
    )


def test_duplicate_entries_are_refused(tmp_path):
    with pytest.warns(UserWarning, match="Duplicate name"):
        archive = _evil(tmp_path, "a.memmap")
    with pytest.raises(MemmapFormatError, match="twice"):
        load_memmap(archive)


def test_not_a_zip_and_not_an_archive(tmp_path):
    (tmp_path / "junk.tdz").write_bytes(b"not a zip at all")
    with pytest.raises(MemmapFormatError, match="not a memory-mapped tensordict archive"):
        load_memmap(tmp_path / "junk.tdz")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("a.txt", "x")
    with pytest.raises(ValueError, match="not a memory-mapped TensorDict archive"):
        unpack_memmap(tmp_path / "other.zip", tmp_path / "out")
    with pytest.raises(ValueError, match=r"meta\.json"):
        load_memmap(tmp_path / "other.zip")


def test_unpack_over_an_existing_save_switches_atomically(tmp_path):
    _td().memmap(tmp_path / "x.tdz")
    TensorDict({"z": torch.zeros(1)}, [1]).memmap(tmp_path / "target")
    unpack_memmap(tmp_path / "x.tdz", tmp_path / "target")
    loaded = load_memmap(tmp_path / "target")
    assert set(loaded.keys()) == {"a", "n"}
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


@pytest.mark.parametrize("layout", ["files", "packed"])
@pytest.mark.parametrize("change", ["other", "shorter", "longer"])
def test_a_local_header_that_names_another_entry_is_refused(tmp_path, change, layout):
    raw, zf = _saved_archive(tmp_path, layout)
    _, leaf = _NAMES[layout]
    name = leaf.encode()
    header = zf.getinfo(leaf).header_offset
    n, m = struct.unpack_from("<2H", raw, header + 26)
    assert raw[header + 30 : header + 30 + n] == name and m >= 2
    # the local header only; the central directory still has the name, and the
    # payload stays where it is (the name and extra lengths still add up)
    if change == "other":
        raw[header + 30 : header + 30 + n] = name[:-1] + b"q"
    else:
        d = -1 if change == "shorter" else 2
        struct.pack_into("<2H", raw, header + 26, n + d, m - d)
    (tmp_path / "x.tdz").write_bytes(bytes(raw))
    _refused_by_load_and_unpack(
        tmp_path / "x.tdz", MemmapFormatError, rf"'{re.escape(leaf)}'.*local header disagrees"
    )


def test_names_are_compared_byte_for_byte_in_their_encoding():
    from td_memmap._zip import _same_name

    assert _same_name(b"n/meta.json", "n/meta.json", 0)
    assert not _same_name(b"n/meta.jso", "n/meta.json", 0x800)
    assert _same_name("é/x".encode(), "é/x", 0x800)  # UTF-8 flag set
    assert _same_name("é/x".encode("cp437"), "é/x", 0)  # no flag: cp437
    assert not _same_name("é/x".encode(), "é/x", 0)
    assert not _same_name(b"\xff/x", "\ufffd/x", 0x800)  # bytes, not what they decode to


def test_the_folders_of_an_archive_are_every_prefix_of_its_entries(tmp_path):
    from td_memmap._zip import read_index

    with zipfile.ZipFile(tmp_path / "t.zip", "w") as zf:
        for name in ("meta.json", "a/b/c/x.memmap", "a/b/y.memmap", "d/", "e/f/"):
            zf.writestr(name, b"" if name.endswith("/") else b"x")
    index = read_index(tmp_path / "t.zip")
    assert index.dirs == {"", "a", "a/b", "a/b/c", "d", "e", "e/f"}
    assert sorted(index.entries) == ["a/b/c/x.memmap", "a/b/y.memmap", "meta.json"]


@pytest.mark.parametrize("parts", [1, 3])
def test_a_zip_of_a_packed_save_unpacks_over_an_existing_save(tmp_path, monkeypatch, parts):
    import td_memmap._pack_save as pack_save

    monkeypatch.setattr(pack_save, "MIN_PART", 8)  # small leaves get data files of their own
    monkeypatch.setattr(pack_save, "usable_cpus", lambda: parts)
    td = _td()
    td["e"] = torch.zeros(3, 0)
    td["c"] = torch.ones(3, 2)
    save(td, tmp_path / "packed", num_threads=parts)  # version 2, or 3 with 3 data files
    data = [n for n in os.listdir(tmp_path / "packed") if n.endswith(".pack")]
    assert len(data) == parts
    _zip_folder(tmp_path / "packed", tmp_path / "p.zip")  # `zip -r`, as a user would
    TensorDict({"z": torch.zeros(1)}, [1]).memmap(tmp_path / "target")
    unpack_memmap(tmp_path / "p.zip", tmp_path / "target")
    loaded = load_memmap(tmp_path / "target")
    assert set(loaded.keys()) == {"a", "n", "e", "c"} and (loaded == td).all()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
