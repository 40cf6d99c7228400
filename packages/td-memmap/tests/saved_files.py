"""Helpers of td-memmap's tests that read, or tamper with, the files of a save.

`conftest.py` puts this folder on `sys.path` (the tests run with
`--import-mode=importlib`), so test modules import them as `from saved_files import ...`.
"""

import json
import os
from pathlib import Path
from typing import Any

import pytest

from td_memmap import MemmapFormatError, ReadOnlyMemmapError, UnsafePathError, load_memmap, save


def read_meta(folder: str | os.PathLike) -> dict[str, Any]:
    """The parsed `meta.json` of `folder`."""
    return json.loads((Path(folder) / "meta.json").read_text())


def edit_meta(folder: str | os.PathLike, fn: Any) -> None:
    """Rewrite `folder`'s `meta.json` after `fn(meta)` changed it in place (no other file)."""
    meta = read_meta(folder)
    fn(meta)
    (Path(folder) / "meta.json").write_text(json.dumps(meta))


def meta_entry(meta: dict[str, Any], key: str) -> dict[str, Any]:
    """The record of entry `key` in a parsed metadata file (to read or edit)."""
    return next(e for e in meta["entries"] if e["key"] == key)


def file_contents(folder: str | os.PathLike) -> dict[str, bytes]:
    """Every file below `folder`, by its path relative to `folder`, with its bytes."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    return out


def saved_in(tmp_path: Path, td: Any, **kwargs: Any) -> Path:
    """The folder `tmp_path / "save"`, where `td` was just saved (`save(td, folder, **kwargs)`)."""
    prefix = tmp_path / "save"
    save(td, prefix, **kwargs)
    return prefix


def check_folder_in_place_of(saved: Path, name: str) -> None:
    """Put a folder where the save's file `name` was: loading must refuse it, naming the rule."""
    os.remove(saved / name)
    os.mkdir(saved / name)
    with pytest.raises(MemmapFormatError, match="not a regular file"):
        load_memmap(saved)


def check_refused_untouched(saved: Path, error: type[Exception], match: str) -> None:
    """Loading `saved` raises `error` (its message matching `match`) and changes no file."""
    before = file_contents(saved)
    with pytest.raises(error, match=match):
        load_memmap(saved)
    assert file_contents(saved) == before


def check_read_only_load(saved: Path, key: str) -> None:
    """A `mode="r"` load of `saved` refuses an in-place write to `key`; no file changes."""
    before = file_contents(saved)
    with pytest.raises(ReadOnlyMemmapError):
        load_memmap(saved, mode="r")[key].add_(1)
    assert file_contents(saved) == before


def check_link_outside_refused(saved: Path, outside: Path, name: str) -> None:
    """Move the save's file `name` to `outside` and link it back: loading must refuse the link."""
    os.replace(saved / name, outside)
    os.symlink(outside, saved / name)
    with pytest.raises(UnsafePathError, match="leaves the saved folder"):
        load_memmap(saved)
