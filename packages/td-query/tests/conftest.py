"""Fixtures shared by td-query's tests."""

import sys
from collections.abc import Callable
from typing import Any

import pytest


def _lines_run(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn()``; return its result and how many lines of td_query's own code ran
    (numpy and torch calls run in C and count once each)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if "td_query" not in frame.f_code.co_filename:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        result = fn()
    finally:
        sys.settrace(None)
    return result, count


@pytest.fixture
def lines_run() -> Callable[[Callable[[], Any]], tuple[Any, int]]:
    """``lines_run(fn)`` gives ``(fn(), lines of td_query code executed)``: checks that work is vectorised."""
    return _lines_run
