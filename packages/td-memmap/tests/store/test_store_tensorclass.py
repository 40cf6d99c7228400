"""Tensorclasses in a TensorDictStore: stored as fields, read back as the class over the store."""

from __future__ import annotations

import pytest
import torch

from td_core import TensorDict, tensorclass
from td_memmap import TensorDictStore


@tensorclass
class Sample:
    obs: torch.Tensor
    reward: torch.Tensor
    label: str = "none"


def _sample() -> Sample:
    return Sample(obs=torch.randn(5, 3), reward=torch.arange(5.0), label="hi", batch_size=[5])


@pytest.fixture
def stored(redis_server):
    tc = _sample()
    store = TensorDictStore.from_tensordict(tc, port=redis_server.port)
    yield tc, store
    store.clear_redis()
    store.close()


def test_to_store_gives_the_class_over_the_store_and_writes_reach_the_server(redis_server):
    tc = _sample()
    out = tc.to_store(port=redis_server.port)
    try:
        assert type(out) is Sample and isinstance(out._tensordict, TensorDictStore)
        assert torch.equal(out.obs, tc.obs) and out.label == "hi"
        out.obs = torch.zeros(5, 3)
        out[1] = Sample(obs=torch.ones(3), reward=torch.tensor(-1.0), label="hi", batch_size=[])
        out.reward += 10
        again = TensorDictStore.from_store(port=redis_server.port, td_id=out._tensordict.td_id)
        assert again["obs"].sum().item() == 3.0
        assert again["reward"].tolist() == [10.0, 9.0, 12.0, 13.0, 14.0]
    finally:
        out._tensordict.clear_redis()


def test_from_store_finds_the_recorded_class(stored, redis_server):
    tc, store = stored
    back = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
    assert type(back) is Sample and back.label == "hi"
    assert torch.equal(back.reward, tc.reward)
    plain = TensorDictStore.from_tensordict(
        TensorDict(x=torch.zeros(2), batch_size=[2]), port=redis_server.port
    )
    try:
        assert (
            type(TensorDictStore.from_store(port=redis_server.port, td_id=plain.td_id))
            is TensorDictStore
        )
    finally:
        plain.clear_redis()


@pytest.mark.parametrize("given", [Sample, f"{__name__}.Sample", f"{__name__}:Sample"], ids=str)
def test_from_store_takes_the_class_or_its_path(stored, redis_server, given):
    _, store = stored
    back = TensorDictStore.from_store(
        port=redis_server.port, td_id=store.td_id, tensorclass_cls=given
    )
    assert type(back) is Sample


def test_a_path_to_no_loaded_tensorclass_is_refused_and_nothing_is_imported(stored, redis_server):
    _, store = stored
    with pytest.raises(ValueError, match=r"never\.imported\.pkg\.Thing"):
        TensorDictStore.from_store(
            port=redis_server.port, td_id=store.td_id, tensorclass_cls="never.imported.pkg.Thing"
        )
    with pytest.raises(TypeError, match="not a tensorclass"):
        TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id, tensorclass_cls=dict)


def test_a_recorded_class_that_is_not_loaded_gives_the_store_with_a_warning(stored, redis_server):
    _, store = stored
    redis_server.client().hset(store._srv.meta_key, "tensorclass", "never_imported_mod:Thing")
    with pytest.warns(UserWarning, match="never_imported_mod:Thing"):
        back = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
    assert type(back) is TensorDictStore and back["reward"].shape == torch.Size([5])


def test_a_non_tensor_stack_written_at_an_index_of_a_nested_batch(redis_server):
    # the non-tensor leaf has its TensorDict's batch size ([5, 1]), not the root's ([5])
    source = TensorDict({"r": torch.zeros(5), "chat": TensorDict({}, [5, 1])}, [5])
    source["chat"].set_non_tensor("role", "init")
    store = TensorDictStore.from_tensordict(source, port=redis_server.port)
    try:
        row = TensorDict({"r": torch.tensor(1.0), "chat": TensorDict({}, [1])})
        row["chat"]["role"] = TensorDict({"role": ["user"]}, [1]).get("role")
        expected = source.clone()
        expected[0] = row
        store[0] = row
        assert (
            store.to_tensordict()["chat"].get("role").tolist()
            == expected["chat"].get("role").tolist()
        )
        assert store[0]["chat"].get("role").tolist() == ["user"]
    finally:
        store.clear_redis()
