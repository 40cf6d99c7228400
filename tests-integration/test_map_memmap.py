"""td-core's ``TensorDict.map`` over data sets memory-mapped by td-memmap.

Chunks of a memory-mapped TensorDict reach the workers as mappings of the same
files (pickled as file names), so a function that writes into its chunk in
place fills the files, and one that returns new values reads only its chunk.
"""

import pytest
import torch

from td_core import TensorDict

ROWS = 24


def fill(chunk):
    # a worker writes its rows (or its one row, with chunksize=0) in place
    index = chunk["index"]
    chunk["images"].copy_(
        (index[..., None, None] * 10 + torch.arange(4).view(2, 2)).to(torch.uint8)
    )
    chunk["labels"].copy_(index % 3)


def brightness(chunk):
    return TensorDict(mean=chunk["images"].float().mean((-2, -1)), batch_size=chunk.batch_size)


def add_one(data):
    # upstream tensordict's ``map`` example: update the chunk with set_, return nothing
    data.set_("y", data.get("x") + 1)


def expected_images(rows=ROWS):
    index = torch.arange(rows)
    return (index.view(-1, 1, 1) * 10 + torch.arange(4).view(2, 2)).to(torch.uint8)


def dataset_with_index(folder, rows=ROWS):
    template = TensorDict(
        images=torch.zeros(rows, 2, 2, dtype=torch.uint8),
        labels=torch.zeros(rows, dtype=torch.long),
        index=torch.arange(rows),
        batch_size=[rows],
    )
    return template.memmap(folder / "data")


@pytest.mark.parametrize(
    ("chunksize", "num_chunks"), [(None, None), (5, None), (None, 4), (0, None)]
)
def test_workers_fill_a_memmapped_dataset_in_place(tmp_path, chunksize, num_chunks):
    data = dataset_with_index(tmp_path)
    out = data.map(fill, num_workers=2, chunksize=chunksize, num_chunks=num_chunks)
    # the files hold what the workers wrote: read them back from disk
    stored = TensorDict.load_memmap(tmp_path / "data")
    assert torch.equal(stored["images"], expected_images())
    assert torch.equal(stored["labels"], torch.arange(ROWS) % 3)
    # the gathered result is the filled data set
    assert out.batch_size == torch.Size([ROWS])
    assert torch.equal(out["images"], expected_images())
    assert torch.equal(data["labels"], torch.arange(ROWS) % 3)


def test_workers_fill_a_memmap_like_dataset_with_a_progress_bar(tmp_path, capsys):
    data = TensorDict(
        images=torch.zeros(2, 2, dtype=torch.uint8),
        labels=torch.zeros((), dtype=torch.long),
        index=torch.zeros((), dtype=torch.long),
    )
    data = data.expand(ROWS).memmap_like(tmp_path / "data")  # sparse files, nothing written
    assert data.is_memmap()
    data["index"].copy_(torch.arange(ROWS))
    data.map(fill, num_workers=2, chunksize=6, pbar=True)
    assert "4/4" in capsys.readouterr().err
    stored = TensorDict.load_memmap(tmp_path / "data")
    assert torch.equal(stored["images"], expected_images())
    assert torch.equal(stored["labels"], torch.arange(ROWS) % 3)


def test_workers_read_a_loaded_dataset(tmp_path):
    fill(dataset_with_index(tmp_path))  # filled in this process
    loaded = TensorDict.load_memmap(tmp_path / "data")  # shared read-write mappings
    out = loaded.map(brightness, num_workers=2, chunksize=7)
    assert torch.equal(out["mean"], expected_images().float().mean((-2, -1)))
    # reading never writes: the files are unchanged
    assert torch.equal(TensorDict.load_memmap(tmp_path / "data")["images"], expected_images())


def test_upstream_map_example_on_a_memmapped_tensordict(tmp_path):
    data = TensorDict(x=torch.zeros(1, 1000), y=torch.zeros(1, 1000), batch_size=[1, 1000])
    data = data.memmap_(tmp_path / "data")
    out = data.map(add_one, dim=1, num_workers=2)
    assert torch.equal(out["y"], torch.ones(1, 1000))
    assert torch.equal(TensorDict.load_memmap(tmp_path / "data")["y"], torch.ones(1, 1000))
