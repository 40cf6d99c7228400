"""to_mds: MDS datasets read back with mosaicml-streaming's own reader."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from streaming.base.local import LocalDataset

from td_core import LazyStackedTensorDict, TensorDict

# streaming's LocalDataset opens its index.json without closing it
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning", "ignore::ResourceWarning"
)


def test_rows_read_back_with_streaming(tmp_path):
    td = TensorDict(
        a=torch.tensor([0, 1, 2]),
        x=torch.tensor([0.5, 1.5, 2.5]),
        c=torch.tensor([[4, 5], [6, 7], [8, 9]]),
        d=["a string!", "another string!", "again!"],
        batch_size=[3],
    )
    td.to_mds(out=str(tmp_path))
    dataset = LocalDataset(local=str(tmp_path))
    assert len(dataset) == 3
    for i in range(3):
        sample = dataset[i]
        assert sample["a"] == i
        assert sample["x"] == pytest.approx(0.5 + i)
        np.testing.assert_array_equal(sample["c"], td["c"][i].numpy())
        assert sample["d"] == td[i]["d"]


def test_lazy_stack_with_ragged_leaves(tmp_path):
    td = LazyStackedTensorDict(
        TensorDict(a=0, c=torch.randn(2), d="one"),
        TensorDict(a=1, c=torch.randn(3), d="two"),
        stack_dim=0,
    )
    td.to_mds(out=str(tmp_path), columns={"a": "int", "c": "ndarray", "d": "str"})
    dataset = LocalDataset(local=str(tmp_path))
    rows = [
        {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in dataset[i].items()}
        for i in range(2)
    ]  # the reader's arrays are read-only views of the shard
    back = LazyStackedTensorDict(*[TensorDict(row) for row in rows], stack_dim=0)
    assert back[1]["d"] == "two"
    assert torch.equal(torch.as_tensor(back.tensordicts[1]["c"]), td.tensordicts[1]["c"])


def test_nested_and_empty_refused(tmp_path):
    nested = TensorDict(a={"b": torch.zeros(2)}, batch_size=[2])
    with pytest.raises(ValueError, match=r"'a'.*flatten_keys"):
        nested.to_mds(out=str(tmp_path / "n"))
    assert not (tmp_path / "n").exists()
    with pytest.raises(ValueError, match="empty"):
        TensorDict(a=torch.zeros(0), batch_size=[0]).to_mds(out=str(tmp_path / "e"))
