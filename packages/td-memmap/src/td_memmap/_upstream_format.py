"""Folders saved by upstream `tensordict`'s `memmap`: recognised and translated, JSON only.

Upstream writes one `meta.json` per folder: its entries by key (a leaf as
`{"dtype": "torch.float32", "shape": [...], "device": ..., "is_nested": ...}`,
a sub-folder as `{"type": "TensorDict"}`), plus `"shape"`, `"device"`,
`"_type"` (the `str` of the class) and, in newer versions, `"_format_version"`,
`"_class"` and `"_names"`. A leaf's data is `<key>.memmap`, the key encoded for
the file system (older versions used the key itself). A non-tensor value is a
sub-folder whose `meta.json` holds it under `"data"` (when JSON could hold it).

`translate` turns such a file into td's own schema (see `_meta`), which then
goes through every check td's saves go through. Nothing here imports a class
named in the file, and nothing is unpickled: what td cannot read without that
(tensorclasses, lazy stacks, nested tensors, pickled values) is refused with a
clear error.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from td_memmap._format import DTYPES, check_component, value_to_json
from td_memmap._meta_ctx import FolderContext
from td_memmap._meta_types import DirEntry
from td_memmap._tree import KIND_TD

__all__ = ["from_upstream", "is_upstream", "translate", "upstream_file_names"]

# the classes a folder or a value of upstream's may be, by the `str` of the class
_TD_TYPES = frozenset(
    {"<class 'tensordict._td.TensorDict'>", "<class 'tensordict.tensordict.TensorDict'>"}
)
_NT_DATA = "NonTensorData"
_NT_STACK = "NonTensorStack"
_NT_TYPES = {
    f"<class 'tensordict.tensorclass.{_NT_DATA}'>": _NT_DATA,
    f"<class 'tensordict.tensorclass.{_NT_STACK}'>": _NT_STACK,
}
_TYPE_TEXT = re.compile(r"<class '[A-Za-z_][\w.]*'>")
_RESERVED = frozenset({"shape", "device", "_type", "_class", "_format_version", "_names"})
_NEWEST = 1  # the newest `_format_version` of upstream's that this reads
# characters upstream encodes as %XX in file names
_UNSAFE = set('/<>:"|?*\\ \0%') | {chr(i) for i in range(32)} | {chr(127)}
_ENCODE = str.maketrans({c: f"%{ord(c):02X}" for c in _UNSAFE})

Fail = Callable[[str], Exception]


def from_upstream(
    data: dict[str, Any], ctx: FolderContext, own: bool, open_meta: Callable[[Any], Any]
) -> dict[str, Any]:
    """`data`, the metadata of `ctx`'s folder, as td's metadata; unchanged if it is td's.

    Args:
        own: `data` is the folder's own file (not an index record or inline).
        open_meta: the parsed `meta.json` of a parsing context (`_meta._open_meta`).

    Marks `ctx` as upstream's and refuses a save that mixes the two writers.
    """
    upstream = own and is_upstream(data)
    if ctx.depth and upstream != ctx.upstream:  # one writer per save: never a mix
        raise ctx.fail(
            "saved by upstream tensordict inside a td-memmap save"
            if upstream
            else "a td-memmap folder inside a folder saved by upstream tensordict"
        )
    if not upstream:
        return data

    def exists(name: str) -> bool:
        path = ctx.folder + os.sep + name
        try:
            _ = os.lstat(path) if ctx.files is None else ctx.files.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def read_sub(name: str, key: str) -> Any:
        return open_meta(ctx.child(name, key, "folder", ctx.parent_batch, False, DirEntry(key)))

    ctx.upstream = True
    ctx.index = None
    return translate(data, fail=ctx.fail, exists=exists, read_sub=read_sub)


def is_upstream(data: dict[str, Any]) -> bool:
    """Whether the parsed `meta.json` is upstream's: a `_type` naming a class, no td `format`.

    td's files always hold `"format": "td-memmap"`; in upstream's a key
    `"format"` can only be an entry (an object).
    """
    kind = data.get("_type")
    if type(kind) is not str or _TYPE_TEXT.fullmatch(kind) is None:
        return False
    return "format" not in data or type(data["format"]) is dict


def upstream_file_names(key: str) -> tuple[str, ...]:
    """The stems upstream may have given `key`'s file or folder: encoded first, then the raw key."""
    if not key:
        return ("%",)
    if key in (".", ".."):
        return ("%2E" * len(key),)
    encoded = key.translate(_ENCODE)
    return (encoded,) if encoded == key else (encoded, key)


def translate(
    data: dict[str, Any],
    *,
    fail: Fail,
    exists: Callable[[str], bool],
    read_sub: Callable[[str, str], Any],
) -> dict[str, Any]:
    """Upstream's metadata `data` of one folder as td's metadata of the same folder.

    Args:
        fail: the error to raise, naming the metadata file, for a message.
        exists: whether a plain name exists in the folder (nothing is followed).
        read_sub: the parsed `meta.json` of sub-folder `name` (for entry `key`),
            after checking the sub-folder stays inside the save.
    """
    kind = data["_type"]
    if kind not in _TD_TYPES:
        raise fail(
            f"saved by upstream tensordict as {kind}: td reads upstream's TensorDict folders "
            "(with nested TensorDicts and JSON non-tensor values) only; load it with upstream "
            "tensordict and save it again with td"
        )
    version = data.get("_format_version", 0)
    if type(version) is not int or not 0 <= version <= _NEWEST:
        raise fail(
            f"upstream tensordict '_format_version' {version!r} is not one td reads (0 to {_NEWEST})"
        )
    batch = data.get("shape")
    if type(batch) is not list or not all(type(d) is int and d >= 0 for d in batch):
        raise fail(f"upstream 'shape' {batch!r} is not a list of non-negative ints")
    device = _device(data.get("device"), "the folder", fail)
    entries = []
    for key, raw in data.items():
        if key in _RESERVED:
            continue
        if type(raw) is not dict:
            raise fail(f"upstream entry {key!r} is a {type(raw).__name__}, expected an object")
        if "type" in raw:
            entries.append(_collection(key, raw["type"], batch, fail, exists, read_sub))
        else:
            entries.append(_tensor(key, raw, fail, exists))
    return {
        "format": "td-memmap",
        "version": 1,
        "kind": KIND_TD,
        "byteorder": sys.byteorder,  # upstream writes the machine's byte order, and never says
        "batch_size": batch,
        "device": device,
        "entries": entries,
        "names": data.get("_names"),  # checked as td's own "names" field
    }


def _device(device: object, what: str, fail: Fail) -> str | None:
    if device is None or device == "None":
        return None
    if device == "cpu":
        return "cpu"
    raise fail(
        f"{what} was saved by upstream tensordict on device {device!r}: td maps saved data on "
        "the CPU only (load it, then move it with .to(device))"
    )


def _file(key: str, suffix: str, exists: Callable[[str], bool]) -> str:
    names = [stem + suffix for stem in upstream_file_names(key)]
    for name in names:
        if check_component(name) is None and exists(name):
            return name
    return names[0]  # missing (or unsafe): the checks that follow name it


def _tensor(
    key: str, raw: dict[str, Any], fail: Fail, exists: Callable[[str], bool]
) -> dict[str, Any]:
    name = raw.get("dtype")
    dtype = name[len("torch.") :] if type(name) is str and name.startswith("torch.") else None
    if dtype not in DTYPES:
        raise fail(f"upstream entry {key!r} has dtype {name!r}, not one td maps")
    if raw.get("is_nested", False) is not False:
        raise fail(
            f"upstream entry {key!r} is a nested (jagged) tensor: td does not read upstream's "
            "nested tensor files"
        )
    _device(raw.get("device"), f"entry {key!r}", fail)
    unknown = set(raw) - {"dtype", "shape", "device", "is_nested"}
    if unknown:
        raise fail(f"upstream entry {key!r} has unknown fields {sorted(unknown)}")
    file = _file(key, ".memmap", exists)
    return {"key": key, "type": "tensor", "dtype": dtype, "shape": raw.get("shape"), "file": file}


def _collection(
    key: str,
    kind: object,
    batch: list[int],
    fail: Fail,
    exists: Callable[[str], bool],
    read_sub: Callable[[str, str], Any],
) -> dict[str, Any]:
    folder = _file(key, "", exists)
    if kind == "TensorDict":
        return {"key": key, "type": "tensordict", "dir": folder}
    if kind not in (_NT_DATA, _NT_STACK):
        raise fail(
            f"upstream entry {key!r} is a {kind!r}: td reads upstream's nested TensorDicts and "
            "JSON non-tensor values only; load it with upstream tensordict and save it again with td"
        )
    sub = read_sub(folder, key)
    if type(sub) is not dict or _NT_TYPES.get(str(sub.get("_type"))) != kind:
        raise fail(f"upstream entry {key!r}: the metadata of {folder!r} is not a {kind}'s")
    if "data" not in sub:
        raise fail(
            f"upstream entry {key!r}: its value was saved with pickle, which td never unpickles "
            "from upstream's files; load it with upstream tensordict and save it again with td"
        )
    stacked = kind == _NT_STACK
    if stacked:
        stack_dim = sub.get("stack_dim", 0)
        if stack_dim != 0:
            raise fail(f"upstream entry {key!r} is stacked on dim {stack_dim!r}; td reads dim 0")
        _device(sub.get("device"), f"entry {key!r}", fail)
    elif sub.get("_metadata") is not None:
        raise fail(f"upstream entry {key!r} has '_metadata' {sub['_metadata']!r}: td keeps none")
    return {
        "key": key,
        "type": "non_tensor",
        "batch_size": batch,
        "stacked": stacked,
        "encoding": "json",
        "value": value_to_json(sub["data"]),
    }
