"""send/recv/isend/irecv and init_remote/from_remote_init between 2 local processes (gloo)."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    from td_core import TensorDict

    rank, store, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    # a file rendezvous: no fixed port that another process could take first
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=__import__("datetime").timedelta(seconds=30))

    def make(fill):
        return TensorDict({"a": torch.full((), fill), ("b", "c"): torch.full((3,), fill)}, [])

    if mode == "sync":
        if rank == 1:
            make(1.0).send(dst=0)
        else:
            data = make(0.0)
            data.recv(src=1)
            assert (data["a"] == 1).all() and (data["b", "c"] == 1).all(), data
    elif mode == "async":
        if rank == 1:
            make(2.0).isend(dst=0)
        else:
            data = make(0.0)
            data.irecv(src=1)
            assert (data["b", "c"] == 2).all()
    elif mode == "remote":
        if rank == 1:
            TensorDict({"x": torch.arange(6).view(2, 3), "n": {"y": torch.ones(2, dtype=torch.bool)}}, [2]).init_remote(dst=0)
        else:
            got = TensorDict.from_remote_init(src=1)
            assert got.batch_size == torch.Size([2])
            assert torch.equal(got["x"], torch.arange(6).view(2, 3)) and got["n", "y"].dtype == torch.bool
    dist.barrier()
    dist.destroy_process_group()
    print("ok", rank)
    """
)


@pytest.mark.parametrize("mode", ["sync", "async", "remote"])
def test_two_processes(tmp_path, mode):
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    store = str(tmp_path / "rendezvous")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), store, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"{mode}: a rank did not finish within 90 s")
        outputs.append((proc.returncode, out, err))
    for rank, (code, out, err) in enumerate(outputs):
        assert code == 0, f"rank {rank} failed:\n{err}"
        assert f"ok {rank}" in out
