"""TensorDictStore and LazyStackedTensorDictStore against a real redis-server (see conftest)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from td_core import LazyStackedTensorDict, NonTensorStack, TensorDict, UnbatchedTensor
from td_memmap import LazyStackedTensorDictStore, TensorDictStore


@pytest.fixture
def store(redis_server):
    out = TensorDictStore(port=redis_server.port, batch_size=[4])
    yield out
    out.clear_redis()
    out.close()


def _sample() -> TensorDict:
    return TensorDict(
        {
            "obs": torch.arange(12.0).view(4, 3),
            "done": torch.tensor([True, False, True, False]),
            "nested": {
                "idx": torch.arange(4, dtype=torch.int16),
                "deep": {"x": torch.ones(4, 2, 2)},
            },
            "label": "episode",
        },
        [4],
    )


def test_round_trip_nested_and_non_tensor(redis_server):
    td = _sample()
    stored = td.to_store(port=redis_server.port)
    assert isinstance(stored, TensorDictStore)
    assert stored.batch_size == torch.Size([4])
    # listed sorted at each level, as upstream (a Redis hash keeps no order once it is big)
    assert set(stored.keys(include_nested=True)) == set(td.keys(include_nested=True))
    assert list(stored.keys()) == sorted(td.keys())
    local = stored.to_tensordict()
    assert type(local) is TensorDict
    assert (local == td).all()
    assert local["nested", "idx"].dtype == torch.int16
    assert stored["label"] == "episode"
    assert isinstance(stored["nested"], TensorDictStore)
    assert stored["nested", "deep"].batch_size == torch.Size([4])


def test_non_tensor_kept_as_json(store, redis_server):
    store["label"] = "hello"
    store["stack"] = NonTensorStack.from_list(["a", "b", "c", "d"])
    raw = redis_server.client().hgetall(f"tensordict:{store.td_id}:keys")
    metas = {tuple(json.loads(k)): json.loads(v) for k, v in raw.items()}
    assert metas[("label",)] == {"kind": "non_tensor", "value": "hello"}
    assert metas[("stack",)]["values"] == ["a", "b", "c", "d"]
    assert store.get("stack").tolist() == ["a", "b", "c", "d"]


def test_set_get_keys_and_delete(store):
    store["a"] = torch.zeros(4, 2)
    store["sub", "b"] = torch.ones(4)
    assert list(store.keys()) == ["a", "sub"]
    store["a"] = torch.full((4, 5), 2.0)  # replacing keeps the key's place
    assert list(store.keys()) == ["a", "sub"]
    assert store["a"].shape == torch.Size([4, 5])
    del store["sub"]
    assert list(store.keys(include_nested=True)) == ["a"]
    assert "sub" not in store.keys()


def test_index_writes_change_only_those_rows(store, redis_server):
    store.update(_sample().exclude("label"))
    data_key = f"tensordict:{store.td_id}:data:{json.dumps(['obs'])}"
    before = redis_server.client().get(data_key)
    store[1:3] = TensorDict({"obs": -torch.ones(2, 3)}, [2])
    after = redis_server.client().get(data_key)
    row = 3 * 4  # bytes of one row of obs
    assert before[:row] == after[:row] and before[3 * row :] == after[3 * row :]
    assert after[row : 3 * row] == (-torch.ones(2, 3)).numpy().tobytes()
    # a scalar goes to every tensor leaf, a tensor index and a nested key work too
    store[torch.tensor([0, 3])] = 0
    assert store["obs"][:, 0].tolist() == [0.0, -1.0, -1.0, 0.0]
    assert store["nested", "idx"].tolist() == [0, 1, 2, 0]
    store["nested"][2] = TensorDict({"idx": torch.tensor(7, dtype=torch.int16)}, [])
    assert store["nested", "idx"].tolist() == [0, 1, 7, 0]
    assert store[1]["obs"].tolist() == [-1.0, -1.0, -1.0]
    assert store[1:3]["nested", "deep", "x"].shape == torch.Size([2, 2, 2])


def test_inplace_ops_are_written_to_the_server(store, redis_server):
    store["x"] = torch.ones(4, 2)
    store["x"] += 1
    store.apply_(lambda t: t * 3)
    again = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
    assert again["x"].eq(6).all()
    store.zero_()
    assert again["x"].eq(0).all()
    store.set_("x", torch.full((4, 2), 5.0))
    assert again["x"].eq(5).all()
    assert (store + 1)["x"].eq(6).all() and store["x"].eq(5).all()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.apply(lambda t: t * 3, inplace=True),
        lambda s: s.named_apply(lambda k, t: t * 3, inplace=True),
        lambda s: s._fast_apply(lambda t: t * 3, inplace=True),
    ],
    ids=["apply", "named_apply", "_fast_apply"],
)
def test_inplace_apply_is_written_to_the_server(store, redis_server, call):
    store["x"] = torch.ones(4, 2)
    assert call(store) is store
    again = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
    assert again["x"].eq(3).all()
    assert store.apply(lambda t: None, inplace=True, filter_empty=True) is None
    assert again["x"].eq(3).all()


def test_lock(store):
    store["x"] = torch.ones(4)
    store.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        store["y"] = torch.ones(4)
    store.set_("x", torch.zeros(4))  # in-place writes stay allowed
    store[0:2] = 3
    assert store["x"].tolist() == [3.0, 3.0, 0.0, 0.0]
    store.unlock_()
    store["y"] = torch.ones(4)
    assert set(store.keys()) == {"x", "y"}


def test_lazy_stack_round_trip(redis_server):
    lazy = LazyStackedTensorDict(
        TensorDict({"a": torch.zeros(2, 3), "only0": torch.ones(2)}, [2]),
        TensorDict({"a": torch.ones(2, 3)}, [2]),
        stack_dim=1,
    )
    stored = lazy.to_store(port=redis_server.port)
    try:
        assert isinstance(stored, LazyStackedTensorDictStore)
        assert stored.batch_size == torch.Size([2, 2])
        assert stored["a"].shape == torch.Size([2, 2, 3])
        assert stored.tensordicts[0]["only0"].tolist() == [1.0, 1.0]
        stored.tensordicts[1]["a"] = torch.full((2, 3), 4.0)
        again = LazyStackedTensorDictStore.from_store(port=redis_server.port, td_id=stored.td_id)
        assert again.stack_dim == 1
        assert again["a"][:, 1].eq(4).all()
        local = again.to_lazy_local()
        assert type(local) is LazyStackedTensorDict and local["a"][:, 0].eq(0).all()
        dense = again.to_local()
        assert type(dense) is TensorDict and dense["a"].shape == torch.Size([2, 2, 3])
    finally:
        stored.clear_redis()


def test_from_dict_and_from_schema(redis_server):
    stored = TensorDictStore.from_dict(
        {"a": torch.zeros(3, 2), "b": {"c": torch.ones(3)}}, port=redis_server.port, batch_size=[3]
    )
    assert stored.batch_size == torch.Size([3]) and stored["b", "c"].sum() == 3
    zeros = TensorDict.from_schema(
        {"x": ([2], torch.float64)}, batch_size=[5], storage="redis", port=redis_server.port
    )
    assert isinstance(zeros, TensorDictStore) and zeros["x"].dtype == torch.float64
    assert zeros["x"].shape == torch.Size([5, 2])
    with pytest.raises(KeyError, match="No TensorDictStore"):
        TensorDictStore.from_store(port=redis_server.port, td_id="not-there")


_CHILD = """
import sys, torch
from td_memmap import TensorDictStore
store = TensorDictStore.from_store(port=int(sys.argv[1]), td_id=sys.argv[2])
assert store["x"].tolist() == [1.0, 2.0, 3.0], store["x"]
store[1] = 20.0
store["from_child"] = torch.arange(3)
"""


def test_two_processes_share_one_store(store, redis_server):
    store.batch_size = []
    store["x"] = torch.tensor([1.0, 2.0, 3.0])
    store.batch_size = [3]
    subprocess.run(
        [sys.executable, "-c", _CHILD, str(redis_server.port), store.td_id], check=True, timeout=300
    )
    assert store["x"].tolist() == [1.0, 20.0, 3.0]
    assert store["from_child"].tolist() == [0, 1, 2]


def test_set_at_writes_to_the_server(store, redis_server):
    store["obs"] = torch.zeros(4, 3)
    store.set_at_("obs", torch.ones(3), 0)
    again = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
    assert again["obs"].sum() == 3 and again["obs"][0].eq(1).all()


def test_pickle_gives_a_handle_to_the_same_data(store):
    import pickle

    store["obs"] = torch.arange(4.0)
    restored = pickle.loads(pickle.dumps(store))
    assert restored.td_id == store.td_id and restored["obs"].tolist() == [0.0, 1.0, 2.0, 3.0]
    restored["obs"] = torch.ones(4)
    assert store["obs"].eq(1).all()
    assert "obs" in repr(store) and "backend='redis'" in repr(store)


def test_lazy_stack_index_writes_reach_the_members(redis_server):
    lazy = LazyStackedTensorDict(*[TensorDict({"a": torch.zeros(4, 3)}, [4]) for _ in range(3)])
    stored = LazyStackedTensorDictStore.from_lazy_stack(lazy, port=redis_server.port)
    try:
        stored[0] = TensorDict({"a": torch.ones(4, 3)}, [4])
        stored[1:3] = TensorDict({"a": torch.full((2, 4, 3), 2.0)}, [2, 4])
        again = LazyStackedTensorDictStore.from_store(port=redis_server.port, td_id=stored.td_id)
        assert again["a"][:, 0, 0].tolist() == [1.0, 2.0, 2.0]
    finally:
        stored.clear_redis()


def test_index_write_of_non_tensors_and_new_keys(redis_server):
    td = TensorDict({"obs": torch.zeros(5, 4), "label": "placeholder"}, [5])
    store = TensorDictStore.from_tensordict(td, port=redis_server.port)
    try:
        store[3] = TensorDict({"obs": torch.ones(4), "label": "cat"}, [])
        assert store[3]["label"] == "cat" and store[0]["label"] == "placeholder"
        assert store["obs"][3].eq(1).all() and store["obs"][2].eq(0).all()
        # a key the store lacks is created, zero-filled elsewhere (as upstream)
        store[1] = TensorDict({"new": {"x": torch.full((2,), 7)}}, [])
        assert store["new", "x"].tolist() == [[0, 0], [7, 7], [0, 0], [0, 0], [0, 0]]
        assert store["new"].batch_size == torch.Size([5])
    finally:
        store.clear_redis()


def test_clone_copies_on_the_server(store):
    store["obs"] = torch.arange(4.0)
    deep = store.clone()
    shallow = store.clone(False)
    try:
        assert isinstance(deep, TensorDictStore) and deep.td_id != store.td_id
        assert shallow.td_id == store.td_id
        store["obs"] = torch.zeros(4)
        assert deep["obs"].tolist() == [0.0, 1.0, 2.0, 3.0] and shallow["obs"].eq(0).all()
    finally:
        deep.clear_redis()


def test_share_memory_is_refused(store):
    with pytest.raises(NotImplementedError, match="to_tensordict"):
        store.share_memory_()
    assert store.view(2, 2).batch_size == torch.Size([2, 2])  # shape ops give local results


def test_get_of_a_missing_key_gives_none_and_set_at_of_one_raises(store):
    store["obs"] = torch.zeros(4, 3)
    assert store.get("missing") is None and store.get(("nested", "missing")) is None
    assert store.get("missing", 3) == 3
    with pytest.raises(KeyError, match="'missing'"):
        store["missing"]
    with pytest.raises(KeyError, match="'missing'"):  # not a None written into the store
        store.set_at_("missing", torch.ones(3), 0)
    assert "missing" not in store.keys()


def test_an_unbatched_tensor_is_stored_and_read_back_as_one(store, redis_server):
    table = torch.arange(6.0).view(2, 3)  # outside the batch dims: its shape is not [4, ...]
    store.set("table", UnbatchedTensor(table))
    again = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
    for handle in (store, again):  # the flag is on the server, not in the handle
        value = handle.get("table")
        assert isinstance(value, UnbatchedTensor) and value.batch_size == torch.Size([4])
        assert torch.equal(value.as_subclass(torch.Tensor), table)
    copy = store.clone()  # read back whole: a plain tensor of shape [2, 3] made clone raise
    try:
        assert isinstance(copy.get("table"), UnbatchedTensor)
        assert isinstance(store.unbind(0)[1].get("table"), UnbatchedTensor)
    finally:
        copy.clear_redis()


def test_a_row_written_at_an_index_holds_an_unbatched_entry_whole(store):
    store["obs"] = torch.zeros(4, 3)
    store.set("table", UnbatchedTensor(torch.zeros(2, 3)))
    row = store[1]
    row["obs"] = torch.ones(3)
    row.set("table", UnbatchedTensor(torch.full((2, 3), 5.0)))
    store[1] = row  # as in a dense TensorDict: the row's entry replaces the whole entry
    assert store["obs"].sum() == 3 and store["obs"][1].eq(1).all()
    assert isinstance(store.get("table"), UnbatchedTensor)
    assert store.get("table").as_subclass(torch.Tensor).eq(5).all()
    bad = TensorDict({"obs": torch.full((3,), 7.0), "table": torch.zeros(3)}, [])
    with pytest.raises(RuntimeError, match="unbatched entry 'table' of shape \\[2, 3\\]"):
        store[2] = bad
    assert store["obs"][2].eq(0).all()  # refused before anything was written


def test_dim_names_follow_to_tensordict_and_clone(store):
    store["obs"] = torch.arange(4.0)
    store.refine_names("time")
    deep = store.clone()
    try:
        assert store.to_tensordict().names == ["time"] and deep.names == ["time"]
        assert store.clone(False).names == ["time"]
    finally:
        deep.clear_redis()
