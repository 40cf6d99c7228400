"""What the sibling packages need to stay traceable by `torch.compile` on every torch version:
`SwitchVar` (a `ContextVar` compiled code can read) and `is_tracing`."""

from td_core._core.flags import SwitchVar, is_tracing

__all__ = ["SwitchVar", "is_tracing"]
