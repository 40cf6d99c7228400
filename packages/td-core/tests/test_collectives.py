"""Collectives (all_reduce, reduce, broadcast, all_gather, scatter, gather_and_stack) over 2 and 3 gloo processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import datetime, sys
    import torch
    import torch.distributed as dist
    from td_core import TensorDict, lazy_stack, tensorclass

    rank, world, store, modes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))

    def make(r):
        return TensorDict({"a": torch.full((2,), float(r)), "n": {"b": torch.full((2, 3), r)},
                           "mask": torch.ones(2, dtype=torch.bool)}, [2])

    @tensorclass
    class Pair:
        a: torch.Tensor
        b: torch.Tensor

    for mode in modes.split(","):  # one process group runs every case in turn
        total = sum(range(world))
        if mode == "all_reduce":
            td = make(rank)
            assert td.all_reduce() is None
            assert (td["a"] == total).all() and (td["n", "b"] == total).all(), td["a"]
        elif mode == "all_reduce_buckets":
            td = TensorDict({f"k{i}": torch.full((3,), float(rank + i)) for i in range(7)}, [3])
            td.all_reduce(bucket_bytes=20)
            for i in range(7):
                assert (td[f"k{i}"] == total + world * i).all()
        elif mode == "all_reduce_async":
            td = make(rank)
            for work in td.all_reduce(async_op=True):
                work.wait()
            assert (td["a"] == total).all()
        elif mode == "all_reduce_lazy":
            td = lazy_stack([make(rank)[0], make(rank)[1]], 0)
            td.all_reduce(op=dist.ReduceOp.MAX)
            assert (td.tensordicts[0]["a"] == world - 1).all()
        elif mode == "reduce":
            td = make(rank + 1)
            td.reduce(0)
            if rank == 0:
                assert (td["a"] == sum(range(1, world + 1))).all()
        elif mode == "reduce_async":
            td = make(rank + 1)
            big = torch.full((1 << 16,), float(rank + 1))
            td["big"] = big.expand(2, -1).clone()
            # without return_premature the call waits: the values are final on return
            assert td.reduce(0, async_op=True) is None
            if rank == 0:
                assert (td["big"] == sum(range(1, world + 1))).all()
            works = td.reduce(0, async_op=True, return_premature=True)
            assert isinstance(works, list) and works
            for work in works:
                work.wait()
        elif mode == "broadcast":
            src = world - 1
            if rank == src:
                td = make(7)
                td["label"] = "hi"
                out = td.broadcast(src)
                assert out.is_consolidated()
            else:
                out = TensorDict().broadcast(src)
            assert out.batch_size == torch.Size([2]) and out["label"] == "hi"
            assert (out["n", "b"] == 7).all() and out["mask"].dtype == torch.bool
        elif mode == "tensorclass":  # the class travels with the data (upstream's MyDistData cases)
            if rank == 0:
                tc = Pair(a=torch.ones(3), b=torch.ones(3, 2), batch_size=[3])
            else:
                tc = Pair(a=torch.zeros(1), b=torch.zeros(1), batch_size=[])
            out = tc.broadcast(src=0)
            assert type(out) is Pair and (out.a == 1).all() and out.is_consolidated(), out
            tc = Pair(a=torch.full((2,), float(rank)), b=torch.ones(2, 2), batch_size=[2])
            assert tc.all_reduce() is None and type(tc) is Pair
            assert (tc.a == total).all()
            gathered = tc.all_gather()
            assert all(type(g) is Pair for g in gathered), [type(g) for g in gathered]
        elif mode == "all_gather":
            td = TensorDict({"a": torch.full((rank + 1,), float(rank))}, [rank + 1])
            tds = td.all_gather()
            assert [t.batch_size[0] for t in tds] == list(range(1, world + 1))
            assert [t["a"][0].item() for t in tds] == [float(r) for r in range(world)]
        elif mode == "gather_and_stack":
            if rank == 0:
                out = make(0).expand(world - 1, 2).clone().zero_()
                td = out.gather_and_stack(0)
                assert td is out
                for row, r in enumerate(range(1, world)):
                    assert (out[row]["a"] == r).all()
            else:
                assert make(rank).gather_and_stack(0) is None
        elif mode == "scatter":
            src = world - 1
            tds = None
            if rank == src:
                tds = [TensorDict({"a": torch.full((r + 1,), float(r)), "label": f"r{r}",
                                   "n": {"b": torch.full((r + 1, 2), r)}}, [r + 1])
                       for r in range(world)]
            out = TensorDict().scatter(src, tds)
            assert out.batch_size == torch.Size([rank + 1]), out.batch_size
            assert (out["a"] == rank).all() and out["label"] == f"r{rank}"
            assert out["n", "b"].dtype == torch.int64 and (out["n", "b"] == rank).all()
        elif mode == "scatter_wrong_count":
            if rank == 0:
                try:
                    TensorDict().scatter(0, [TensorDict()] * (world + 1))
                except ValueError as err:
                    assert "one TensorDict per rank" in str(err)
                else:
                    raise AssertionError("no error")
        dist.barrier()
    dist.destroy_process_group()
    print("ok", rank)
    """
)


def _run(tmp_path, mode: str, world: int) -> None:
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    store = str(tmp_path / "rendezvous")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(world), store, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=120))
    finally:
        for p in procs:
            p.kill()
    for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{err[-3000:]}"
        assert f"ok {rank}" in out


TWO_RANK_CASES = [
    "mode",
    "all_reduce",
    "all_reduce_buckets",
    "all_reduce_async",
    "all_reduce_lazy",
    "reduce",
    "reduce_async",
    "broadcast",
    "tensorclass",
    "all_gather",
    "gather_and_stack",
    "scatter",
    "scatter_wrong_count",
]
THREE_RANK_CASES = ["all_reduce", "all_gather", "gather_and_stack", "scatter"]


def test_collectives_two_ranks(tmp_path) -> None:
    """Every case in turn in one 2-rank process group (one spawn: CI runs on 2 cores)."""
    _run(tmp_path, ",".join(TWO_RANK_CASES), 2)


def test_collectives_three_ranks(tmp_path) -> None:
    _run(tmp_path, ",".join(THREE_RANK_CASES), 3)


def test_without_a_process_group_names_the_fix() -> None:
    import torch

    from td_core import TensorDict

    with pytest.raises(RuntimeError, match="init_process_group"):
        TensorDict({"a": torch.zeros(2)}, [2]).all_reduce()
