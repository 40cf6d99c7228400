"""Views as context managers: `with td.transpose(0, 1) as tdt:` writes `tdt` back into `td`.

An op whose result is another layout of the same data (the shape ops,
`flatten_keys`/`unflatten_keys`, `select`/`exclude`, `view(dtype)`, `to`) calls
`remember(source, result, undo, *args)`: the result keeps a weak reference to
its source and how to map it back (`undo(result, source, *args)` returns the
result in the source's layout). The record is a plain tuple in the result's
`_view_record` slot on the kinds that declare one (`_view_slot = True`: the dense
and lazy-stack classes, where a view op must stay cheap); other kinds keep it in
a weak side table.

`with result:` notes the result's keys. On a clean exit the result is mapped
back and every change made through it reaches the source: new and replaced
entries are written (in place when the source is locked), and keys deleted
from the result are deleted from the source. Everything is checked before the
first write, so a write-back that cannot happen (a locked source would gain or
lose a key) raises `LockedError` and changes nothing. When the block raises,
nothing is written back.

`with td.lock_():` / `with td.unlock_():` restore the previous lock state on
exit through the same `__enter__`/`__exit__` (the state is recorded by
`lock_`/`unlock_` in `dict_methods`). The latest op decides what a `with`
block does: `with view.unlock_():` restores the lock of `view` and writes
nothing back, and `view` stops being a view (as upstream, where `unlock_`
replaces the view's last op).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch

from td_core._core.contract import TensorDictContract
from td_core._core.traverse import is_nt, is_td, stack_parts
from td_core._core.utils import NO_DEFAULT
from td_core._ops.dict_methods import BEFORE_LOCK, PerObject
from td_core.errors import LockedError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "ViewsMixin",
    "remember",
    "reshaped",
    "permuted",
    "flipped",
    "rolled",
    "rotated",
    "same",
    "keys_flattened",
    "keys_unflattened",
    "dtype_viewed",
    "moved_back",
    "split_path",
    "join_path",
]

Tensor = torch.Tensor
Path = tuple[str, ...]


# (weak reference to the source, undo, undo's extra args, key_map): a plain tuple,
# built on every view op (a NamedTuple's constructor costs several times more)
_Record = tuple[
    "weakref.ref[Any]", Callable[..., Any], tuple[Any, ...], "Callable[[Path], Path] | None"
]


class _Frame(NamedTuple):
    lock_before: bool
    record: _Record | None
    entered: set[Path] | None


_VIEWS = PerObject("views._VIEWS")  # result of a view op -> _Record, for the kinds without the slot
_FRAMES = PerObject("views._FRAMES")  # TensorDict -> list of the _Frames of its open `with` blocks


def remember(
    source: Any,
    out: Any,
    undo: Callable[..., Any],
    *args: Any,
    key_map: Callable[[Path], Path] | None = None,
) -> Any:
    """Record that `out` is a view of `source` that `undo(out, source, *args)` maps back; return `out`."""
    if out is not source:
        try:
            record = (weakref.ref(source), undo, args, key_map)
        except TypeError:  # the source is not weak-referenceable: nothing to write back to
            return out
        if getattr(type(out), "_view_slot", False):
            # object's setattr: a tensorclass keeps it in its __dict__, past its field check
            object.__setattr__(out, "_view_record", record)
        else:
            try:
                _VIEWS.set(out, record)
            except TypeError:  # not weak-referenceable: no `with` block can find it
                pass
    return out


def _peek_record(td: Any) -> _Record | None:
    """`td`'s view record, if it is the result of a view op."""
    if getattr(type(td), "_view_slot", False):
        return cast("_Record | None", getattr(td, "_view_record", None))
    return cast("_Record | None", _VIEWS.get(td))


def _take_record(td: Any) -> _Record | None:
    """`td`'s view record, forgotten: the latest op decides what a `with` block does."""
    if getattr(type(td), "_view_slot", False):
        record = getattr(td, "_view_record", None)
        if record is not None:
            object.__setattr__(td, "_view_record", None)
        return cast("_Record | None", record)
    return cast("_Record | None", _VIEWS.pop(td, None))


# ------------------------------------------------------------------ the inverses
def reshaped(view: Any, source: Any) -> Any:
    """`view` reshaped to the source's batch size (undoes view/reshape/(un)flatten/(un)squeeze)."""
    return view.reshape(source.batch_size)


def permuted(view: Any, source: Any, order: tuple[int, ...]) -> Any:
    """`view` with the batch dims permuted by `order` put back."""
    del source
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return view.permute(inverse)


def flipped(view: Any, source: Any, dims: tuple[int, ...]) -> Any:
    """`view` flipped back along `dims`."""
    del source
    return view.flip(dims)


def rolled(view: Any, source: Any, shifts: tuple[int, ...], dims: Any) -> Any:
    """`view` rolled back by `shifts`."""
    del source
    back = tuple(-s for s in shifts)
    return view.roll(back[0] if dims is None else back, dims)


def rotated(view: Any, source: Any, k: int, dims: tuple[int, int]) -> Any:
    """`view` rotated back by `-k` quarter turns."""
    del source
    return view.rot90(-k, dims)


def same(view: Any, source: Any) -> Any:
    """`view` as it is (a selection of the source's keys)."""
    del source
    return view


def keys_flattened(view: Any, source: Any, separator: str) -> Any:
    """`view` with its keys joined with `separator` (undoes `unflatten_keys`)."""
    del source
    return view.flatten_keys(separator)


def keys_unflattened(view: Any, source: Any, separator: str) -> Any:
    """`view` with its keys split on `separator` (undoes `flatten_keys`)."""
    del source
    return view.unflatten_keys(separator)


def dtype_viewed(view: Any, source: Any) -> Any:
    """`view`'s leaves viewed back as the dtype of the source's leaf at the same key."""

    def back(value: Tensor, original: Any) -> Tensor:
        return value if original is None else value.view(original.dtype)

    return view.apply(back, source, default=None)


def moved_back(view: Any, source: Any) -> Any:
    """`view`'s leaves moved and cast back to the device and dtype of the source's leaf at
    the same key (new keys: to the source's device, if it has one)."""
    device = source.device

    def back(value: Tensor, original: Any) -> Tensor:
        if original is None:
            return value if device is None else value.to(device)
        return value.to(device=original.device, dtype=original.dtype)

    return view.apply(back, source, default=None)


def split_path(separator: str) -> Callable[[Path], Path]:
    """A flat key of `flatten_keys(separator)` as the nested key it came from."""
    return lambda path: tuple(part for key in path for part in key.split(separator))


def join_path(separator: str) -> Callable[[Path], Path]:
    """A nested key of `unflatten_keys(separator)` as the flat key it came from."""
    return lambda path: (separator.join(path),)


# ------------------------------------------------------------------ the write-back
def _paths(td: Any) -> set[Path]:
    """Every key of `td` at every depth (sub-TensorDicts included), as tuples."""
    return {k if type(k) is tuple else (k,) for k in td.keys(include_nested=True)}


def _same(current: Any, new: Any) -> bool:
    """Whether writing `new` over `current` would change nothing (the same memory, read the same way).

    The tensor classes may differ: a view of an `nn.Parameter` or of a memory-mapped
    tensor is a plain tensor, and the source keeps its own.
    """
    if current is new:
        return True
    if isinstance(current, Tensor) and isinstance(new, Tensor):
        return (
            current.dtype == new.dtype
            and current.device == new.device
            and current.shape == new.shape
            and current.stride() == new.stride()
            and current.data_ptr() == new.data_ptr()
            and current.requires_grad == new.requires_grad
        )
    if is_nt(current) and is_nt(new):
        return bool(current.data is new.data)
    return False


def _equal(current: Any, new: Any) -> bool:
    """Whether the tensor `new` holds exactly what `current` holds (same dtype, device, shape, grad)."""
    return (
        isinstance(current, Tensor)
        and isinstance(new, Tensor)
        and current.dtype == new.dtype
        and current.device == new.device
        and current.shape == new.shape
        and current.requires_grad == new.requires_grad
        and bool(torch.equal(current, new))
    )


def _plan(
    dst: Any,
    back: Any,
    path: Path,
    ops: list[tuple[Any, str, Any, bool, Path]],
    copied: bool = False,
) -> None:
    """The writes that make `dst` hold `back`'s entries; `LockedError` if a locked level must change.

    A lazy stack `dst` is planned member by member, so a ragged leaf is never
    stacked: `back`'s members when they line up with `dst`'s, else `back`
    unbound along `dst`'s stack dim. The leaves read that way are copies
    (`copied`), so a leaf equal to the source's is left alone rather than
    replaced by its copy.
    """
    members, back_members = stack_parts(dst), stack_parts(back)
    if members is not None:
        parts, dim = members
        if (
            back_members is not None
            and back_members[1] == dim
            and len(back_members[0]) == len(parts)
        ):
            pieces = back_members[0]  # the view's own members: leaves read as they are
        else:  # another layout (e.g. `view(-1)` across the stack dim): read each member's slice
            pieces, copied = list(back.unbind(dim)), True
        for member, piece in zip(parts, pieces):
            _plan(member, piece, path, ops, copied)
        return
    locked = dst.is_locked
    # a kind that does not hand back its stored objects (a file's reads are new tensors)
    # gave the view copies too: a leaf equal to the source's is left alone
    copied = copied or not dst._plain_nodes
    for key, value in back._items_str():
        full = (*path, key)
        current = dst._get_str(key, NO_DEFAULT)
        if is_td(value) and current is not NO_DEFAULT and is_td(current):
            _plan(current, value, full, ops, copied)
            continue
        if current is not NO_DEFAULT and (
            _same(current, value) or (copied and _equal(current, value))
        ):
            continue
        replace = current is NO_DEFAULT or is_td(current) or is_td(value)
        if locked and replace:
            raise LockedError(
                f"cannot write key {full!r} back from the view into its source: the source "
                "TensorDict is locked, so no key may be added or replaced (unlock_() it first); "
                "nothing was written"
            )
        ops.append((dst, key, value, locked, full))


def _write_back(view: Any, record: _Record, entered: set[Path]) -> None:
    source_ref, undo, args, key_map = record
    source = source_ref()
    if source is None:  # nobody can see the source any more
        return
    back = undo(view, source, *args)
    gone = entered - _paths(view)
    gone = {p for p in gone if not any(p[:i] in gone for i in range(1, len(p)))}
    if key_map is not None:
        gone = {key_map(p) for p in gone}
    present = _paths(source)
    deletions = sorted(p for p in gone if p in present)
    ops: list[tuple[Any, str, Any, bool, Path]] = []
    _plan(source, back, (), ops)
    for p in deletions:
        parent = source if len(p) == 1 else source.get(p[:-1])
        if parent.is_locked:
            raise LockedError(
                f"cannot delete key {p if len(p) > 1 else p[0]!r} from the source of the view: "
                "the source TensorDict is locked (unlock_() it first); nothing was written"
            )
    for dst, key, value, inplace, _ in ops:
        if inplace:
            dst.set_(key, value)
        else:
            dst.set(key, value)
    for p in deletions:
        if p in _paths(source):  # a deleted parent took it along
            source.del_(p if len(p) > 1 else p[0])


class ViewsMixin(TensorDictContract):
    """`with td.<view op>(...) as view:` writes back; `with td.lock_():` restores the lock."""

    __slots__ = ()

    def __enter__(self) -> Self:
        lock_before = BEFORE_LOCK.pop(self, NO_DEFAULT)
        record: _Record | None = None
        if lock_before is NO_DEFAULT:
            lock_before = self._is_locked
            record = _peek_record(self)
        else:  # lock_()/unlock_() came last, as in `with view.unlock_():`: restore the lock only
            _take_record(self)
        frame = _Frame(lock_before, record, None if record is None else _paths(self))
        frames = _FRAMES.get(self)
        if frames is None:
            _FRAMES.set(self, [frame])
        else:
            frames.append(frame)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        frames = _FRAMES.get(self)
        if not frames:
            return
        frame = frames.pop()
        if not frames:
            _FRAMES.pop(self, None)
        try:
            if exc_type is None and frame.record is not None and frame.entered is not None:
                _write_back(self, frame.record, frame.entered)
        finally:
            if frame.lock_before != self._is_locked:
                cast(Any, self)._set_lock(frame.lock_before)  # MappingMixin's
