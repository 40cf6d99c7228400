"""How probabilistic modules turn a distribution into a value.

Shared by td-nn (which reads it) and td-distributions (whose distributions
offer a `deterministic_sample`), so neither needs to import the other.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, TypeVar

__all__ = ["InteractionType", "interaction_type", "set_interaction_type"]

_F = TypeVar("_F", bound=Callable[..., Any])


class InteractionType(enum.Enum):
    """What a probabilistic module returns: a sample or a summary statistic.

    `DETERMINISTIC` asks the distribution for its `deterministic_sample`
    (its mode or mean when it has no such property).
    """

    MODE = "mode"
    MEDIAN = "median"
    MEAN = "mean"
    RANDOM = "random"
    DETERMINISTIC = "deterministic"

    @classmethod
    def from_str(cls, value: str | InteractionType) -> InteractionType:
        """Parse `"random"`, `"MODE"`, ... (any case) or pass an enum through."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.lower())
            except ValueError:
                pass
        choices = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"unknown interaction type {value!r}; expected one of {choices}")


_INTERACTION_TYPE: ContextVar[InteractionType | None] = ContextVar(
    "td_interaction_type", default=None
)


def interaction_type() -> InteractionType | None:
    """The interaction type set by the innermost `set_interaction_type`, or None.

    Examples:
        >>> from td_core import InteractionType, interaction_type, set_interaction_type
        >>> interaction_type() is None
        True
        >>> with set_interaction_type("mode"):
        ...     interaction_type()
        <InteractionType.MODE: 'mode'>
    """
    return _INTERACTION_TYPE.get()


class set_interaction_type:
    """Context manager and decorator that sets the interaction type.

    Args:
        type: an `InteractionType` or its name; `None` clears it so
            modules fall back to their `default_interaction_type`.
    """

    def __init__(self, type: InteractionType | str | None = InteractionType.DETERMINISTIC) -> None:
        self.type = None if type is None else InteractionType.from_str(type)
        self._tokens: list[Token[InteractionType | None]] = []

    def __enter__(self) -> set_interaction_type:
        self._tokens.append(_INTERACTION_TYPE.set(self.type))
        return self

    def __exit__(self, *exc: object) -> None:
        _INTERACTION_TYPE.reset(self._tokens.pop())

    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_interaction_type(self.type):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
