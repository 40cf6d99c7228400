"""consolidate() reuses its last large CPU buffer once nothing holds it, and never while anything does."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from td_core import TensorDict, empty_cache
from td_core._io import spare_buffer

_ROWS = 1 << 17  # 4 leaves of 512 KiB: a 2 MiB buffer, above the spare's lower bound


def _td(seed: int = 0, rows: int = _ROWS) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "a": torch.randn(rows, generator=g),
            "b": torch.randint(0, 9, (rows,), generator=g, dtype=torch.int32),
            "n": {"c": torch.randn(rows, 1, generator=g).double()},
            "odd": torch.ones(rows, 3, dtype=torch.uint8),  # an unaligned size: padding follows
        },
        [rows],
    )


def _ptr(td: TensorDict) -> int:
    return td["a"].untyped_storage().data_ptr()


def _buffer(td: TensorDict) -> torch.Tensor:
    return td._consolidated["storage"]


@pytest.fixture(autouse=True)
def _no_spare() -> Any:
    empty_cache()
    yield
    empty_cache()


def test_a_dropped_result_lends_its_buffer_to_the_next_consolidate() -> None:
    td = _td()
    first = td.consolidate()
    ptr = _ptr(first)
    ref = first["a"].untyped_storage()._weak_ref()
    del first
    assert not torch.UntypedStorage._expired(ref)  # kept as the spare, not freed
    torch.UntypedStorage._free_weak_ref(ref)
    again = td.consolidate()
    assert _ptr(again) == ptr
    assert (again == td).all() and again.is_consolidated()


def test_a_reused_buffer_holds_the_new_values_and_zeroed_padding() -> None:
    fresh = _buffer(_td(1).consolidate()).clone()  # a new buffer: header and padding zeroed
    empty_cache()
    stale = _td(2).consolidate()
    _buffer(stale).fill_(255)  # every byte of the buffer the next call reuses is dirty
    ptr = _ptr(stale)
    del stale
    again = _td(1).consolidate()
    assert _ptr(again) == ptr
    assert torch.equal(_buffer(again), fresh)


_HOLDERS: dict[str, Callable[[TensorDict], Any]] = {
    "the result": lambda c: c,
    "one leaf": lambda c: c["n", "c"],
    "a view of a leaf": lambda c: c["a"][3:5],
    "a numpy array": lambda c: c["b"].numpy(),
    "a storage object": lambda c: c["a"].untyped_storage(),
    "a dlpack capsule": lambda c: torch.utils.dlpack.to_dlpack(c["a"]),
    "a row of the result": lambda c: c[2],
}


@pytest.mark.parametrize("holder", list(_HOLDERS))
def test_a_buffer_anything_still_holds_is_not_reused(holder: str) -> None:
    first = _td(1).consolidate()
    expected = first.clone()
    held = _HOLDERS[holder](first)
    ptr = _ptr(first)
    del first
    second = _td(2).consolidate()
    assert _ptr(second) != ptr
    assert (second == _td(2)).all()
    del held
    third = _td(3).consolidate()  # the spare is now `second`'s buffer, which `second` holds
    assert _ptr(third) != _ptr(second)
    assert (second == _td(2)).all() and (third == _td(3)).all()
    assert (expected == _td(1)).all()


def test_the_values_a_holder_reads_survive_later_consolidations() -> None:
    first = _td(1).consolidate()
    leaf = first["a"]
    del first
    for seed in (2, 3, 4):
        _td(seed).consolidate()
    assert torch.equal(leaf, _td(1)["a"])


def test_a_buffer_moved_to_shared_memory_is_never_reused() -> None:
    first = _td().consolidate()
    first.share_memory_()  # another process may map it now
    ptr = _ptr(first)
    del first
    assert _ptr(_td().consolidate()) != ptr


@pytest.mark.parametrize(
    "kwargs", [{"share_memory": True}, {"use_buffer": True}, {"device": "meta"}]
)
def test_shared_and_other_device_buffers_are_not_spares(kwargs: dict[str, Any]) -> None:
    td = _td()
    made = td.consolidate(**kwargs)
    assert not spare_buffer._spare
    del made
    plain = td.consolidate()
    assert spare_buffer._spare and _ptr(plain) == spare_buffer._spare[0].data_ptr()


def test_small_and_other_sized_buffers_get_their_own_memory() -> None:
    small = _td(rows=1 << 10).consolidate()  # 40 KiB: served by the heap, never kept
    assert not spare_buffer._spare
    del small
    first = _td().consolidate()
    ptr = _ptr(first)
    del first
    other = _td(rows=_ROWS + 64).consolidate()  # a different size: a new buffer replaces the spare
    assert _ptr(other) != ptr and (other == _td(rows=_ROWS + 64)).all()


def test_empty_cache_frees_the_spare_once_its_last_view_is_gone() -> None:
    result = _td().consolidate()
    storage = _buffer(result).untyped_storage()
    ref = storage._weak_ref()
    del storage
    empty_cache()
    assert not torch.UntypedStorage._expired(ref)  # the result still uses it
    assert (result == _td()).all()
    del result
    assert torch.UntypedStorage._expired(ref)
    torch.UntypedStorage._free_weak_ref(ref)


def test_threads_consolidating_at_once_each_get_their_own_buffer() -> None:
    tds = [_td(seed) for seed in range(4)]
    results: dict[int, list[TensorDict]] = {i: [] for i in range(4)}

    def work(i: int) -> None:
        for _ in range(10):
            c = tds[i].consolidate()
            if len(results[i]) < 2:  # two results held per thread: their buffers stay busy
                results[i].append(c)
            assert (c == tds[i]).all()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept = [c for cs in results.values() for c in cs]
    assert len({_ptr(c) for c in kept}) == len(kept)  # none of the kept results share a buffer
    for i, cs in results.items():
        for c in cs:
            assert (c == tds[i]).all()


def test_the_spare_never_looks_free_while_the_caller_holds_it(monkeypatch) -> None:
    # what another thread would see whenever it could take the lock: a buffer handed out
    # (new or reused) is busy from the moment it is the spare
    seen: list[bool] = []

    class Watched:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __enter__(self) -> None:
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            if spare_buffer._spare:
                seen.append(spare_buffer._free(spare_buffer._spare[0]))
            self.lock.release()

    empty_cache()
    monkeypatch.setattr(spare_buffer, "_lock", Watched())
    first = spare_buffer.take_buffer(2 << 20)  # new: becomes the spare
    del first
    second = spare_buffer.take_buffer(2 << 20)  # the spare again
    assert seen == [False, False] and second.numel() == 2 << 20


def test_inference_mode_buffers_are_not_spares() -> None:
    td = _td()
    with torch.inference_mode():
        inside = td.consolidate()
    assert not spare_buffer._spare and inside["a"].is_inference()
    del inside
    outside = td.consolidate()  # an ordinary buffer, which accepts writes
    outside["a"].add_(1)
    assert torch.equal(outside["a"], td["a"] + 1)


def test_fake_buffers_are_not_spares() -> None:
    td = _td()
    spare = td.consolidate()
    ptr = _ptr(spare)
    del spare
    with FakeTensorMode():
        _td().consolidate()
    assert spare_buffer._spare[0].data_ptr() == ptr and type(spare_buffer._spare[0]) is torch.Tensor
    assert (td.consolidate() == td).all()
