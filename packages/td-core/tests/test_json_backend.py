"""Upstream's deprecated JSON backend switch: `set_json_backend`, `get_json_backend`, `json_dumps`."""

import contextvars
import importlib.util
import json

import pytest

from td_core import get_json_backend, json_dumps, set_json_backend

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_default_backend_is_the_standard_library() -> None:
    assert get_json_backend() is json
    assert json_dumps({"a": [1, 2]}, separators=(",", ":")) == '{"a":[1,2]}'
    assert json_dumps({"a": 1}) == '{"a": 1}'


def test_each_function_warns_as_deprecated() -> None:
    for call in (lambda: set_json_backend("json"), get_json_backend, lambda: json_dumps(1)):
        with pytest.warns(DeprecationWarning, match="deprecated"):
            call()


def test_set_json_backend_scopes_to_the_context_and_checks_its_argument() -> None:
    def run() -> None:
        set_json_backend("json")
        assert get_json_backend() is json
        with pytest.raises(ValueError, match=r"either 'json' or 'orjson'.*'ujson'"):
            set_json_backend("ujson")
        assert get_json_backend() is json

    contextvars.copy_context().run(run)
    assert get_json_backend() is json


@pytest.mark.skipif(
    importlib.util.find_spec("orjson") is not None, reason="checks the error when orjson is absent"
)
def test_orjson_missing_leaves_the_backend_unchanged() -> None:
    with pytest.raises(ModuleNotFoundError, match="orjson"):
        set_json_backend("orjson")
    assert get_json_backend() is json


@pytest.mark.skipif(importlib.util.find_spec("orjson") is None, reason="needs orjson installed")
def test_orjson_backend_returns_bytes() -> None:
    def run() -> None:
        set_json_backend("orjson")
        assert json_dumps({"a": [1, 2]}, separators=(",", ":")) == b'{"a":[1,2]}'

    contextvars.copy_context().run(run)
    assert get_json_backend() is json
