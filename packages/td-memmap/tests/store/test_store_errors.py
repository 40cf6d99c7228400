"""Bad input and failures of a TensorDictStore: clear errors naming the key, nothing half-written."""

from __future__ import annotations

import json
import socket
import sys
import threading
import warnings

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict
from td_core.errors import BatchSizeError, DTypeError
from td_memmap import LazyStackedTensorDictStore, StoreConnectionError, TensorDictStore


@pytest.fixture
def store(redis_server):
    out = TensorDictStore(port=redis_server.port, batch_size=[4])
    out["x"] = torch.arange(12.0).view(4, 3)
    out["n", "i"] = torch.arange(4)
    yield out
    out.clear_redis()
    out.close()


def _snapshot(redis_server, store) -> dict[bytes, bytes]:
    client = redis_server.client()
    keys = sorted(client.keys(f"tensordict:{store.td_id}:*"))
    return {k: client.dump(k) for k in keys}


def test_wrong_shape_names_the_key(store, redis_server):
    before = _snapshot(redis_server, store)
    with pytest.raises(BatchSizeError, match="'y'"):
        store["y"] = torch.zeros(3)
    with pytest.raises(BatchSizeError, match=r"entry \('n', 'i'\)"):
        # the first entry fits, the second does not: neither is written
        store[0:2] = TensorDict({"x": torch.zeros(2, 3), "n": {"i": torch.zeros(2, 7)}}, [2])
    assert _snapshot(redis_server, store) == before


def test_wrong_dtype_names_the_key(store, redis_server):
    before = _snapshot(redis_server, store)
    with warnings.catch_warnings():  # torch deprecates quantized tensors; any will do here
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8)
    with pytest.raises(TypeError, match="'q'"):
        store["q"] = quantized
    with pytest.raises(DTypeError, match="entry 'x'"):
        store[1] = "not a number"
    with pytest.raises(TypeError, match=r"'obj'.*JSON"):
        store["obj"] = TensorDict({"v": object()}, [4]).get("v")
    assert _snapshot(redis_server, store) == before


def test_missing_key_names_the_key(store):
    with pytest.raises(KeyError, match="'nope'"):
        store["nope"]
    with pytest.raises(KeyError, match=r"\('n', 'nope'\)"):
        store["n", "nope"]
    with pytest.raises(KeyError, match="'nope'"):
        del store["nope"]


def test_corrupt_entry_names_the_key(store, redis_server):
    redis_server.client().set(f"tensordict:{store.td_id}:data:{json.dumps(['x'])}", b"123")
    with pytest.raises(ValueError, match=r"entry 'x'.*3 bytes"):
        store["x"]


def test_missing_redis_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(ImportError, match=r"td-memmap\[redis\]"):
        TensorDictStore(port=1)


def test_server_gone_gives_a_connection_error_naming_the_key(make_server):
    server = make_server()
    store = TensorDictStore(port=server.port, batch_size=[2], socket_timeout=5)
    store["x"] = torch.zeros(2)
    server.stop()
    with pytest.raises(StoreConnectionError, match=r"'x'.*unreachable"):
        store["x"]
    with pytest.raises(ConnectionError, match=r"'y'.*nothing was written"):
        store["y"] = torch.ones(2)
    store.close()
    with pytest.raises(StoreConnectionError, match="closed"):
        store["x"]


class _CuttingProxy:
    """A TCP proxy to a server that cuts the connection after `limit` bytes from the client."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.limit: int | None = None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outgoing: bool) -> None:
        sent = 0
        try:
            while data := src.recv(65536):
                if outgoing and self.limit is not None and sent + len(data) > self.limit:
                    dst.sendall(data[: self.limit - sent])
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()


def test_connection_cut_mid_write_leaves_nothing_half_written(redis_server):
    proxy = _CuttingProxy(redis_server.port)
    try:
        store = TensorDictStore(port=proxy.port, batch_size=[256], socket_timeout=5)
        store["old"] = torch.ones(256)
        before = _snapshot(redis_server, store)
        proxy.limit = 300_000  # the new sub-tree is ~1 MB: the server sees part of the transaction
        big = TensorDict({"a": torch.randn(256, 512), "b": torch.randn(256, 512)}, [256])
        with pytest.raises(ConnectionError, match="'new'"):
            store["new"] = big
        assert _snapshot(redis_server, store) == before  # no key, no data of the partial write
    finally:
        proxy.close()


def test_lazy_stack_write_with_too_few_rows_is_refused_and_changes_nothing(redis_server):
    lazy = LazyStackedTensorDict(*[TensorDict({"a": torch.zeros(2)}, [2]) for _ in range(3)])
    stored = LazyStackedTensorDictStore.from_lazy_stack(lazy, port=redis_server.port)
    try:
        with pytest.raises(BatchSizeError, match="2 values for 3 selected members"):
            stored[0:3] = TensorDict({"a": torch.ones(2, 2)}, [2, 2])
        assert stored["a"].sum().item() == 0.0
    finally:
        stored.clear_redis()


def test_contiguous_copies_and_refuses_inplace(store):
    out = store.contiguous()
    assert type(out) is TensorDict and (out["x"] == torch.arange(12.0).view(4, 3)).all()
    with pytest.raises(RuntimeError, match=r"contiguous\(inplace=True\).*live in the store"):
        store.contiguous(inplace=True)
    assert (store["x"] == torch.arange(12.0).view(4, 3)).all()


def _race_after_watch(store, redis_server, times):
    """Make another client change the watched registry right after the next `times` WATCHes."""
    other = redis_server.client()
    keys_key = f"tensordict:{store.td_id}:keys"
    real = store._srv.client.pipeline
    left = [times]

    def pipeline(*args, **kwargs):
        pipe = real(*args, **kwargs)
        watch = pipe.watch

        def racing_watch(*names):
            out = watch(*names)
            if left[0] > 0:
                left[0] -= 1
                other.hset(keys_key, "race", b"{}")
                other.hdel(keys_key, "race")
            return out

        pipe.watch = racing_watch
        return pipe

    store._srv.client.pipeline = pipeline


def test_a_write_raced_by_another_client_is_retried_then_applied(store, redis_server):
    _race_after_watch(store, redis_server, times=3)
    try:
        store["z"] = torch.ones(4)
        store[1:3] = TensorDict({"z": torch.zeros(2)}, [2])
    finally:
        del store._srv.client.pipeline
    assert store["z"].tolist() == [1.0, 0.0, 0.0, 1.0]


def test_a_write_raced_every_time_gives_up_naming_the_key(store, redis_server):
    before = _snapshot(redis_server, store)
    _race_after_watch(store, redis_server, times=10**6)
    try:
        with pytest.raises(RuntimeError, match=r"'z'.*kept changing"):
            store["z"] = torch.ones(4)
        with pytest.raises(RuntimeError, match=r"index.*kept changing"):
            store[0] = TensorDict({"x": torch.zeros(3)}, [])
    finally:
        del store._srv.client.pipeline
    assert _snapshot(redis_server, store) == before
