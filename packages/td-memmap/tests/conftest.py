"""Fixtures shared by td-memmap's tests."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from td_memmap import load_memmap

# the test modules import the helpers module beside this file (`saved_files`)
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))


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


# a save of 200 leaves of 1 MB into sys.argv[1], started when a line comes on stdin
_KILLED_SAVE = textwrap.dedent(
    """
    import sys, torch
    from td_core import TensorDict
    from td_memmap import save
    td = TensorDict({f"leaf{i}": torch.full((1 << 18,), float(i)) for i in range(200)}, batch_size=[])
    print("ready", flush=True)
    sys.stdin.readline()
    save(td, sys.argv[1])
    print("done", flush=True)
    """
)


def _kill_mid_save(folder: Path, marker: str) -> int:
    """SIGKILL a child's save of 200 leaves into `folder` once `folder / marker` exists.

    Retried (5 times at most) until the kill lands before the save commits, that is
    until `folder` no longer loads with the child's `leaf0`; fails the test if every
    save finished first. Returns the child's return code.
    """
    for _attempt in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-c", _KILLED_SAVE, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not os.path.exists(folder / marker):
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdin.close()
        proc.stdout.close()
        if "leaf0" not in load_memmap(folder).keys():
            return proc.returncode  # killed part-way, as wanted
    pytest.fail("the child save finished before SIGKILL five times: the test proves nothing")


@pytest.fixture
def kill_mid_save() -> Callable[[Path, str], int]:
    """`kill_mid_save(folder, marker)`: a child's save into `folder`, SIGKILLed part-way."""
    return _kill_mid_save
