"""Consolidated TensorDicts and DataLoader throughput: td-core against upstream tensordict.

Run: ``uv run python benchmarks/bench_consolidate.py [--quick] [--filter NAME]``.

Ratios are td / upstream (lower is better). Before timing, each case's results
on both sides are checked equal (same keys, values, dtypes, shapes), so both
sides do the same work. Cases:

- ``consolidate``: copy the 200 leaves of a nested TensorDict (20 sub-TensorDicts
  of 10 leaves: float32, int64, bool; 64 rows) into one buffer.
- ``consolidate 8 leaves of 8 MB``: the case of upstream's own benchmark file
  (few large leaves: the copy dominates), at ``num_threads`` 0 and 8.
- ``pickle``: ``pickle.dumps`` then ``pickle.loads`` of the consolidated one
  (one buffer plus the layout), and of the same TensorDict not consolidated (the
  case users meet: td consolidates a copy of a tree this small first and writes
  one buffer; upstream reduces each leaf), and of a lazy stack of 100 small
  members (td: one buffer for all of them; upstream: each member's leaves).
- ``to("meta")``: moving the consolidated TensorDict to another device, one
  buffer transfer (``meta`` stands for an accelerator on a CPU-only machine: it
  measures the bookkeeping, not a copy); ``to(float64)``: a cast of every leaf.
- ``DataLoader epoch``: one epoch over a memory-mapped 100k-row data set
  (an image of 4x4 uint8, a label, a row id per row), batches of 1000 fetched
  with ``__getitems__`` by 2 persistent forked workers. The report gives the
  time per epoch; rows per second is 100,000 / that time (printed after the
  table for both sides).
"""

from __future__ import annotations

import atexit
import pathlib
import pickle
import shutil
import sys
import tempfile

import tensordict
import torch
from torch.utils.data import DataLoader

from td_core import TensorDict, lazy_stack

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from harness import Suite

Upstream = tensordict.TensorDict

SUBS, LEAVES, ROWS = 20, 10, 64
DATASET_ROWS, BATCH = 100_000, 1000
_tmp = tempfile.mkdtemp(prefix="bench_consolidate_")
atexit.register(shutil.rmtree, _tmp, ignore_errors=True)


def nested_source() -> dict[str, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    kinds = (
        lambda: torch.randn(ROWS, 8, generator=gen),
        lambda: torch.randint(0, 100, (ROWS,), generator=gen),
        lambda: torch.rand(ROWS, 2, generator=gen) > 0.5,
    )
    return {f"sub{i}": {f"leaf{j}": kinds[j % 3]() for j in range(LEAVES)} for i in range(SUBS)}


def same(ours: object, theirs: object) -> None:
    """Both sides' results hold the same entries (meta tensors: same dtype and shape)."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert ours.device == theirs.device
        if theirs.device.type != "meta":
            assert torch.equal(ours, theirs)
        return
    ours_keys = sorted(ours.keys(True, True), key=str)  # type: ignore[attr-defined]
    theirs_keys = sorted(theirs.keys(True, True), key=str)  # type: ignore[attr-defined]
    assert ours_keys == theirs_keys, (ours_keys[:3], theirs_keys[:3])
    assert ours.batch_size == theirs.batch_size  # type: ignore[attr-defined]
    for key in theirs_keys:
        same(ours.get(key), theirs.get(key))  # type: ignore[attr-defined]


def add(suite: Suite, name: str, ours, theirs) -> None:  # type: ignore[no-untyped-def]
    same(ours(), theirs())
    suite.add(name, ours, theirs)


suite = Suite("consolidate")

source = nested_source()
# clones: each side owns its leaves, as a batch built by ops does (`source` holds the originals)
ours_td, theirs_td = TensorDict(source, [ROWS]).clone(), Upstream(source, [ROWS]).clone()
assert len(list(ours_td.keys(True, True))) == SUBS * LEAVES
add(suite, "consolidate 200 leaves (nested)", ours_td.consolidate, theirs_td.consolidate)

big = {
    f"leaf{i}": torch.randn(2 << 20, generator=torch.Generator().manual_seed(i)) for i in range(8)
}
ours_big, theirs_big = TensorDict(big), Upstream(big)
for threads in (0, 8):
    add(
        suite,
        f"consolidate 8 leaves of 8 MB, num_threads={threads}",
        lambda n=threads: ours_big.consolidate(num_threads=n),
        lambda n=threads: theirs_big.consolidate(num_threads=n),
    )

ours_c, theirs_c = ours_td.consolidate(), theirs_td.consolidate()
assert ours_c.is_consolidated() and theirs_c.is_consolidated()
add(
    suite,
    "pickle dumps+loads, consolidated 200 leaves",
    lambda: pickle.loads(pickle.dumps(ours_c)),
    lambda: pickle.loads(pickle.dumps(theirs_c)),
)
add(
    suite,
    "pickle dumps+loads, not consolidated 200 leaves",
    lambda: pickle.loads(pickle.dumps(ours_td)),
    lambda: pickle.loads(pickle.dumps(theirs_td)),
)
members = [{"obs": torch.randn(5), "act": torch.randn(3, 2), "n": {"r": torch.zeros(4)}}] * 100
ours_lazy = lazy_stack([TensorDict(m).clone() for m in members])  # members own their leaves
theirs_lazy = tensordict.lazy_stack([Upstream(m).clone() for m in members])
add(
    suite,
    "pickle dumps+loads, lazy stack of 100 members",
    lambda: pickle.loads(pickle.dumps(ours_lazy)),
    lambda: pickle.loads(pickle.dumps(theirs_lazy)),
)
assert ours_c.to("meta").is_consolidated() and theirs_c.to("meta").is_consolidated()
add(
    suite,
    'to("meta"), consolidated 200 leaves',
    lambda: ours_c.to("meta"),
    lambda: theirs_c.to("meta"),
)
add(
    suite,
    'to("meta", non_blocking=True), consolidated',
    lambda: ours_c.to("meta", non_blocking=True),
    lambda: theirs_c.to("meta", non_blocking=True),
)
add(
    suite,
    "to(float64), consolidated 200 leaves",
    lambda: ours_c.to(torch.float64),
    lambda: theirs_c.to(torch.float64),
)
if torch.cuda.is_available():
    add(
        suite,
        'to("cuda", non_blocking=True), consolidated',
        lambda: ours_c.to("cuda", non_blocking=True),
        lambda: theirs_c.to("cuda", non_blocking=True),
    )


# ---------------------------------------------------------------- DataLoader
def dataset_source() -> dict[str, torch.Tensor]:
    row = torch.arange(DATASET_ROWS)
    image = (row.view(-1, 1, 1) % 251).to(torch.uint8).expand(-1, 4, 4).contiguous()
    return {"row": row, "image": image, "label": row % 10}


def identity(batch: object) -> object:
    return batch


def loader(dataset: object) -> DataLoader:
    return DataLoader(
        dataset,  # type: ignore[arg-type]
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        collate_fn=identity,
        multiprocessing_context="fork",
        persistent_workers=True,
        generator=torch.Generator().manual_seed(0),
    )


def epoch(data: DataLoader) -> int:
    return sum(batch["label"].shape[0] for batch in data)


rows = dataset_source()
ours_ds = TensorDict(rows, [DATASET_ROWS]).memmap(f"{_tmp}/td")
theirs_ds = Upstream(rows, [DATASET_ROWS]).memmap(f"{_tmp}/upstream")
ours_loader, theirs_loader = loader(ours_ds), loader(theirs_ds)
first_ours, first_theirs = next(iter(ours_loader)), next(iter(theirs_loader))
same(first_ours, first_theirs)  # same sampler seed: the same rows, in the same order
DATALOADER = "DataLoader epoch, 100k memmapped rows, 2 workers"
suite.add(DATALOADER, lambda: epoch(ours_loader), lambda: epoch(theirs_loader))


if __name__ == "__main__":
    for case in suite.main():
        if case.name == DATALOADER:
            print(
                f"\nDataLoader throughput: td {DATASET_ROWS / case.times['td']:,.0f} rows/s, "
                f"upstream {DATASET_ROWS / case.times['ref']:,.0f} rows/s"
            )
