"""Small tools of upstream's `tensordict.utils`: right-expansion, `timeit`, type aliases.

`expand_right` and `expand_as_right` add dims on the right (broadcasting adds
them on the left) and expand the dims of size one; `timeit` accumulates the
time spent under a name; `IndexType` and `DeviceType` are the types of an
index and of a `device` argument; `Buffer` is torch's buffer marker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import wraps
from types import TracebackType
from typing import Any, ClassVar, TypeVar, Union

import torch
from torch import Tensor

from td_core._core.utils import logger

__all__ = ["Buffer", "DeviceType", "IndexType", "expand_as_right", "expand_right", "timeit"]

#: What `td[index]` accepts: an int, a slice, None, a tensor (indices or a mask), a
#: list, or a tuple of these, as a tensor does; a str or a tuple of str is a key.
IndexType = Union[None, int, slice, str, Tensor, list[Any], tuple[Any, ...]]  # noqa: UP007
#: What a `device` argument accepts: a `torch.device`, a str (`"cuda:0"`) or a CUDA index.
DeviceType = Union[torch.device, str, int]  # noqa: UP007
#: torch's marker of a module buffer (`torch.nn.Buffer`), as upstream re-exports it.
Buffer = torch.nn.Buffer

_F = TypeVar("_F", bound=Callable[..., Any])


def expand_right(tensor: Tensor, shape: Sequence[int]) -> Tensor:
    """`tensor` with dims of size one added on the right, then expanded to `shape` (a view).

    Its leading dims must equal `shape`'s or be of size one (otherwise torch's
    `expand` raises).

    Examples:
        >>> import torch
        >>> expand_right(torch.arange(3), (3, 2)).tolist()
        [[0, 0], [1, 1], [2, 2]]
    """
    missing = len(shape) - tensor.ndim
    if missing > 0:
        tensor = tensor.reshape(*tensor.shape, *([1] * missing))
    return tensor.expand(*shape)


def expand_as_right(tensor: Any, dest: Any) -> Any:
    """`tensor` expanded on the right to the shape of `dest` (for a TensorDict: its batch size).

    Raises:
        RuntimeError: if `dest` has fewer dims than `tensor`, or a leading dim of
            `tensor` is neither `dest`'s nor one.

    Examples:
        >>> import torch
        >>> expand_as_right(torch.arange(3), torch.zeros(3, 2)).tolist()
        [[0, 0], [1, 1], [2, 2]]
    """
    shape, own = dest.shape, tensor.shape
    if len(shape) < len(own):
        raise RuntimeError(
            "expand_as_right requires the destination to have at least as many dimensions as "
            f"the input tensor, got tensor.ndimension()={len(own)} and "
            f"dest.ndimension()={len(shape)}"
        )
    if any(a != b and a != 1 for a, b in zip(own, shape)):
        raise RuntimeError(
            f"tensor shape is incompatible with dest shape, got: tensor.shape={own}, dest={shape}"
        )
    for _ in range(len(shape) - len(own)):
        tensor = tensor.unsqueeze(-1)
    return tensor.expand(shape)


class timeit:  # upstream's (lower-case) name
    """Accumulate the time spent in a function or a block under `name`.

    A decorator or a context manager. Each name keeps its mean time, total time
    and call count; `timeit.print()` logs them (`td_core.logger`, INFO) and
    `timeit.erase()` sets them back to zero.

    Examples:
        >>> @timeit("step")
        ... def step():
        ...     return 1
        >>> with timeit("block"):
        ...     _ = step()
        >>> timeit.print()  # logs "block took ... msec (total = ... sec)", then "step ..."
        >>> timeit.erase()
    """

    _REG: ClassVar[dict[str, list[float]]] = {}

    def __init__(self, name: str) -> None:
        self.name = name
        self._starts: list[float] = []

    def __call__(self, fn: _F) -> _F:
        @wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return timed  # type: ignore[return-value]

    def __enter__(self) -> timeit:
        self._starts.append(time.perf_counter())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        spent = time.perf_counter() - self._starts.pop()
        record = self._REG.setdefault(self.name, [0.0, 0.0, 0])
        mean, total, count = record
        record[:] = [(mean * count + spent) / (count + 1), total + spent, count + 1]

    @staticmethod
    def print(prefix: str | None = None) -> None:
        """Log each name's mean and total time at the INFO level (names sorted)."""
        for name in sorted(timeit._REG):
            mean, total, _ = timeit._REG[name]
            line = f"{name} took {mean * 1000:4.4} msec (total = {total} sec)"
            logger.info(f"{prefix} -- {line}" if prefix else line)

    @staticmethod
    def erase() -> None:
        """Set every name's times and count back to zero."""
        for name in timeit._REG:
            timeit._REG[name] = [0.0, 0.0, 0]
