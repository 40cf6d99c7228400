"""Upstream's JSON backend switch: `set_json_backend`, `get_json_backend`, `json_dumps`.

Upstream deprecated these in tensordict 0.15 (removal announced for 0.17);
td keeps them, with the same `DeprecationWarning`, so ported code runs. The
backend is a `ContextVar` like td's other switches, and it only changes what
`json_dumps` returns: td's own files (saved folders, consolidated metadata)
are always written with the standard library's `json`, so their bytes never
depend on this setting.
"""

from __future__ import annotations

import importlib
import json
import warnings
from contextvars import ContextVar
from types import ModuleType
from typing import Any

__all__ = ["get_json_backend", "json_dumps", "set_json_backend"]

_BACKENDS = ("json", "orjson")
_BACKEND: ContextVar[ModuleType] = ContextVar("td_json_backend", default=json)


def _deprecated(name: str, advice: str = "") -> None:
    warnings.warn(
        f"{name} is deprecated (as in tensordict 0.15, which removes it in 0.17).{advice}",
        DeprecationWarning,
        stacklevel=3,
    )


def set_json_backend(backend: str) -> None:
    """Select the module `json_dumps` serializes with, for the rest of the current context.

    Args:
        backend: `"json"` (the standard library, the default) or `"orjson"`
            (must be installed). With `orjson`, NaN and infinite floats are
            written as `null`.

    Raises:
        ValueError: if `backend` is neither `"json"` nor `"orjson"`.
        ModuleNotFoundError: if `"orjson"` is asked for and not installed;
            the backend is then left unchanged.
    """
    _deprecated("set_json_backend")
    if not isinstance(backend, str) or backend not in _BACKENDS:
        raise ValueError(f"Backend must be either 'json' or 'orjson', got {backend!r}.")
    _BACKEND.set(importlib.import_module(backend))


def get_json_backend() -> ModuleType:
    """Return the module of the current JSON backend (`json` unless `set_json_backend` chose `orjson`)."""
    _deprecated("get_json_backend")
    return _BACKEND.get()


def json_dumps(data: Any, **kwargs: Any) -> str | bytes:
    """Serialize `data` with the current JSON backend.

    Args:
        data: the object to serialize.
        **kwargs: passed to the backend's `dumps`; `orjson` ignores
            `separators` (it always writes the compact form) and accepts only
            its own `default` and `option` arguments.

    Returns:
        A `str` with `json`, `bytes` with `orjson`.
    """
    _deprecated("json_dumps", " Use json.dumps or orjson.dumps instead.")
    backend = _BACKEND.get()
    if backend is json:
        return json.dumps(data, **kwargs)
    kwargs.pop("separators", None)
    result: bytes = backend.dumps(data, **kwargs)
    return result
