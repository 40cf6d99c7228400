"""The switch that says whether composite log-probabilities are summed into one tensor.

Shared by td-nn and td-distributions. When it is on, a composite distribution's
`log_prob` returns one tensor (the sum over leaves) written under a single
key; when off (the default, as in upstream 0.15), it returns a TensorDict with
one log-prob per leaf, written next to each sampled leaf as `<name>_log_prob`.
"""

from __future__ import annotations

from typing import Any

from td_core._core.flags import Switch, SwitchVar

__all__ = ["composite_lp_aggregate", "set_composite_lp_aggregate"]

_AGGREGATE: SwitchVar[bool] = SwitchVar("td_composite_lp_aggregate", False)


def composite_lp_aggregate(nowarn: bool = False) -> bool:
    """Whether composite log-probabilities are aggregated (default `False`).

    Args:
        nowarn: accepted for upstream compatibility; td never warns here.
    """
    return _AGGREGATE.get()


class set_composite_lp_aggregate(Switch[bool]):
    """Context manager and decorator that turns log-prob aggregation on or off.

    `None` stands for upstream's "unset" state, which reads as off.

    Examples:
        >>> from td_core import composite_lp_aggregate, set_composite_lp_aggregate
        >>> with set_composite_lp_aggregate(True):
        ...     composite_lp_aggregate()
        True
        >>> with set_composite_lp_aggregate(None):
        ...     composite_lp_aggregate()
        False
    """

    _var = _AGGREGATE

    def __init__(self, mode: bool | None = True) -> None:
        super().__init__(mode)

    def _parse(self, mode: Any) -> bool:
        if mode is None:
            return False
        if not isinstance(mode, bool):
            raise TypeError(f"set_composite_lp_aggregate expects a bool or None, got {mode!r}")
        return mode
