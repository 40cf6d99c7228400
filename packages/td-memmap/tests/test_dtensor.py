"""Distributed leaves (`DTensor`): saved as the whole tensor they shard, as upstream."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Shard, distribute_tensor

from td_core import TensorDict
from td_memmap import MemoryMappedTensor, load_memmap


def test_dtensor_leaves_are_saved_whole(tmp_path):
    # one rank is enough to build DTensors; full_tensor() is then a collective of one
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        mesh = DeviceMesh("cpu", torch.arange(1))
        weight = torch.randn(4, 3)
        sharded = nn.Parameter(distribute_tensor(weight, mesh, [Shard(0)]))
        td = TensorDict({"w": sharded, "plain": torch.ones(2)})
        out = td.memmap(tmp_path / "saved")
        assert type(out["w"]) is MemoryMappedTensor and torch.equal(out["w"], weight)
        assert torch.equal(load_memmap(tmp_path / "saved")["w"], weight)
        anonymous = td.memmap()  # shared memory: the same gather
        assert torch.equal(anonymous["w"], weight)
        single = MemoryMappedTensor.from_tensor(sharded.detach())
        assert torch.equal(single, weight)
    finally:
        dist.destroy_process_group()
