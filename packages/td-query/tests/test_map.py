import io

import pytest
import torch
from torch import nn

from td_core import TensorDict
from td_query import QueryModule, TensorDictMap


def keys_td(obs, action) -> TensorDict:
    obs = torch.as_tensor(obs, dtype=torch.float32)
    return TensorDict({"obs": obs, "action": torch.as_tensor(action)}, [obs.shape[0]])


def values_td(value, reward=None) -> TensorDict:
    value = torch.as_tensor(value, dtype=torch.float32)
    entries = {"value": value}
    if reward is not None:
        entries["next"] = {"reward": torch.as_tensor(reward, dtype=torch.float32)}
    return TensorDict(entries, [value.shape[0]])


def new_map(**kwargs) -> TensorDictMap:
    return TensorDictMap(query_module=QueryModule(["obs", "action"]), **kwargs)


def test_write_read_contains():
    td_map = new_map()
    k = keys_td([[0.0], [1.0], [2.0]], [0, 1, 0])
    td_map[k] = values_td([10.0, 11.0, 12.0], [[1.0], [2.0], [3.0]])
    assert len(td_map) == 3
    assert td_map.out_keys == ["value", ("next", "reward")]
    out = td_map[keys_td([[2.0], [0.0]], [0, 0])]
    assert out.batch_size == torch.Size([2])
    assert out["value"].tolist() == [12.0, 10.0]
    assert out["next", "reward"].tolist() == [[3.0], [1.0]]
    probe = keys_td([[1.0], [1.0], [2.0]], [1, 0, 0])
    mask = td_map.contains(probe)
    assert mask.dtype == torch.bool and mask.tolist() == [True, False, True]


def test_overwrite_and_duplicates_last_wins():
    td_map = new_map()
    td_map[keys_td([[0.0], [1.0]], [0, 0])] = values_td([1.0, 2.0])
    td_map[keys_td([[1.0], [5.0], [1.0]], [0, 0, 0])] = values_td([20.0, 50.0, 21.0])
    assert len(td_map) == 3
    assert td_map[keys_td([[0.0], [1.0], [5.0]], [0, 0, 0])]["value"].tolist() == [1.0, 21.0, 50.0]


def test_grows_and_matches_dict_reference():
    gen = torch.Generator().manual_seed(0)
    td_map = new_map()
    reference: dict[tuple[float, int], float] = {}
    for step in range(40):
        n = int(torch.randint(1, 30, (1,), generator=gen))
        obs = torch.randint(0, 20, (n, 1), generator=gen).float()
        act = torch.randint(0, 3, (n,), generator=gen)
        val = torch.randn(n, generator=gen)
        td_map[keys_td(obs, act)] = values_td(val)
        for o, a, v in zip(obs[:, 0].tolist(), act.tolist(), val.tolist()):
            reference[(o, a)] = v
        assert len(td_map) == len(reference), step
    obs = torch.tensor([[o] for o, _ in reference])
    act = torch.tensor([a for _, a in reference])
    got = td_map[keys_td(obs, act)]["value"]
    assert torch.equal(got, torch.tensor(list(reference.values())))
    assert td_map.storage.batch_size[0] == len(reference)


def test_unseen_read_raises_and_changes_nothing():
    td_map = new_map()
    with pytest.raises(KeyError, match="1 of 1 rows of the query are not in the TensorDictMap"):
        td_map[keys_td([[0.0]], [0])]
    td_map[keys_td([[0.0]], [0])] = values_td([1.0])
    with pytest.raises(KeyError, match=r"1 of 2 rows .* \(the first is row 1 in flattened order\)"):
        td_map[keys_td([[0.0], [9.0]], [0, 0])]
    assert len(td_map) == 1
    assert len(td_map.query_module.hash_to_int) == 1  # lookups insert nothing
    assert td_map.contains(keys_td([[9.0]], [0])).tolist() == [False]


def test_failed_writes_leave_the_map_unchanged():
    td_map = new_map()
    td_map[keys_td([[0.0]], [0])] = values_td([1.0])
    new_key = keys_td([[7.0]], [7])
    with pytest.raises(
        ValueError,
        match=r"out_key 'value' stores rows of shape \[\] and dtype torch.float32, got shape \[2\]",
    ):
        td_map[new_key] = TensorDict({"value": torch.zeros(1, 2)}, [1])
    with pytest.raises(ValueError, match=r"dtype torch\.float64"):
        td_map[new_key] = TensorDict({"value": torch.zeros(1, dtype=torch.float64)}, [1])
    with pytest.raises(KeyError, match="out_key 'value' not found in the values"):
        td_map[new_key] = TensorDict({"other": torch.zeros(1)}, [1])
    with pytest.raises(ValueError, match=r"same batch size, got \[1\] and \[2\]"):
        td_map[new_key] = values_td([1.0, 2.0])
    with pytest.raises(KeyError, match="in_key 'action' not found"):
        td_map[TensorDict({"obs": torch.zeros(1, 1)}, [1])] = values_td([1.0])
    with pytest.raises(TypeError, match="value must be a TensorDict, got dict"):
        td_map[new_key] = {"value": torch.zeros(1)}
    assert len(td_map) == 1
    assert len(td_map.query_module.hash_to_int) == 1
    assert td_map.contains(new_key).tolist() == [False]


def test_declared_out_keys_select_what_is_stored():
    td_map = new_map(out_keys=["value"])
    td_map[keys_td([[0.0]], [0])] = values_td([3.0], [[4.0]])
    out = td_map[keys_td([[0.0]], [0])]
    assert list(out.keys(include_nested=True, leaves_only=True)) == ["value"]


def test_from_tensordict_pair():
    source = keys_td([[0.0], [1.0]], [0, 1])
    dest = values_td([5.0, 6.0], [[1.0], [2.0]])
    td_map = TensorDictMap.from_tensordict_pair(source, dest, in_keys=["obs", "action"])
    assert td_map.in_keys == ["obs", "action"]
    assert td_map.out_keys == ["value", ("next", "reward")]
    assert len(td_map) == 0
    td_map[source] = dest
    assert td_map[source]["value"].tolist() == [5.0, 6.0]
    only = TensorDictMap.from_tensordict_pair(
        source, dest, in_keys="obs", out_keys=[("next", "reward")]
    )
    assert only.out_keys == [("next", "reward")]
    with pytest.raises(KeyError, match="in_key 'nope' not found in source"):
        TensorDictMap.from_tensordict_pair(source, dest, in_keys=["obs", "nope"])
    with pytest.raises(KeyError, match="out_key 'nope' not found in dest"):
        TensorDictMap.from_tensordict_pair(source, dest, in_keys="obs", out_keys=["nope"])
    with pytest.raises(TypeError, match="query_module must be a QueryModule"):
        TensorDictMap(query_module=lambda td: td)


def test_state_dict_round_trip():
    td_map = new_map()
    k = keys_td([[0.0], [1.0], [2.0]], [0, 1, 0])
    td_map[k] = values_td([10.0, 11.0, 12.0], [[1.0], [2.0], [3.0]])
    buffer = io.BytesIO()
    torch.save(td_map.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    restored = new_map()
    restored.load_state_dict(state)
    assert len(restored) == 3
    assert restored.out_keys == ["value", ("next", "reward")]
    out = restored[keys_td([[1.0], [0.0]], [1, 0])]
    assert out["value"].tolist() == [11.0, 10.0]
    assert out["next", "reward"].tolist() == [[2.0], [1.0]]
    # and it keeps growing from where it was
    restored[keys_td([[9.0]], [9])] = values_td([99.0], [[9.0]])
    assert len(restored) == 4 and restored[k]["value"].tolist() == [10.0, 11.0, 12.0]


def test_state_dict_mismatch_raises():
    td_map = new_map(out_keys=["value"])
    td_map[keys_td([[0.0]], [0])] = values_td([1.0])
    other = new_map(out_keys=["other"])
    with pytest.raises(RuntimeError, match="out_keys"):
        other.load_state_dict(td_map.state_dict())


def test_multi_dim_batch_and_forward():
    td_map = new_map()
    obs = torch.arange(6.0).reshape(2, 3, 1)
    act = torch.zeros(2, 3, dtype=torch.long)
    k = TensorDict({"obs": obs, "action": act}, [2, 3])
    td_map[k] = TensorDict({"value": obs[..., 0] * 10}, [2, 3])
    assert len(td_map) == 6
    out = td_map[k]
    assert out.batch_size == torch.Size([2, 3])
    assert torch.equal(out["value"], obs[..., 0] * 10)
    assert td_map.contains(k).shape == (2, 3)
    query = TensorDict({"obs": obs[1], "action": act[1]}, [3])
    result = td_map(query)
    assert result is query and result["value"].tolist() == [30.0, 40.0, 50.0]


def test_clear():
    td_map = new_map()
    td_map[keys_td([[0.0]], [0])] = values_td([1.0])
    td_map.clear()
    assert len(td_map) == 0
    assert td_map.contains(keys_td([[0.0]], [0])).tolist() == [False]
    td_map[keys_td([[3.0]], [0])] = values_td([3.0])
    assert td_map[keys_td([[3.0]], [0])]["value"].tolist() == [3.0]


def test_is_a_module_with_keys():
    td_map = new_map()
    assert isinstance(td_map, nn.Module)
    assert td_map.in_keys == ["obs", "action"]
    assert "size=0" in repr(td_map)


def test_module_conversions_reach_the_storage():
    td_map = new_map()
    k = keys_td([[0.0], [1.0]], [0, 1])
    td_map[k] = TensorDict({"value": torch.tensor([1.5, 2.5]), "count": torch.tensor([1, 2])}, [2])
    td_map.double()
    out = td_map[k]
    assert out["value"].dtype == torch.float64 and out["count"].dtype == torch.int64
    assert out["value"].tolist() == [1.5, 2.5]
    td_map.to("cpu")
    assert td_map.contains(k).tolist() == [True, True]


def test_custom_hash_module_in_from_tensordict_pair():
    source = keys_td([[0.0], [1.0]], [0, 1])
    dest = values_td([5.0, 6.0])
    td_map = TensorDictMap.from_tensordict_pair(
        source, dest, in_keys="action", hash_module=lambda x: x.long()
    )
    td_map[source] = dest
    # rows with the same action share an entry, whatever their obs
    assert td_map[keys_td([[9.0]], [1])]["value"].tolist() == [6.0]


def test_indices_taken_outside_the_map_hold_no_value():
    # the query module's table can be extended by the module itself: such an
    # index is a storage row without a value until a write fills it
    td_map = new_map()
    td_map[keys_td([[0.0], [1.0]], [0, 0])] = values_td([1.0, 2.0])
    outside = keys_td([[5.0]], [5])
    td_map.query_module(outside)  # extends the hash table (index 2), stores nothing
    later = keys_td([[6.0], [0.0]], [6, 0])
    td_map[later] = values_td([6.0, 10.0])  # index 3, and an overwrite of index 0
    assert len(td_map) == 3
    assert td_map.storage.batch_size[0] == 4
    assert td_map.contains(keys_td([[5.0], [6.0], [1.0]], [5, 6, 0])).tolist() == [
        False,
        True,
        True,
    ]
    with pytest.raises(KeyError, match=r"1 of 2 rows .* \(the first is row 0"):
        td_map[keys_td([[5.0], [6.0]], [5, 6])]
    assert td_map[keys_td([[0.0], [6.0]], [0, 6])]["value"].tolist() == [10.0, 6.0]
    td_map[outside] = values_td([55.0])  # fills index 2
    assert len(td_map) == 4 and td_map[outside]["value"].tolist() == [55.0]
    restored = new_map()
    restored.load_state_dict(td_map.state_dict())
    assert len(restored) == 4 and restored[outside]["value"].tolist() == [55.0]


def test_any_dtype_and_row_shape_is_stored():
    td_map = new_map()
    k = keys_td([[0.0], [1.0], [2.0]], [0, 1, 2])
    values = TensorDict(
        {
            "bf16": torch.randn(3, 2, 3).to(torch.bfloat16),
            "flag": torch.tensor([True, False, True]),
            "z": torch.randn(3, 2, dtype=torch.complex64).conj(),  # a lazy conjugate view
            "empty": torch.zeros(3, 0),
            "wide": torch.arange(3 * 40, dtype=torch.int16).reshape(3, 40).t()[:3],  # strided
        },
        [3],
    )
    td_map[k] = values
    for step in range(3):  # grow the storage past its first capacity
        more = keys_td(
            torch.arange(20.0)[:, None] + 10 * (step + 1), torch.zeros(20, dtype=torch.long)
        )
        td_map[more] = TensorDict(
            {key: values[key][:1].expand(20, *values[key].shape[1:]) for key in values.keys()}, [20]
        )
    out = td_map[keys_td([[2.0], [0.0]], [2, 0])]
    for key in ("bf16", "flag", "z", "empty", "wide"):
        assert out[key].dtype == values[key].dtype
        assert torch.equal(out[key], values[key][[2, 0]].resolve_conj()), key
