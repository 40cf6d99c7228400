"""How probabilistic modules turn a distribution into a value.

Shared by td-nn (which reads it) and td-distributions (whose distributions
offer a `deterministic_sample`), so neither needs to import the other.
"""

from __future__ import annotations

import enum
from typing import Any

from td_core._core.flags import Switch, SwitchVar

__all__ = ["InteractionType", "interaction_type", "set_interaction_type"]


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
        raise ValueError(f"{value!r} is not a valid InteractionType; expected one of {choices}")


_INTERACTION_TYPE: SwitchVar[InteractionType | None] = SwitchVar("td_interaction_type", None)


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


class set_interaction_type(Switch["InteractionType | None"]):
    """Context manager and decorator that sets the interaction type.

    Args:
        type: an `InteractionType` or its name; `None` clears it so
            modules fall back to their `default_interaction_type`.
    """

    _var = _INTERACTION_TYPE

    def __init__(self, type: InteractionType | str | None = InteractionType.DETERMINISTIC) -> None:
        super().__init__(type)

    def _parse(self, mode: Any) -> InteractionType | None:
        return None if mode is None else InteractionType.from_str(mode)

    @property
    def type(self) -> InteractionType | None:
        """The interaction type this switch sets."""
        return self.mode
