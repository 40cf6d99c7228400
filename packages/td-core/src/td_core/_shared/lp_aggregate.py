"""The switch that says whether composite log-probabilities are summed into one tensor.

Shared by td-nn and td-distributions. When it is on, a composite distribution's
`log_prob` returns one tensor (the sum over leaves) written under a single
key; when off (the default, as in upstream 0.15), it returns a TensorDict with
one log-prob per leaf, written next to each sampled leaf as `<name>_log_prob`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, TypeVar

__all__ = ["composite_lp_aggregate", "set_composite_lp_aggregate"]

_F = TypeVar("_F", bound=Callable[..., Any])
_AGGREGATE: ContextVar[bool] = ContextVar("td_composite_lp_aggregate", default=False)


def composite_lp_aggregate() -> bool:
    """Whether composite log-probabilities are aggregated (default `False`)."""
    return _AGGREGATE.get()


class set_composite_lp_aggregate:
    """Context manager and decorator that turns log-prob aggregation on or off."""

    def __init__(self, mode: bool = True) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_composite_lp_aggregate expects a bool, got {mode!r}")
        self.mode = mode
        self._tokens: list[Token[bool]] = []

    def __enter__(self) -> set_composite_lp_aggregate:
        self._tokens.append(_AGGREGATE.set(self.mode))
        return self

    def __exit__(self, *exc: object) -> None:
        _AGGREGATE.reset(self._tokens.pop())

    def set(self) -> None:
        """Set the mode for the rest of the current context (no restore)."""
        _AGGREGATE.set(self.mode)

    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_composite_lp_aggregate(self.mode):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
