"""Every package on a CUDA device: moves, transfers, saving and loading, modules, hashing.

Skipped where torch sees no CUDA device (CI's machines); run on a GPU machine with
`pytest tests-integration/test_cuda.py`.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictParams,
    lazy_stack,
    set_lazy_legacy,
    tensorclass,
)
from td_distributions import CompositeDistribution
from td_nn import ProbabilisticTensorDictModule, TensorDictModule, TensorDictSequential
from td_query import QueryModule, SipHash

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@tensorclass
class Batch:
    obs: torch.Tensor
    reward: torch.Tensor


def _nested(n: int = 6) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "obs": torch.randn(n, 3, generator=gen),
            "next": {"obs": torch.randn(n, 3, generator=gen), "done": torch.zeros(n, 1).bool()},
            "step": torch.arange(n),
        },
        batch_size=[n],
    )


def _leaves(td: object) -> list[torch.Tensor]:
    """Every tensor leaf (a lazy stack's member by member: ragged entries do not stack)."""
    if isinstance(td, LazyStackedTensorDict):
        return [leaf for member in td.tensordicts for leaf in _leaves(member)]
    return list(td.values(include_nested=True, leaves_only=True))  # type: ignore[attr-defined]


def _same(a: TensorDict, b: TensorDict) -> None:
    assert a.batch_size == b.batch_size
    for key, value in a.items(include_nested=True, leaves_only=True):
        torch.testing.assert_close(value.cpu(), b.get(key).cpu(), msg=str(key))


@pytest.mark.parametrize("non_blocking", [False, True])
def test_every_kind_moves_to_cuda_and_back(non_blocking: bool) -> None:
    dense = _nested()
    lazy = lazy_stack([dense[:3], dense[3:]], dim=0)
    ragged = lazy_stack([TensorDict(x=torch.ones(2, 4)), TensorDict(x=torch.ones(3, 4))])
    batch = Batch(obs=torch.randn(4, 3), reward=torch.zeros(4, 1), batch_size=[4])
    for td in (dense, lazy, ragged, batch):
        gpu = td.to("cuda", non_blocking=non_blocking)
        if non_blocking:
            torch.cuda.synchronize()
        assert type(gpu) is type(td)
        assert gpu.device == torch.device("cuda", 0)
        assert all(v.is_cuda for v in _leaves(gpu)), type(td).__name__
        back = gpu.cpu()
        for ours, theirs in zip(_leaves(back), _leaves(td), strict=True):
            assert not ours.is_cuda
            torch.testing.assert_close(ours, theirs)
    assert isinstance(ragged.cuda(), LazyStackedTensorDict)


def test_arithmetic_and_reductions_stay_on_cuda() -> None:
    td = _nested().float().cuda()
    out = (td * 2 + 1).sum(dim=0)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out["obs"].cpu(), (_nested()["obs"] * 2 + 1).sum(0))
    td.lerp_(td.clone().zero_(), 0.5)
    torch.testing.assert_close(td["obs"].cpu(), _nested()["obs"] / 2)


def test_consolidated_moves_one_buffer_and_stays_consolidated() -> None:
    td = _nested().consolidate()
    gpu = td.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert gpu.is_consolidated()
    _same(td, gpu)
    storages = {v.untyped_storage().data_ptr() for v in _leaves(gpu)}
    assert len(storages) == 1


def test_pin_memory_then_non_blocking_transfer() -> None:
    pinned = _nested().pin_memory()
    assert all(v.is_pinned() for v in _leaves(pinned))
    gpu = pinned.to("cuda", non_blocking=True)
    gpu.record_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    _same(_nested(), gpu)


def test_memmap_of_a_cuda_tensordict_round_trips(tmp_path) -> None:
    pytest.importorskip("td_memmap")
    gpu = _nested().cuda()
    saved = gpu.memmap(tmp_path / "td")
    loaded = TensorDict.load_memmap(tmp_path / "td")
    _same(gpu, loaded)
    assert loaded.to("cuda")["next", "obs"].is_cuda
    assert saved["obs"].device.type == "cpu"  # memory-mapped files live in host memory


def test_modules_run_on_cuda() -> None:
    torch.manual_seed(0)
    net = nn.Linear(3, 4).cuda()
    policy = TensorDictSequential(
        TensorDictModule(net, in_keys=["obs"], out_keys=["loc"]),
        TensorDictModule(lambda loc: loc.exp(), in_keys=["loc"], out_keys=["scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=torch.distributions.Normal,
            return_log_prob=True,
        ),
    )
    td = policy(_nested().cuda())
    assert td["action"].is_cuda and td["action"].shape == (6, 4)
    assert td["action_log_prob"].is_cuda


def test_composite_distribution_samples_on_cuda() -> None:
    params = TensorDict(
        {
            "cont": {"loc": torch.zeros(5, 2), "scale": torch.ones(5, 2)},
            "disc": {"logits": torch.zeros(5, 3)},
        },
        batch_size=[5],
    ).cuda()
    dist = CompositeDistribution(
        params,
        distribution_map={
            "cont": torch.distributions.Normal,
            "disc": torch.distributions.Categorical,
        },
    )
    sample = dist.sample()
    assert sample["cont"].is_cuda and sample["disc"].is_cuda
    log_prob = dist.log_prob(sample)
    assert (
        all(v.is_cuda for v in _leaves(log_prob))
        if isinstance(log_prob, TensorDict)
        else (log_prob.is_cuda)
    )


def test_hashing_on_cuda_matches_the_cpu() -> None:
    rows = torch.randint(0, 255, (64, 8), dtype=torch.uint8)
    rows[32:] = rows[:32]
    torch.testing.assert_close(SipHash()(rows.cuda()).cpu(), SipHash()(rows))
    query = QueryModule(in_keys=["x"], index_key="id").cuda()
    ids = query(TensorDict(x=rows.cuda(), batch_size=[64]))["id"]
    assert ids.is_cuda
    torch.testing.assert_close(ids[32:], ids[:32])


CUDA = torch.device("cuda", 0)


def _with_text() -> TensorDict:
    """`_nested` with a string per row (a `NonTensorStack`)."""
    td = _nested()
    td["tag"] = NonTensorStack(*(NonTensorData(c) for c in "abcdef"))
    return td


_MASKED_KINDS = {
    "dense": _nested,
    "lazy": lambda: lazy_stack(list(_nested().unbind(0)), dim=0),
    "tensorclass": lambda: Batch(obs=_nested()["obs"], reward=_nested()["step"], batch_size=[6]),
    "with_text": _with_text,
}


@pytest.mark.parametrize("kind", sorted(_MASKED_KINDS))
def test_a_cuda_mask_reads_and_writes_like_a_cpu_one(kind: str) -> None:
    """`td[mask]`, `td[mask] = v` and `masked_fill` with a mask on the TensorDict's device
    (torch refuses to index a CPU stand-in with it)."""
    on_cpu = _MASKED_KINDS[kind]()
    mask = torch.tensor([True, False, True, True, False, True])
    gpu, gpu_mask = on_cpu.to(CUDA), mask.to(CUDA)
    picked = gpu[gpu_mask]
    assert picked.batch_size == (4,)
    for ours, theirs in zip(_leaves(picked.cpu()), _leaves(on_cpu[mask]), strict=True):
        torch.testing.assert_close(ours, theirs)
    if kind == "with_text":
        assert picked["tag"].tolist() == ["a", "c", "d", "f"]
    gpu[gpu_mask] = picked.apply(torch.zeros_like)
    on_cpu[mask] = on_cpu[mask].apply(torch.zeros_like)
    for ours, theirs in zip(_leaves(gpu.cpu()), _leaves(on_cpu), strict=True):
        torch.testing.assert_close(ours, theirs)
    filled = gpu.apply(lambda t: t.float()).masked_fill(gpu_mask, 7.0)
    expected = on_cpu.apply(lambda t: t.float()).masked_fill(mask, 7.0)
    for ours, theirs in zip(_leaves(filled.cpu()), _leaves(expected), strict=True):
        torch.testing.assert_close(ours, theirs)


def test_new_tensor_lives_where_its_data_does() -> None:
    """As upstream: `new_tensor(data)` is on `data`'s device unless `device=` says otherwise."""
    gpu = _nested().float().to(CUDA)
    with pytest.warns(UserWarning, match="copy construct"):
        from_cpu = gpu.new_tensor(torch.zeros(2))
        from_gpu = gpu.new_tensor(torch.zeros(2, device=CUDA))
    assert from_cpu.device == torch.device("cpu") and not from_cpu["obs"].is_cuda
    assert from_gpu.device == CUDA and from_gpu["obs"].is_cuda
    assert gpu.new_tensor([1.0, 2.0], device=CUDA)["obs"].is_cuda


def test_a_parent_modules_to_moves_tensordict_params_and_their_device() -> None:
    params = TensorDictParams(TensorDict(w=torch.ones(3), b={"x": torch.zeros(2)}, device="cpu"))
    parent = nn.ModuleList([params]).to(CUDA)
    assert params.device == CUDA and params["b"].device == CUDA
    assert all(p.is_cuda for p in parent.parameters())
    parent.cpu()
    assert params.device == torch.device("cpu") and not params["w"].is_cuda


def test_memmap__of_a_lazy_view_of_a_cuda_tensordict_records_the_cpu(tmp_path) -> None:
    """`memmap_` through a legacy lazy view replaces its source's leaves by files in host
    memory: the source (whose device the view reports) says it is on the CPU."""
    pytest.importorskip("td_memmap")
    source = _nested().reshape(2, 3).to(CUDA)
    with set_lazy_legacy(True):
        view = source.permute(1, 0)
    expected = view.to_tensordict().cpu()
    assert view.memmap_(tmp_path / "td") is view
    assert view.device == torch.device("cpu") and source.device == torch.device("cpu")
    assert not any(leaf.is_cuda for leaf in _leaves(source))
    _same(expected, TensorDict.load_memmap(tmp_path / "td"))
