"""Shape ops of a locked TensorDict give locked results, as upstream.

The result of `view`, `reshape`, `permute`, `transpose`, `squeeze`,
`unsqueeze`, `expand`, `flatten`, `unflatten`, `split`, `chunk`, `flip`,
`roll`, `repeat`, `tile`, `narrow`, `movedim`, `rot90`, `broadcast_to`, ...
shares its leaves with its source (or is built from them). When the source is
locked, so is the result: its key set is frozen like its source's, and a
`with locked.view(-1) as v:` block refuses a write to `v` at once
(`LockedError`) instead of failing when the block writes back.

The lock is set without recording a previous state (not through `lock_()`),
so `with result:` stays a write-back block rather than a lock block.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from td_core._core.traverse import is_td

__all__ = ["locked_like_source"]

P = ParamSpec("P")
S = TypeVar("S")
T = TypeVar("T")


def _lock(source: Any, out: Any) -> None:
    if out is source or not is_td(out) or out._is_locked:
        return
    out._set_lock(True)  # MappingMixin's: locks the tree and joins the lock graph


def locked_like_source(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """Decorate a shape op so that its result (or each result of a tuple) is locked when `self` is.

    A result that is `self` (an identity op, `inplace=True`) is left as it is.
    """

    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
        out = method(self, *args, **kwargs)
        if self._is_locked:  # type: ignore[attr-defined]  # every kind has it; usually False
            if isinstance(out, tuple):
                for piece in out:
                    _lock(self, piece)
            else:
                _lock(self, out)
        return out

    return wrapper
