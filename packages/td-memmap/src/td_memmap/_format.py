"""The fixed vocabulary of the on-disk format: dtype names, file names, JSON values.

Nothing here touches the disk. The metadata schema itself lives in `_meta`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "FILES_VERSION",
    "PACKED_VERSION",
    "SPLIT_VERSION",
    "PACK_SUFFIX",
    "PACK_NAME",
    "PACK_ALIGN",
    "META_NAME",
    "TMP_PREFIX",
    "MAX_DIMS",
    "LEAF_SUFFIX",
    "PICKLE_SUFFIX",
    "SHARED_SUFFIX",
    "DTYPES",
    "VIEWED",
    "dtype_name",
    "dtype_from_name",
    "encode_key",
    "file_stems",
    "check_component",
    "value_to_json",
    "value_from_json",
    "exact_json",
    "object_array",
]

FORMAT_NAME = "td-memmap"
FORMAT_VERSION = 3  # the newest version this reads
FILES_VERSION = 1  # one file per leaf, one folder per sub-TensorDict
PACKED_VERSION = 2  # one data file and one metadata file for the whole tree
SPLIT_VERSION = 3  # packed, the leaves in several data files (written by several threads)
PACK_SUFFIX = ".pack"  # the data file of a packed save; stems have no ".": never a leaf's name
PACK_NAME = "data" + PACK_SUFFIX
PACK_ALIGN = 64  # every leaf of a packed data file starts at a multiple of this
META_NAME = "meta.json"
TMP_PREFIX = ".td-tmp-"  # every temporary file starts with this; encoded keys never start with "."
LEAF_SUFFIX = ".memmap"  # as upstream names its leaf files
MAX_DIMS = 64  # the most dims a saved or mapped tensor may have
PICKLE_SUFFIX = ".pkl"
SHARED_SUFFIX = ".nt.json"  # a shared non-tensor value; stems have no ".": never "meta.json"

# dtypes whose storage is plain bytes, by the name `str(dtype)` gives without "torch.".
# Looked up with getattr so older torch versions simply have fewer of them.
_DTYPE_NAMES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "bits8",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
    *(f"uint{n}" for n in range(1, 8)),
    *(f"int{n}" for n in range(1, 8)),
)

#: Every dtype a leaf file may hold, by its on-disk name.
DTYPES: dict[str, torch.dtype] = {
    name: dt for name in _DTYPE_NAMES if isinstance(dt := getattr(torch, name, None), torch.dtype)
}

# dtypes numpy has no type for, by name: the torch dtype and the integer dtype of the
# same width that formats going through numpy (HDF5, zarr) store its bits as
VIEWED: dict[str, tuple[torch.dtype, torch.dtype]] = {
    "bfloat16": (torch.bfloat16, torch.int16),
    "float8_e4m3fn": (torch.float8_e4m3fn, torch.uint8),
    "float8_e5m2": (torch.float8_e5m2, torch.uint8),
}

_NAMES: dict[torch.dtype, str] = {dt: name for name, dt in DTYPES.items()}


def dtype_name(dtype: torch.dtype, *, key: object = None) -> str:
    """The on-disk name of `dtype`; `TypeError` for dtypes with no raw storage (quantized)."""
    try:
        return _NAMES[dtype]
    except KeyError:
        where = f" (entry {key!r})" if key is not None else ""
        raise TypeError(
            f"dtype {dtype} cannot be memory-mapped{where}: supported dtypes are {sorted(DTYPES)}"
        ) from None


def dtype_from_name(name: object) -> torch.dtype | None:
    """The dtype called `name` on disk, or `None` if the name is not in the table."""
    return DTYPES.get(name) if isinstance(name, str) else None


# ---------------------------------------------------------------------------------------------
# key -> file name

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WINDOWS_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"{p}{i}" for p in ("COM", "LPT") for i in range(1, 10)]
)
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")  # keys that are their own stem (before the checks below)
_MAX_STEM = 120  # leaves room for suffixes in the usual 255-byte name limit


def encode_key(key: str) -> str:
    """A file-name stem for `key`: safe on every common file system, never empty.

    Letters, digits, `_` and `-` are kept; every other byte of the UTF-8
    encoding (`.`, `/`, `%`, spaces, NUL, ...) becomes `%XX`. The empty
    key is `%`. Long keys are cut and suffixed with a hash. The stem never
    contains `.`, so suffixes such as `.memmap` cannot collide with a key.

    Examples:
        >>> encode_key("weight")
        'weight'
        >>> encode_key("../evil")
        '%2E%2E%2Fevil'
    """
    if not key:
        return "%"
    if _PLAIN.fullmatch(key):  # the common case, at a tenth of the cost: nothing to encode
        out = key
    else:
        raw = key.encode("utf-8", "surrogatepass")
        out = "".join(chr(b) if chr(b) in _SAFE else f"%{b:02X}" for b in raw)
    if len(out) <= 4 and out.upper() in _WINDOWS_RESERVED:  # all 3 or 4 letters long
        out = f"%{ord(out[0]):02X}{out[1:]}"
    if len(out) > _MAX_STEM:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out = f"{out[: _MAX_STEM - 17]}~{digest}"
    return out


def file_stems(keys: Iterable[str]) -> dict[str, str]:
    """Encoded stems for the keys of one folder, unique even on case-insensitive file systems.

    A stem that differs from an earlier one only by case gets a `.N` suffix
    (keys never produce a `.`, so this cannot collide either).
    """
    seen: set[str] = set()
    stems: dict[str, str] = {}
    for key in keys:
        stem = encode_key(key)
        candidate, low, n = stem, stem.lower(), 0
        while low in seen:
            n += 1
            candidate = f"{stem}.{n}"
            low = candidate.lower()
        seen.add(low)
        stems[key] = candidate
    return stems


def check_component(name: object) -> str | None:
    """Why `name` is not a safe single path component, or `None` if it is.

    Safe: a non-empty printable string of at most 255 UTF-8 bytes, not starting
    with `.` (so neither `.`, `..` nor a hidden or temporary file), with no
    path separator, drive separator or NUL.
    """
    if type(name) is not str:
        return f"expected a string, got {type(name).__name__}"
    if not name:
        return "empty"
    if name[0] == ".":
        return "starts with '.' (a relative reference, hidden or temporary name)"
    if not name.isprintable() or "/" in name or "\\" in name or ":" in name:
        return "contains a path separator or a non-printable character"
    if len(name) > 63 and len(name.encode("utf-8", "surrogatepass")) > 255:
        return "longer than 255 bytes"
    return None


# ---------------------------------------------------------------------------------------------
# non-tensor values <-> JSON

_TAG = "$td"
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def value_to_json(value: Any) -> Any:
    """`value` as JSON-compatible data, reversibly; `TypeError` if it needs pickle.

    Exact types only (`None`, `bool`, `int`, `float`, `complex`, `str`,
    `bytes`, `list`, `tuple`, `dict`), so a value loads back as the same type.
    Tuples, complex numbers, bytes, non-finite floats and dicts with non-string
    keys are tagged objects `{"$td": kind, "v": ...}`.
    """
    try:
        return _to_json(value)
    except RecursionError:
        raise TypeError("value is nested too deeply (or contains itself)") from None


def _to_json(value: Any) -> Any:
    t = type(value)
    if value is None or t is bool or t is str or t is int:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        return {
            _TAG: "float",
            "v": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"),
        }
    if t is list:
        return [_to_json(v) for v in value]
    if t is tuple:
        return {_TAG: "tuple", "v": [_to_json(v) for v in value]}
    if t is complex:
        return {_TAG: "complex", "v": [_to_json(value.real), _to_json(value.imag)]}
    if t is bytes:
        return {_TAG: "bytes", "v": base64.b64encode(value).decode("ascii")}
    if t is dict:
        if all(type(k) is str for k in value):
            out = {k: _to_json(v) for k, v in value.items()}
            return {_TAG: "dict", "v": out} if _TAG in value else out
        return {_TAG: "items", "v": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    raise TypeError(f"a value of type {t.__module__}.{t.__qualname__} has no JSON form")


def exact_json(value: Any, *, same_type: bool = False) -> str | None:
    """`value` as plain JSON text if reading that text gives `value` back, else None.

    Unlike `value_to_json` nothing is tagged: a tuple, a NaN or bytes give None.
    With `same_type`, the value read back must also have `value`'s exact type
    (an `IntEnum` member, equal to its int, then gives None).
    """
    try:
        text = json.dumps(value)
        back = json.loads(text)
    except (TypeError, ValueError):
        return None
    if back != value or (same_type and type(back) is not type(value)):
        return None
    return text


def value_from_json(data: Any) -> Any:
    """Inverse of `value_to_json`; `ValueError` on anything it could not have written."""
    if data is None or type(data) in (bool, str, int, float):
        return data
    if type(data) is list:
        return [value_from_json(v) for v in data]
    if type(data) is not dict:
        raise ValueError(f"unexpected JSON value of type {type(data).__name__}")
    if _TAG not in data:
        return {k: value_from_json(v) for k, v in data.items()}
    tag, payload = data[_TAG], data.get("v")
    if set(data) != {_TAG, "v"}:
        raise ValueError(f"tagged value has keys {sorted(data)}, expected ['$td', 'v']")
    if tag == "float" and payload in _FLOATS:
        return _FLOATS[payload]
    if tag == "tuple" and type(payload) is list:
        return tuple(value_from_json(v) for v in payload)
    if tag == "complex" and type(payload) is list and len(payload) == 2:
        real, imag = (value_from_json(v) for v in payload)
        if type(real) is not float or type(imag) is not float:
            raise ValueError("'complex' value must hold two floats")
        return complex(real, imag)
    if tag == "bytes" and type(payload) is str:
        return base64.b64decode(payload.encode("ascii"), validate=True)
    if tag == "dict" and type(payload) is dict:
        return {k: value_from_json(v) for k, v in payload.items()}
    if tag == "items" and type(payload) is list:
        out = {}
        for item in payload:
            if type(item) is not list or len(item) != 2:
                raise ValueError("'items' value must hold [key, value] pairs")
            out[value_from_json(item[0])] = value_from_json(item[1])
        return out
    raise ValueError(f"unknown tagged value {tag!r}")


def object_array(nested: Any, shape: tuple[int, ...]) -> np.ndarray:
    """An object array of `shape` from nested lists, without numpy guessing the depth.

    Raises:
        ValueError: `nested` is not nested lists of exactly `shape`.
    """
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    items: list[Any] = [nested]
    for depth, size in enumerate(shape):
        nxt: list[Any] = []
        for item in items:
            if type(item) is not list or len(item) != size:
                raise ValueError(
                    f"stacked value does not have batch_size {list(shape)} (level {depth})"
                )
            nxt.extend(item)
        items = nxt
    for i, item in enumerate(items):
        flat[i] = item
    return out
