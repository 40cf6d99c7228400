"""send/recv/isend/irecv and init_remote/from_remote_init between 2 local processes (gloo)."""

import inspect
import subprocess
import sys
import textwrap

import pytest
import torch

from td_core import TensorDict
from td_core.errors import NotAPipeError, NotConsolidatedError

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    from td_core import TensorDict

    from td_core import tensorclass

    rank, store, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    # a file rendezvous: no fixed port that another process could take first
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=__import__("datetime").timedelta(seconds=30))

    def make(fill):
        return TensorDict({"a": torch.full((), fill), ("b", "c"): torch.full((3,), fill)}, [])

    @tensorclass
    class Pair:
        a: torch.Tensor
        b: torch.Tensor

    if mode in ("sync", "async"):
        send, recv, fill = ("send", "recv", 1.0) if mode == "sync" else ("isend", "irecv", 2.0)
        if rank == 1:
            getattr(make(fill), send)(dst=0)
        else:
            data = make(0.0)
            getattr(data, recv)(src=1)
            assert (data["a"] == fill).all() and (data["b", "c"] == fill).all(), data
    elif mode == "remote":
        if rank == 1:
            TensorDict({"x": torch.arange(6).view(2, 3), "n": {"y": torch.ones(2, dtype=torch.bool)}}, [2]).init_remote(dst=0)
        else:
            got = TensorDict.from_remote_init(src=1)
            assert got.batch_size == torch.Size([2])
            assert torch.equal(got["x"], torch.arange(6).view(2, 3)) and got["n", "y"].dtype == torch.bool
    elif mode == "remote_tensorclass":  # the receiver asks a plain TensorDict, gets the class
        if rank == 1:
            Pair(a=torch.ones(3), b=torch.ones(3, 2), batch_size=[3]).init_remote(dst=0)
        else:
            got = TensorDict.from_remote_init(src=1)
            assert type(got) is Pair and got.is_consolidated(), type(got)
            assert (got.a == 1).all() and (got.b == 1).all()
    dist.barrier()
    dist.destroy_process_group()
    print("ok", rank)
    """
)


P2P_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    from td_core import LazyStackedTensorDict, TensorDict, tensorclass

    rank, store = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=__import__("datetime").timedelta(seconds=30))
    group = dist.new_group([0, 1])
    peer = 1 - rank

    @tensorclass
    class Pair:
        x: torch.Tensor
        n: TensorDict

    def base(fill, i=0):
        # distinct values per leaf: a transfer that mixes leaves up shows
        return TensorDict({"a": torch.arange(3.0) + fill + 10 * i,
                           ("b", "c"): torch.arange(6).view(3, 2) + int(fill) + 100 * i,
                           ("b", "d"): torch.arange(3, dtype=torch.float64) - fill - i}, [3])

    def make(kind, fill):
        if kind == "dense":
            return TensorDict({"z": torch.arange(3.0) + fill, "y": torch.ones(3, 2) * fill}, [3])
        if kind == "nested":
            return base(fill)
        if kind == "lazy":
            return LazyStackedTensorDict.lazy_stack([base(fill, 0), base(fill, 1)], 1)
        return Pair(x=torch.arange(3.0) * fill, n=base(fill), batch_size=[3])

    def leaves(td):
        return {k: td.get(k) for k in td.keys(include_nested=True, leaves_only=True)}

    def check(got, kind, fill, what):
        want = leaves(make(kind, fill))
        have = leaves(got)
        assert set(have) == set(want), (what, kind, sorted(have))
        for k in want:
            assert torch.equal(have[k], want[k]), (what, kind, k, have[k], want[k])

    def count(kind):
        return len(leaves(make(kind, 0))) if kind != "lazy" else 2 * len(leaves(base(0)))

    for kind in ("dense", "nested", "lazy", "tensorclass"):
        n = count(kind)
        if rank == 1:
            assert make(kind, 1.0).send(dst=peer) is None
            make(kind, 2.0).send(dst=peer, init_tag=7, pseudo_rand=True)
            assert make(kind, 3.0).isend(dst=peer, init_tag=3) == 3 + n - 1
            works = make(kind, 4.0).isend(dst=peer, return_early=True, pseudo_rand=True)
            assert len(works) == n
            for work in works:
                work.wait()
            make(kind, 5.0).send(group=group, group_dst=0)
            make(kind, 6.0).isend(group=group, group_dst=0)
            assert make(kind, 7.0).send(dst=peer, consolidated=True) is None
            works = make(kind, 8.0).consolidate().isend(dst=peer, consolidated=True,
                                                         return_early=True)
            for work in works:
                work.wait()
            make(kind, 9.0).isend(group=group, group_dst=0, consolidated=True)
            assert make(kind, 10.0).init_remote(dst=peer) is None
            make(kind, 11.0).send(dst=peer, consolidated=True)
        else:
            td = make(kind, 0.0)
            assert td.recv(src=peer) == n - 1
            check(td, kind, 1.0, "recv")
            td.recv(src=peer, init_tag=7, pseudo_rand=True)
            check(td, kind, 2.0, "recv pseudo_rand")
            assert td.irecv(src=peer, init_tag=3) is None
            check(td, kind, 3.0, "irecv")
            works = td.irecv(src=peer, return_premature=True, pseudo_rand=True)
            assert len(works) == n
            for work in works:
                work.wait()
            check(td, kind, 4.0, "irecv return_premature")
            td.recv(group=group, group_src=1)
            check(td, kind, 5.0, "recv group_src")
            td.irecv(group=group, group_src=1)
            check(td, kind, 6.0, "irecv group_src")
            cons = make(kind, 0.0).consolidate()
            assert cons.recv(src=peer, consolidated=True) is None
            check(cons, kind, 7.0, "recv consolidated")
            works = cons.irecv(src=peer, consolidated=True, return_premature=True)
            for work in works:
                work.wait()
            check(cons, kind, 8.0, "irecv consolidated")
            cons.recv(group=group, group_src=1, consolidated=True)
            check(cons, kind, 9.0, "recv consolidated group_src")
            got = TensorDict.from_remote_init(src=peer)
            assert got.batch_size == make(kind, 0).batch_size, (kind, got.batch_size)
            check(got, kind, 10.0, "from_remote_init")
            assert got.is_consolidated(), kind
            assert (type(got).__name__ == "LazyStackedTensorDict") == (kind == "lazy")
            got.recv(src=peer, consolidated=True)
            check(got, kind, 11.0, "recv consolidated after from_remote_init")
    if rank == 1:
        make("nested", 12.0).init_remote(group=group, use_broadcast=True)
    else:
        got = TensorDict.from_remote_init(1, group, None, True)
        check(got, "nested", 12.0, "from_remote_init use_broadcast")
    dist.barrier()
    dist.destroy_process_group()
    print("ok", rank)
    """
)


RAW_GROUP_SCRIPT = textwrap.dedent(
    """
    import datetime
    import sys
    import torch
    import torch.distributed as dist
    from td_core import TensorDict

    rank, store_path = int(sys.argv[1]), sys.argv[2]
    # a standalone pair group on a store: never registered through init_process_group/new_group
    store = dist.FileStore(store_path, 2)
    group = dist.ProcessGroupGloo(
        dist.PrefixStore("raw", store), rank, 2, datetime.timedelta(seconds=30)
    )

    def make(fill):
        return TensorDict({("a", "b"): torch.full((2,), fill), "c": torch.full((2, 3), fill)}, [2])

    for fill, pseudo_rand, send, recv in [
        (1.0, False, "send", "recv"),
        (2.0, True, "send", "recv"),
        (3.0, False, "isend", "recv"),
        (4.0, False, "isend", "irecv"),
    ]:
        if rank == 1:
            getattr(make(fill), send)(group=group, group_dst=0, pseudo_rand=pseudo_rand)
        else:
            data = make(0.0)
            getattr(data, recv)(group=group, group_src=1, pseudo_rand=pseudo_rand)
            assert (data == fill).all(), (send, recv, data["c"])
    if rank == 1:
        make(5.0).consolidate().send(group=group, group_dst=0, consolidated=True)
    else:
        data = make(0.0).consolidate()
        data.recv(group=group, group_src=1, consolidated=True)
        assert (data == 5.0).all()
    print("ok", rank)
    """
)


def _run_pair(tmp_path, script_text, *args):
    script = tmp_path / "worker.py"
    script.write_text(script_text)
    store = str(tmp_path / "rendezvous")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), store, *args],
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
            pytest.fail(f"{args}: a rank did not finish within 90 s")
        outputs.append((proc.returncode, out, err))
    for rank, (code, out, err) in enumerate(outputs):
        assert code == 0, f"rank {rank} failed:\n{err}"
        assert f"ok {rank}" in out


@pytest.mark.parametrize("mode", ["sync", "async", "remote", "remote_tensorclass"])
def test_two_processes(tmp_path, mode):
    _run_pair(tmp_path, SCRIPT, mode)


def test_point_to_point_over_a_standalone_group(tmp_path):
    """A group made on a store (unknown to torch.distributed's registry) takes group ranks."""
    _run_pair(tmp_path, RAW_GROUP_SCRIPT)


def test_point_to_point_every_kind(tmp_path):
    """send/recv/isend/irecv: tags, pseudo_rand, group ranks, consolidated, from_remote_init."""
    _run_pair(tmp_path, P2P_SCRIPT)


@pytest.mark.parametrize("method", ["send", "isend", "recv", "irecv"])
@pytest.mark.parametrize("case", ["none", "both", "no_group"])
def test_peer_argument_errors(method, case):
    """Checked before torch.distributed is touched: no process group needed."""
    peer, group_peer = ("dst", "group_dst") if "send" in method else ("src", "group_src")
    kwargs = {"none": {}, "both": {peer: 0, group_peer: 0, "group": object()}}.get(
        case, {group_peer: 0}
    )
    td = TensorDict({"a": torch.zeros(2)}, [2])
    with pytest.raises(ValueError, match=group_peer):
        getattr(td, method)(**kwargs)


@pytest.mark.parametrize("method", ["recv", "irecv"])
def test_consolidated_receive_needs_consolidated(method):
    td = TensorDict({"a": torch.zeros(2), "b": {"c": torch.zeros(3)}}, [])
    with pytest.raises(AttributeError, match="not consolidated") as info:
        getattr(td, method)(0, consolidated=True)
    assert isinstance(info.value, NotConsolidatedError)


def test_send_recv_through_a_pipe():
    seen = []

    class Pipe:
        def send(self, td):
            seen.append(td)

        def recv(self, td):
            return "received"

    td = TensorDict({"a": torch.zeros(2)}, [2])
    assert td.send(Pipe()) is None and seen == [td]
    assert td.recv(Pipe()) == "received"
    with pytest.raises(ValueError, match="group_dst"):
        td.send(Pipe(), group_dst=0, group=object())
    with pytest.raises(NotAPipeError):
        td.send("not a pipe")


def test_signatures_match_upstream():
    tensordict = pytest.importorskip("tensordict")

    def params(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    for name in ("send", "recv", "isend", "irecv"):
        assert params(getattr(TensorDict, name)) == params(getattr(tensordict.TensorDict, name))


def test_init_remote_refuses_a_lazy_stack_inside_a_tensordict():
    """Checked before anything is sent: no process group needed."""
    inner = TensorDict({"x": torch.zeros(2)}, [2])
    outer = TensorDict({"s": TensorDict.lazy_stack([inner, inner.clone()], 0)}, [2])
    with pytest.raises(ValueError, match="'s'"):
        outer.init_remote(0)


def test_init_remote_needs_a_receiver():
    with pytest.raises(ValueError, match="dst"):
        TensorDict({"x": torch.zeros(2)}, [2]).init_remote()
