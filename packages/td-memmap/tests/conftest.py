"""Fixtures shared by td-memmap's tests."""

import os
import signal
import time
from collections.abc import Callable

import pytest


def _run_killed(job: Callable[[], object], delay: float) -> bool:
    """Run `job()` in a forked child killed after `delay` s; whether it finished first."""
    pid = os.fork()
    if pid == 0:  # the child: run the job, then leave without any cleanup
        try:
            job()
        finally:
            os._exit(0)
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status)


@pytest.fixture
def run_killed() -> Callable[[Callable[[], object], float], bool]:
    """`run_killed(job, delay)`: `job()` in a child process SIGKILLed after `delay` s."""
    return _run_killed
