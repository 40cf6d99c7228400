"""Appending rows to a saved folder, all or nothing.

The rows are checked against the save (keys, kinds, classes, dtypes, trailing
shapes, non-tensor values) before anything is written. The grown save is then
written as any save is (see `_save`): each leaf's new file, the old file's
bytes followed by the new rows', gets a name the current save does not use,
and the top `meta.json` commits the new generation with one atomic rename.
A failure, or a kill, at any point before that rename leaves the previous
save loadable and intact. The price: each append copies every leaf file
(`copy_file_range`, done by the kernel, and free on file systems that share
extents).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from td_core import is_tensor_collection
from td_memmap._build import raw_tree
from td_memmap._convert import to_tree
from td_memmap._load import load_tree
from td_memmap._meta import DirEntry, FolderMeta, NonTensorEntry, parse_folder
from td_memmap._options import SaveOptions
from td_memmap._save import Grown, save_tree
from td_memmap._tree import KIND_LAZY, Node, NonTensorLeaf

__all__ = ["append_memmap"]


class _Saved:
    """A saved leaf, as the append sees it before growing it."""

    __slots__ = ("path", "dtype", "shape")

    def __init__(
        self, path: str, dtype: torch.dtype, shape: tuple[int, ...], offset: int = -1
    ) -> None:
        # `offset` (where a packed save's leaf lies) is not needed: appends read the save whole
        self.path, self.dtype, self.shape = path, dtype, shape


def _name(where: tuple[str, ...]) -> str:
    return repr(where[0] if len(where) == 1 else where)


def _same_value(saved: Any, given: Any) -> bool:
    try:
        return bool(saved == given) and type(saved) is type(given)
    except Exception:  # values whose == fails or is ambiguous are not equal
        return False


def _check_non_tensor(saved: NonTensorLeaf, given: Any, where: tuple[str, ...]) -> None:
    if saved.stacked:
        raise ValueError(
            f"cannot append to entry {_name(where)}: it is a stack of non-tensor values, which "
            "cannot grow"
        )
    if not isinstance(given, NonTensorLeaf):
        raise ValueError(
            f"cannot append to entry {_name(where)}: it holds the non-tensor value "
            f"{saved.value!r}, the rows hold a {type(given).__name__}"
        )
    values = np.asarray(given.value, dtype=object).reshape(-1) if given.stacked else [given.value]
    for bad in values:
        if _same_value(saved.value, bad):
            continue
        raise ValueError(
            f"cannot append to entry {_name(where)}: its non-tensor value {saved.value!r} stays as "
            f"saved, so the rows must hold the same value, not {bad!r}"
        )


def _grow(saved: Node, rows: Node, where: tuple[str, ...], n: int) -> Node:
    """The grown tree: `saved` with `rows` appended, after checking they match."""
    what = f"entry {_name(where)}" if where else "the saved TensorDict"
    if saved.kind == KIND_LAZY or rows.kind == KIND_LAZY:
        raise ValueError(
            f"cannot append to {what}: lazy stacks cannot grow (saved: {saved.kind}, rows: "
            f"{rows.kind})"
        )
    if saved.kind != rows.kind or saved.class_name != rows.class_name:
        raise ValueError(
            f"cannot append to {what}: it is a {saved.class_name or saved.kind}, the rows are a "
            f"{rows.class_name or rows.kind}"
        )
    if tuple(rows.batch_size[1:]) != tuple(saved.batch_size[1:]):
        raise ValueError(
            f"cannot append rows of batch size {list(rows.batch_size)} to {what}, of batch size "
            f"{list(saved.batch_size)}: only the first dim may differ"
        )
    if set(saved.entries) != set(rows.entries):
        raise ValueError(
            f"cannot append rows with keys {sorted(rows.entries)} to {what}, which has keys "
            f"{sorted(saved.entries)}"
        )
    out = saved.empty_like()
    out.batch_size = (saved.batch_size[0] + n, *saved.batch_size[1:])
    for key, value in saved.entries.items():
        given = rows.entries[key]
        here = (*where, key)
        if isinstance(value, _Saved):
            if (
                not isinstance(given, torch.Tensor)
                or given.dtype != value.dtype
                or tuple(given.shape[1:]) != value.shape[1:]
            ):
                got = (
                    f"{given.dtype} of shape {list(given.shape)}"
                    if isinstance(given, torch.Tensor)
                    else f"a {type(given).__name__}"
                )
                raise ValueError(
                    f"cannot append rows of {got} to entry {_name(here)}, of "
                    f"{value.dtype} and shape {list(value.shape)}: the dtype and every dim but "
                    "the first must match"
                )
            if given.layout != torch.strided:
                raise TypeError(f"entry {_name(here)}: only strided tensors can be appended")
            shape = (value.shape[0] + n, *value.shape[1:])
            out.entries[key] = Grown(value.path, value.dtype, shape, given)  # type: ignore[assignment]
        elif isinstance(value, Node):
            if not isinstance(given, Node):
                raise ValueError(
                    f"cannot append to entry {_name(here)}: it is a TensorDict, the rows hold a "
                    f"{type(given).__name__}"
                )
            out.entries[key] = _grow(value, given, here, n)
        else:
            assert isinstance(value, NonTensorLeaf)
            _check_non_tensor(value, given, here)
            out.entries[key] = NonTensorLeaf(value.value, out.batch_size, False)
    return out


def _joined(grown: Node, loaded: Node) -> Node:
    """`grown` with each `Grown` leaf made whole: the loaded rows, then the new ones."""
    out = grown.empty_like()
    for key, value in grown.entries.items():
        if isinstance(value, Grown):
            old = loaded.entries[key]
            assert isinstance(old, torch.Tensor)
            value = torch.cat([torch.Tensor._make_subclass(torch.Tensor, old), value.tail])
        elif isinstance(value, Node):
            value = _joined(value, loaded.entries[key])  # type: ignore[arg-type]  # the same tree
        out.entries[key] = value
    return out


def _shares(meta: FolderMeta) -> bool:
    """Whether the save keeps its non-tensor values in shared files (`share_non_tensor=True`)."""
    for entry in meta.entries:
        if type(entry) is NonTensorEntry and entry.shared is not None:
            return True
        if type(entry) is DirEntry and entry.folder is not None and _shares(entry.folder):
            return True
    return any(_shares(member) for member in meta.members)


def append_memmap(
    prefix: str | os.PathLike[str], rows: Any, *, allow_pickle: bool | None = None
) -> None:
    """Append `rows` to the save in the folder `prefix`, along the first batch dim.

    All or nothing: `rows` is checked against the save first (the same keys,
    kinds and tensorclasses; for each tensor the same dtype and every dim but
    the first; non-tensor values equal to the saved ones, which stay as they
    are), and the grown save is then committed as any save is, by one atomic
    rename of the top `meta.json`. A failure or a kill before that leaves the
    previous save loadable and intact; after it, `load_memmap` sees the new
    rows. Each leaf's new rows go into a new file that starts with a copy of
    the old one (copied by the kernel), so an append costs a copy of the
    saved data. Processes that had loaded the save keep the old rows. Use one
    writer at a time. A packed save (format version 2 or 3) gets new data
    files holding the old rows and the new, built in memory.

    Args:
        prefix: a folder written by `memmap`/`save` (an archive cannot grow:
            unpack it first with `unpack_memmap`).
        rows: a TensorDict or tensorclass instance with at least one batch dim.
        allow_pickle: the save holds pickled non-tensor values: unpickle them
            to compare them with the rows' (trusted folders only).

    Raises:
        TypeError: `rows` is not a TensorDict or a tensorclass instance.
        ValueError: `prefix` is not a saved folder, or `rows` does not match
            the save (naming the key, dtypes and shapes); lazy stacks and
            stacks of non-tensor values cannot grow.
        PickleNotAllowedError: (a `ValueError` and a `RuntimeError`) the save holds pickled
            values and `allow_pickle` is not True.

    Example:
        ```python
        import tempfile, torch
        from td_core import TensorDict
        from td_memmap import append_memmap, load_memmap

        folder = tempfile.mkdtemp()
        TensorDict(a=torch.zeros(3, 2), batch_size=[3]).memmap(folder)
        append_memmap(folder, TensorDict(a=torch.ones(2, 2), batch_size=[2]))
        assert load_memmap(folder)["a"].sum(-1).tolist() == [0.0, 0.0, 0.0, 2.0, 2.0]
        ```
    """
    if not is_tensor_collection(rows) or isinstance(rows, dict):
        raise TypeError(
            f"rows must be a TensorDict or a tensorclass instance, got {type(rows).__name__}"
        )
    root = os.path.abspath(os.fspath(prefix))
    if not os.path.isdir(root):
        why = (
            "an archive cannot grow: unpack it with unpack_memmap first"
            if os.path.isfile(root)
            else "it does not exist"
        )
        raise ValueError(
            f"append_memmap appends to a folder written by memmap or save; {root!r} is not one "
            f"({why})"
        )
    meta = parse_folder(root)
    saved = raw_tree(meta, _Saved, allow_pickle=bool(allow_pickle))
    given = to_tree(rows)
    if not saved.batch_size or not given.batch_size:
        raise ValueError(
            "append_memmap appends along the first batch dim, which the save (batch size "
            f"{list(saved.batch_size)}) and the rows (batch size {list(given.batch_size)}) must "
            "both have"
        )
    grown = _grow(saved, given, (), given.batch_size[0])  # checks the rows first
    if meta.pack is not None:  # a packed save: a new data file with the grown leaves
        save_tree(_joined(grown, load_tree(root)), root, SaveOptions(layout="packed"))
        return
    save_tree(
        grown,
        root,
        SaveOptions(allow_pickle=bool(allow_pickle), share_non_tensor=_shares(meta)),
    )
