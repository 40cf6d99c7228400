"""Exceptions raised by td.

Each class also subclasses the builtin that upstream tensordict raises for the
same mistake, so `except RuntimeError` or `except KeyError` clauses written
for upstream keep working.
"""

from __future__ import annotations

__all__ = [
    "TDError",
    "KeyNotFoundError",
    "BatchSizeError",
    "LockedError",
    "MissingEntryError",
    "DeviceError",
    "DTypeError",
    "ExtensionMissingError",
    "DimError",
    "NotAPipeError",
    "NotConsolidatedError",
    "OptionsConflictError",
    "NotATensorDictError",
    "KeyTypeError",
    "GradLeafWriteError",
    "IndexTypeError",
    "TruthValueError",
    "NotDenseError",
    "ExclusiveKeysError",
    "FieldError",
]


class TDError(Exception):
    """Base class of every td exception."""


class KeyNotFoundError(TDError, KeyError):
    """A key is not in the TensorDict.

    `KeyError` quotes its message with `repr`; this one prints it as written.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class BatchSizeError(TDError, ValueError, RuntimeError):
    """A batch size does not fit an entry, or two batch sizes disagree."""


class MissingEntryError(KeyNotFoundError, RuntimeError):
    """An in-place copy names an entry the destination lacks (upstream raises `RuntimeError`)."""


class LockedError(TDError, RuntimeError):
    """A write was attempted on a locked TensorDict."""


def _locked_new_key(key: object) -> LockedError:
    """The error for setting (not writing in place) `key` on a locked TensorDict.

    It carries upstream's words, which users grep for, and names the two fixes.
    """
    return LockedError(
        f"Cannot modify locked TensorDict. For in-place modification of key {key!r}, use set_() "
        "or set(..., inplace=True); to add or replace it, unlock_() the TensorDict first"
    )


class DeviceError(TDError, ValueError, RuntimeError):
    """A device could not be parsed, or entries to combine are on different devices (torch
    raises `RuntimeError` for these)."""


class DTypeError(TDError, TypeError, RuntimeError):
    """A write needs the value's dtype to match the entry's (torch raises `RuntimeError`)."""


class ExtensionMissingError(TDError, ImportError):
    """A method needs a sibling package (td-memmap, ...) that is not installed."""


class DimError(TDError, IndexError, ValueError, RuntimeError):
    """A batch dim is out of range, repeated, or of the wrong count for the op.

    Upstream raises `IndexError`, `ValueError` or `RuntimeError` for
    these depending on the op; this is an instance of all three.
    """


class NotAPipeError(TDError, TypeError, AttributeError):
    """`asend`/`arecv` got an object without the pipe method.

    Upstream calls the method and fails with `AttributeError`; this is an
    instance of that too.
    """


class NotConsolidatedError(TDError, AttributeError):
    """`recv(consolidated=True)` / `irecv(consolidated=True)` on a TensorDict that is not consolidated.

    Upstream looks up the missing consolidated storage and fails with
    `AttributeError`; this is an instance of that too.
    """


class OptionsConflictError(TDError, ValueError, RuntimeError):
    """Two options of a call cannot be used together (e.g. `from_modules(lazy_stack=True, as_module=True)`).

    Upstream raises `RuntimeError` for these; this is an instance of that and
    of `ValueError`.
    """


class NotATensorDictError(KeyNotFoundError, ValueError):
    """A nested key goes through a leaf: `td["a", "b"]` where `td["a"]` is a tensor.

    Upstream raises `ValueError` here (and `KeyError` for a missing key);
    this is an instance of both.
    """


class KeyTypeError(TDError, TypeError, RuntimeError):
    """An object that is not a key (a `str` or a tuple of `str`) was used as one: `0 in td`.

    Upstream raises `TypeError` from a keys view and `RuntimeError` from
    `in td`; this is an instance of both.
    """


class GradLeafWriteError(TDError, ValueError, RuntimeError):
    """An in-place write (`apply(inplace=True)`, `stack(..., out=)`) into a leaf that requires grad.

    Autograd forbids changing such a leaf in place; run the write under
    `torch.no_grad()`. Upstream raises `ValueError` or `RuntimeError` for these.
    """


class IndexTypeError(TDError, IndexError, TypeError):
    """An index of a type that cannot index batch dims (a `set`, a `float`, ...).

    torch raises `IndexError` for these and upstream's lazy stacks `TypeError`;
    this is an instance of both.
    """


class TruthValueError(TDError, ValueError, RuntimeError):
    """`bool(td)`: a TensorDict has no single truth value.

    Upstream and torch raise `RuntimeError`, numpy `ValueError`; this is both.
    """


class NotDenseError(TDError, RuntimeError):
    """An op a write-through view cannot do: its result could not write through.

    A sub-TensorDict (`td._get_sub_tensordict(idx)`) or a lazy legacy view
    (`permute`, `squeeze`, ... under `set_lazy_legacy(True)`) sends its writes
    to its source. A shape op on it (outside legacy mode) would give a
    TensorDict whose writes could not reach that source, and an in-place
    `select`/`exclude` would delete the source's entries: both raise this
    (a `RuntimeError`, as upstream). Make it dense first with `to_tensordict()`.
    """


class ExclusiveKeysError(TDError, RuntimeError):
    """A conversion that would drop the keys only some members of a lazy stack hold.

    `to_dict()` and `numpy()` give one value per key for the whole stack, so a key that
    some members lack has none: they raise this (a `RuntimeError`, as upstream) rather
    than leave it out. Read the members (`td.tensordicts`), or `select` the common keys.
    """


class FieldError(TDError, AttributeError, ValueError, KeyError):
    """A key that is not a field of the tensorclass it is written to or built from.

    Upstream raises `AttributeError` for some of these writes, `ValueError` for
    others (`fromkeys`, `separates`, results with foreign keys) and td raised
    `KeyError` from `from_tensordict`: this error is all three, so an `except`
    written for any of them catches it.
    """
