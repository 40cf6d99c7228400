"""A tour of td on a generated data set.

Run it with ``uv run python docs/examples/tour.py`` (``--rows``, ``--quick``).
Each step prints what it did and how long it took.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

import td_core
from td_core import TensorDict


@contextmanager
def step(title: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    print(f"  [{(time.perf_counter() - start) * 1e3:7.1f} ms] {title}")


def make_dataset(rows: int, generator: torch.Generator) -> TensorDict:
    """A synthetic labelled image data set with nested metadata."""
    images = torch.randint(0, 256, (rows, 3, 16, 16), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (rows,), generator=generator)
    return TensorDict(
        {
            "images": images,
            "labels": labels,
            "meta": {"brightness": images.float().mean((1, 2, 3)), "index": torch.arange(rows)},
        },
        batch_size=[rows],
    )


def tour_core(rows: int) -> None:
    print(f"td-core {td_core.__version__} (torch {torch.__version__})")
    gen = torch.Generator().manual_seed(0)
    with step(f"generated a data set of {rows} rows"):
        data = make_dataset(rows, gen)
    data["source"] = "synthetic"  # any Python value rides along with the batch
    print(data[:2])

    with step("indexed it like a tensor: a mask, a slice, an index tensor"):
        bright = data[data["meta", "brightness"] > 127.5]
        head = data[:8]
        picked = data[torch.tensor([3, 1, 4, 1, 5])]
    print(
        f"    {bright.batch_size[0]} bright rows; head {list(head.batch_size)}; picked {picked['labels'].tolist()}"
    )

    with step("reshaped the batch into minibatches of 32, then cast images to float"):
        usable = rows - rows % 32
        batches = data[:usable].reshape(-1, 32)
        floats = batches.apply(lambda x: x.float() / 255 if x.dtype == torch.uint8 else x)
    print(
        f"    batches {list(batches.batch_size)}; images {floats['images'].dtype}, source {floats[0, 0]['source']!r}"
    )

    with step("pre-allocated an empty TensorDict and filled it row by row"):
        stats = TensorDict(batch_size=[10])
        for label in range(10):
            rows_of = data.select("meta")[data["labels"] == label]
            stats[label] = TensorDict(
                {
                    "count": torch.tensor(rows_of.batch_size[0]),
                    "mean": {"brightness": rows_of["meta", "brightness"].mean()},
                },
                [],
            )
    print(f"    rows per label {stats['count'].tolist()}")

    with step("stacked, split and compared whole TensorDicts"):
        halves = data.split(rows // 2)
        again = torch.cat(halves, 0)
        same = bool((again == data).all())
    print(f"    split in {len(halves)} then concatenated back: identical = {same}")

    flat = data.flatten_keys(".")
    print(f"    flat keys: {sorted(flat.keys())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the generated data set")
    parser.add_argument("--quick", action="store_true", help="a small, fast run (used by CI)")
    args = parser.parse_args()
    rows = 2_000 if args.quick else args.rows
    start = time.perf_counter()
    tour_core(rows)
    print(f"done in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
