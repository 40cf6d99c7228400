"""TensorDicts and tensorclasses as DataLoader datasets, and default_collate of TensorDicts."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from td_core import TensorDict, collate, tensorclass


@tensorclass
class Rows:
    x: torch.Tensor
    y: torch.Tensor


def _td(n: int = 50) -> TensorDict:
    return TensorDict(
        {"idx": torch.arange(n), "obs": torch.randn(n, 3), "nested": {"z": torch.arange(n) * 2}},
        [n],
    )


class _Counting(TensorDict):
    __slots__ = ()
    calls = 0
    dataset: TensorDict | None = None

    def _index(self, index):  # counts indexing ops the loader does on the dataset
        # (ops give this subclass back, so the batches are `_Counting`s too: not counted)
        if self is type(self).dataset:
            type(self).calls += 1
        return super()._index(index)


def test_getitems_reads_a_batch_with_one_indexing_op() -> None:
    td = _Counting({"idx": torch.arange(20)}, [20])
    _Counting.calls, _Counting.dataset = 0, td
    batches = list(DataLoader(td, batch_size=5))
    assert _Counting.calls == 4
    assert [b.batch_size for b in batches] == [torch.Size([5])] * 4


@pytest.mark.parametrize("collate_fn", [None, lambda x: x])
def test_batches_are_tensordicts(collate_fn) -> None:
    td = _td()
    batch = next(iter(DataLoader(td, batch_size=8, collate_fn=collate_fn)))
    assert isinstance(batch, TensorDict)
    assert batch.batch_size == torch.Size([8])
    assert (batch["idx"] == torch.arange(8)).all()
    assert (batch["nested", "z"] == torch.arange(8) * 2).all()


def test_shuffle_visits_every_row_once() -> None:
    td = _td()
    seen = torch.cat([b["idx"] for b in DataLoader(td, batch_size=7, shuffle=True)])
    assert sorted(seen.tolist()) == list(range(50))


def test_default_collate_stacks_a_list() -> None:
    rows = [_td()[i] for i in range(4)]
    out = default_collate(rows)
    assert out.batch_size == torch.Size([4]) and (out["idx"] == torch.arange(4)).all()
    assert collate(rows).batch_size == torch.Size([4])


def test_tensorclass_dataset() -> None:
    data = Rows(x=torch.arange(10), y=torch.zeros(10, 2), batch_size=[10])
    batch = next(iter(DataLoader(data, batch_size=4)))
    assert isinstance(batch, Rows) and (batch.x == torch.arange(4)).all()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers(context: str) -> None:
    td = _td(40)
    loader = DataLoader(
        td, batch_size=6, num_workers=2, multiprocessing_context=context, timeout=120
    )
    seen = torch.cat([b["idx"] for b in loader])
    assert sorted(seen.tolist()) == list(range(40))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs CUDA")
def test_pin_memory() -> None:
    batch = next(iter(DataLoader(_td(), batch_size=4, pin_memory=True)))
    assert batch["obs"].is_pinned()
