"""Small parsing helpers shared by the container modules."""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from td_core.errors import BatchSizeError, DeviceError, DimError

__all__ = [
    "logger",
    "NO_DEFAULT",
    "as_size",
    "as_device",
    "convert_ellipsis_to_idx",
    "normalize_dim",
    "shape_args",
    "infer_shape",
    "leaf_shape",
    "index_device",
    "stand_in",
    "strtobool",
]

#: The logger td-core reports through (named `"td_core"`, upstream's `tensordict.utils.logger`).
#: As a library's logger it has no handler of its own: `logging.basicConfig(level=logging.INFO)`
#: (or a handler on it) shows its records.
logger: logging.Logger = logging.getLogger("td_core")


class _NoDefault(enum.Enum):
    """Sentinel: no default was given (`None` is a legitimate default).

    An enum member, because torch.compile can trace enum constants.
    """

    NO_DEFAULT = "NO_DEFAULT"

    def __repr__(self) -> str:
        return "NO_DEFAULT"

    def __bool__(self) -> bool:
        return False


NO_DEFAULT: Any = _NoDefault.NO_DEFAULT


_EMPTY_SIZE = torch.Size()


def as_size(batch_size: Any) -> torch.Size:
    """A `torch.Size` from an int, a sequence of ints or a `torch.Size`."""
    cls = type(batch_size)
    if cls is torch.Size:
        return batch_size
    if cls is list or cls is tuple:  # the usual spellings: [], [n], (n, m)
        if not batch_size:
            return _EMPTY_SIZE
        for d in batch_size:  # (a loop: no generator frame for [n] or [n, m])
            if type(d) is not int or d < 0:
                break
        else:
            return torch.Size(batch_size)
    if isinstance(batch_size, (int, np.integer)) and not isinstance(batch_size, bool):
        batch_size = (int(batch_size),)
    elif isinstance(batch_size, torch.SymInt):  # x.shape[0] under torch.export / dynamic shapes
        batch_size = (batch_size,)
    elif isinstance(batch_size, torch.Tensor) and batch_size.ndim <= 1:
        batch_size = batch_size.reshape(-1).tolist()
    if not isinstance(batch_size, Sequence) or isinstance(batch_size, str):
        raise TypeError(f"batch_size must be an int or a sequence of ints, got {batch_size!r}")
    try:
        size = torch.Size(batch_size)
    except TypeError:
        raise TypeError(
            f"batch_size must be an int or a sequence of ints, got {batch_size!r}"
        ) from None
    if any(d < 0 for d in size):
        ragged = (
            ": batch dims are never ragged, so end batch_size before a nested tensor's "
            "ragged (-1) dim"
            if -1 in size
            else ""
        )
        raise ValueError(f"batch_size dims must be non-negative, got {list(size)}{ragged}")
    return size


_PARSED_DEVICES: dict[str, torch.device] = {}  # "cpu", "mps" -> mps:0, ...: parsed once


def as_device(device: Any) -> torch.device | None:
    """`None` or a `torch.device` with an index where it has one, as upstream: `"cuda"` is
    the current CUDA device (`cuda:0` unless set), another accelerator's index 0; `"cpu"`
    and `"meta"` stay as they are. Ints mean the default accelerator's index."""
    if device is None:
        return device
    if type(device) is torch.device:
        if device.index is not None or device.type in ("cpu", "meta"):
            return device
        return _indexed(device)
    if type(device) is str:
        parsed = _PARSED_DEVICES.get(device)
        if parsed is not None:
            return parsed
    if isinstance(device, int) and not isinstance(device, bool):
        return torch.device("cuda", device)
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise DeviceError(
            f"invalid device {device!r}: expected e.g. 'cpu', 'cuda:0' or a torch.device"
        ) from None
    if parsed.index is None and parsed.type not in ("cpu", "meta"):
        if parsed.type == "cuda":  # the current device may change: not kept
            return _indexed(parsed)
        parsed = _indexed(parsed)
    if type(device) is str and len(_PARSED_DEVICES) < 64:
        _PARSED_DEVICES[device] = parsed
    return parsed


def _indexed(device: torch.device) -> torch.device:
    if device.type != "cuda":
        return torch.device(device.type, 0)
    if not torch.cuda.is_available():  # no current device to name: moves will say so
        return device
    return torch.device("cuda", torch.cuda.current_device())


def index_device(index: Any) -> torch.device | None:
    """The device of the first tensor in `index` (one index or a tuple of them) off the CPU.

    torch takes index tensors on the CPU or on the indexed tensor's device, so whatever
    stands in for the indexed data (`stand_in`, positions) must live there.
    """
    for item in index if type(index) is tuple else (index,):
        if isinstance(item, torch.Tensor) and item.device.type != "cpu":
            return item.device
    return None


def stand_in(shape: torch.Size, index: Any) -> torch.Tensor:
    """A stride-0 tensor of `shape` that `index` can index: `stand_in(s, i)[i].shape` is the
    shape indexing gives, with no data read or copied (it lives on `index`'s device)."""
    return torch.zeros((), dtype=torch.uint8, device=index_device(index)).expand(shape)


def leaf_shape(t: torch.Tensor) -> torch.Size:
    """`t.shape`, or for a strided nested tensor (which has none) its components' count then
    each dim they share, -1 where they differ (`[2, 3, -1]` for components `(3, 4)`, `(3, 5)`)."""
    if not t.is_nested or t.layout != torch.strided:
        return t.shape
    sizes = t._nested_tensor_size()
    if not sizes.numel():
        return torch.Size((sizes.shape[0],))
    same = (sizes == sizes[0]).all(0).tolist()
    return torch.Size((sizes.shape[0], *(d if s else -1 for d, s in zip(sizes[0].tolist(), same))))


def normalize_dim(dim: int, ndim: int, what: str = "batch dims") -> int:
    """`dim` in `[0, ndim)`; negative dims count from the end."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {dim!r}")
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} is out of range for {ndim} {what}")
    return dim + ndim if dim < 0 else dim


def shape_args(args: tuple[Any, ...]) -> tuple[int, ...]:
    """`(2, 3)` from `f(2, 3)`, `f((2, 3))`, `f([2, 3])` or `f(torch.Size([2, 3]))`."""
    if len(args) == 1 and not isinstance(args[0], int):
        args = tuple(args[0])
    return tuple(map(int, args))  # (map: no generator frame)


def infer_shape(shape: Sequence[int], numel: int, old: torch.Size) -> torch.Size:
    """Resolve one `-1` in a view shape; raise naming both shapes if the sizes differ."""
    shape = list(shape)
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise ValueError(f"only one dimension can be -1, got shape {shape}")
    known = math.prod([s for s in shape if s != -1])  # (a list: Dynamo traces it, not a generator)
    if unknown:
        if known == 0 or numel % known:
            raise BatchSizeError(f"cannot view batch_size {list(old)} as {shape}")
        shape[unknown[0]] = numel // known
    elif known != numel:
        raise BatchSizeError(
            f"cannot view batch_size {list(old)} ({numel} elements) as {shape} ({known} elements)"
        )
    return torch.Size(shape)


def broadcast_shape(a: Sequence[int], b: Sequence[int]) -> torch.Size | None:
    """The broadcast of two shapes, or None if they do not broadcast.

    Pure Python on purpose: `torch.broadcast_shapes` imports sympy on first use (~1.5 s).
    """
    out = []
    for x, y in zip(
        reversed((1,) * (len(b) - len(a)) + tuple(a)), reversed((1,) * (len(a) - len(b)) + tuple(b))
    ):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return torch.Size(reversed(out))


class BatchMeta:
    """Batch metadata derived from `batch_size`, shared by containers and non-tensor leaves."""

    __slots__ = ()
    batch_size: torch.Size

    @property
    def shape(self) -> torch.Size:
        """Alias of `batch_size`."""
        return self.batch_size

    @property
    def batch_dims(self) -> int:
        """Number of batch dimensions."""
        return len(self.batch_size)

    ndim = batch_dims

    def dim(self) -> int:
        """Number of batch dimensions."""
        return len(self.batch_size)

    def ndimension(self) -> int:
        return len(self.batch_size)

    def numel(self) -> int:
        """Number of elements of the batch (the product of `batch_size`)."""
        return self.batch_size.numel()


def convert_ellipsis_to_idx(idx: Any, batch_size: Sequence[int]) -> Any:
    """Expand the Ellipsis of an index into full slices over the remaining batch dims.

    Each item other than `None` and `...` takes one batch dim; the Ellipsis
    stands for the dims no other item takes. An index without an Ellipsis is
    returned as it is.

    Args:
        idx: an index (`...`, or a tuple that may hold one `...`).
        batch_size: the shape the index applies to.

    Returns:
        The index as a tuple with the Ellipsis replaced by `slice(None)` items.

    Raises:
        DimError: (an `IndexError` and a `RuntimeError`) if the index holds
            more than one Ellipsis or takes more dims than `batch_size` has.

    Examples:
        >>> from td_core import convert_ellipsis_to_idx
        >>> convert_ellipsis_to_idx((..., 0), [1, 2, 3])
        (slice(None, None, None), slice(None, None, None), 0)
    """
    items = idx if isinstance(idx, tuple) else (idx,)
    where = [i for i, item in enumerate(items) if item is Ellipsis]
    if not where:
        return idx
    ndim = len(batch_size)
    taken = sum(1 for item in items if item is not None and item is not Ellipsis)
    if len(where) > 1:
        raise DimError(f"an index can only have one ellipsis at most, got {idx!r}")
    if taken > ndim:
        raise DimError(
            f"Not enough dimensions in batch_size {list(batch_size)} for index {idx!r}: "
            f"it indexes {taken} dims"
        )
    at = where[0]
    return items[:at] + (slice(None),) * (ndim - taken) + items[at + 1 :]


_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


def strtobool(val: str) -> int:
    """1 for a true string (`y`, `yes`, `t`, `true`, `on`, `1`), 0 for a false one, any case.

    Upstream's `tensordict.utils.strtobool` (the one `distutils` had), for reading flags
    from text such as environment variables.

    Raises:
        ValueError: any other string.

    Examples:
        >>> from td_core import strtobool
        >>> strtobool("Yes"), strtobool("off")
        (1, 0)
    """
    lowered = val.lower()
    if lowered in _TRUE:
        return 1
    if lowered in _FALSE:
        return 0
    raise ValueError(f"invalid truth value {val!r}: expected one of {_TRUE + _FALSE}")
