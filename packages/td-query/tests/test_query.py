import io
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from td_core import TensorDict
from td_query import HashToInt, QueryModule, SipHash


def seed_query() -> TensorDict:
    return TensorDict(
        {
            "key1": torch.Tensor([[1], [1], [1], [2]]),
            "key2": torch.Tensor([[3], [3], [2], [3]]),
            "other": torch.randn(4),
        },
        batch_size=(4,),
    )


def test_seed_example():
    query_module = QueryModule(in_keys=["key1", "key2"], index_key="index", hash_module=SipHash())
    query = seed_query()
    res = query_module(query)
    assert res is query  # written in place unless cloning
    assert res["index"][0] == res["index"][1]
    assert res["index"][1] != res["index"][2]
    assert res["index"][2] != res["index"][3]
    assert res["index"].dtype == torch.int64
    assert res["index"].tolist() == [0, 0, 1, 2]
    assert res["_hash"].dtype == torch.int64 and res["_hash"].shape == (4,)
    # a second call finds the same rows at the same indices
    assert query_module(seed_query())["index"].tolist() == [0, 0, 1, 2]


def test_hash_values_follow_the_documented_defaults():
    query = seed_query()
    sip = SipHash()
    per_key = torch.stack([sip(query["key1"]), sip(query["key2"])], dim=-1)
    # no hash_module: SipHash per key, SipHash aggregator
    assert torch.equal(QueryModule(["key1", "key2"])(seed_query())["_hash"], sip(per_key))
    # one key: its hash, no aggregation
    assert torch.equal(QueryModule("key1")(seed_query())["_hash"], sip(query["key1"]))


def test_joint_hashing_of_same_width_keys_changes_nothing():
    # keys whose rows have as many bytes are hashed in one call: same values
    gen = torch.Generator().manual_seed(0)
    entries = {
        "f": torch.randn(6, 2, 2, generator=gen),  # 16 bytes per row
        "i": torch.randint(0, 3, (6, 2), generator=gen),  # 16 bytes per row, int64
        "b": torch.rand(6, 3, generator=gen) > 0.5,  # 3 bytes per row
        "h": torch.randn(6, 4, generator=gen).half(),  # 8 bytes per row
    }
    td = TensorDict(dict(entries), [6])
    sip = SipHash()
    separate = torch.stack([sip(v) for v in entries.values()], -1)
    out = QueryModule(list(entries))(td)
    assert torch.equal(out["_hash"], sip(separate))
    td2 = TensorDict({k: v.reshape(2, 3, *v.shape[1:]) for k, v in entries.items()}, [2, 3])
    assert torch.equal(QueryModule(list(entries))(td2)["_hash"].reshape(-1), sip(separate))


def test_aggregator_defaults():
    sip = SipHash(rounds=(2, 4))
    single = QueryModule(["a", "b"], hash_module=sip)
    assert single.aggregator is sip  # a single hash module also aggregates
    listed = QueryModule(["a", "b"], hash_module=[SipHash(), SipHash()])
    assert isinstance(listed.aggregator, SipHash)
    assert isinstance(listed.hash_module, nn.ModuleList)
    default = QueryModule(["a", "b"])
    assert isinstance(default.aggregator, SipHash)
    assert QueryModule("a").aggregator is None
    td = TensorDict({"a": torch.arange(4.0)[:, None], "b": torch.zeros(4, 2)}, [4])
    expected = sip(torch.stack([sip(td["a"]), sip(td["b"])], -1))
    assert torch.equal(single(td)["_hash"], expected)


def test_custom_callables():
    calls = []

    def first_column(x: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(x.shape))
        return x[:, 0].long()

    def add(h: torch.Tensor) -> torch.Tensor:
        return h.sum(-1)

    td = TensorDict(
        {"a": torch.tensor([[1.0, 9.0], [2.0, 8.0], [1.0, 7.0]]), "b": torch.tensor([1, 0, 1])}, [3]
    )
    qm = QueryModule(["a", "b"], hash_module=[first_column, lambda x: x * 10], aggregator=add)
    out = qm(td)
    assert out["_hash"].tolist() == [11, 2, 11]
    assert out["_index"].tolist() == [0, 1, 0]
    assert calls == [(3, 2)]

    class Table:
        def __init__(self):
            self.seen = []

        def __call__(self, hashes, extend=False):
            self.seen.append(extend)
            return hashes * 0 + 7

    table = Table()
    out = QueryModule("b", hash_to_int=table)(td, extend=False)
    assert out["_index"].tolist() == [7, 7, 7] and table.seen == [False]


def test_in_keys_forms_and_nested_keys():
    td = TensorDict(
        {"obs": {"pixels": torch.tensor([[1, 2], [1, 2], [3, 4]])}, "act": torch.tensor([0, 0, 1])},
        [3],
    )
    qm = QueryModule(("obs", ("pixels",)), index_key=("out", "idx"), hash_key=("out", "hash"))
    assert qm.in_keys == [("obs", "pixels")]
    assert qm.out_keys == [("out", "idx"), ("out", "hash")]
    out = qm(td)
    assert out["out", "idx"].tolist() == [0, 0, 1]
    assert QueryModule("act").in_keys == ["act"]
    both = QueryModule([("obs", "pixels"), "act"])
    assert both(td)["_index"].tolist() == [0, 0, 1]


def test_extend_false_returns_minus_one_for_unseen():
    qm = QueryModule(["key1", "key2"])
    first = qm(seed_query())
    assert first["_index"].tolist() == [0, 0, 1, 2]
    probe = TensorDict({"key1": torch.Tensor([[1], [5]]), "key2": torch.Tensor([[2], [5]])}, [2])
    out = qm(probe, extend=False)
    assert out["_index"].tolist() == [1, -1]
    assert len(qm.hash_to_int) == 3
    assert qm(probe)["_index"].tolist() == [1, 3]


def test_write_hash_and_clone():
    qm = QueryModule("key1")
    td = seed_query()
    out = qm(td, write_hash=False)
    assert "_hash" not in out.keys() and "_index" in out.keys()

    td = seed_query()
    out = qm(td, clone=True)
    assert out is not td
    assert "_index" in out.keys() and "_index" not in td.keys()
    assert out["key1"] is td["key1"]  # a shallow copy

    cloning = QueryModule("key1", clone=True)
    td = seed_query()
    assert cloning(td) is not td and "_index" not in td.keys()
    assert cloning(td, clone=False) is td


def test_multi_dim_and_empty_batch():
    x = torch.tensor([[[1.0], [2.0], [1.0]], [[2.0], [3.0], [3.0]]])
    td = TensorDict({"x": x, "y": torch.zeros(2, 3, 2)}, [2, 3])
    out = QueryModule(["x", "y"])(td)
    assert out["_index"].shape == (2, 3) and out["_hash"].shape == (2, 3)
    assert out["_index"].tolist() == [[0, 1, 0], [1, 2, 2]]

    scalar = TensorDict({"x": torch.tensor([1.0, 2.0])}, [])
    out = QueryModule("x")(scalar)
    assert out["_index"].shape == () and out["_index"].item() == 0

    empty = TensorDict({"x": torch.zeros(0, 3)}, [0])
    assert QueryModule("x")(empty)["_index"].shape == (0,)


def test_argument_errors():
    with pytest.raises(ValueError, match=r"got 1 hash modules for 2 in_keys \['a', 'b'\]"):
        QueryModule(["a", "b"], hash_module=[SipHash()])
    with pytest.raises(ValueError, match=r"only one in_key was given \('a'\)"):
        QueryModule("a", aggregator=SipHash())
    with pytest.raises(ValueError, match=r"only one in_key"):
        QueryModule(["a"], aggregator=SipHash())
    with pytest.raises(TypeError, match="hash_module must be callable, got int"):
        QueryModule(["a", "b"], hash_module=3)
    with pytest.raises(TypeError, match="hash_module for in_key 'b' must be callable"):
        QueryModule(["a", "b"], hash_module=[SipHash(), "nope"])
    with pytest.raises(TypeError, match="aggregator must be callable"):
        QueryModule(["a", "b"], aggregator=1.5)
    with pytest.raises(TypeError, match="hash_to_int must be callable"):
        QueryModule("a", hash_to_int={})
    with pytest.raises(ValueError, match="at least one key"):
        QueryModule([])
    with pytest.raises(ValueError, match="names key 'a' twice"):
        QueryModule(["a", "a"])
    with pytest.raises(ValueError, match="index_key and hash_key must differ"):
        QueryModule("a", index_key="h", hash_key="h")
    with pytest.raises(TypeError, match="keys are strings or tuples of strings, got 3"):
        QueryModule(["a", 3])


def test_forward_errors():
    qm = QueryModule(["key1", "missing"])
    with pytest.raises(
        KeyError, match="in_key 'missing' not found in the input TensorDict with keys"
    ):
        qm(seed_query())
    with pytest.raises(TypeError, match="expects a TensorDict, got dict"):
        qm({"key1": torch.zeros(3)})
    nested = TensorDict({"sub": {"a": torch.zeros(2, 1)}}, [2])
    with pytest.raises(TypeError, match="in_key 'sub' must hold a tensor, got TensorDict"):
        QueryModule("sub")(nested)
    td = seed_query()
    with pytest.raises(
        ValueError,
        match=r"hash_module for in_key 'key1' must return one hash per row \(4 rows\), got shape \[2\]",
    ):
        QueryModule("key1", hash_module=lambda x: torch.zeros(2, dtype=torch.long))(td)
    with pytest.raises(TypeError, match=r"must return integer hashes, got dtype torch\.float32"):
        QueryModule("key1", hash_module=lambda x: x[:, 0])(td)
    with pytest.raises(TypeError, match="aggregator must return a tensor"):
        QueryModule(["key1", "key2"], aggregator=lambda h: h.tolist())(td)
    # a failed call leaves the input untouched
    assert "_index" not in td.keys()


def test_state_dict_round_trip():
    qm = QueryModule(["key1", "key2"])
    qm(seed_query())
    state = qm.state_dict()
    assert list(state) == ["hash_to_int.hashes"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = QueryModule(["key1", "key2"])
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    out = fresh(seed_query(), extend=False)
    assert out["_index"].tolist() == [0, 0, 1, 2]


def test_identical_indices_across_processes():
    code = textwrap.dedent(
        """
        import torch
        from td_core import TensorDict
        from td_query import QueryModule
        td = TensorDict({"a": torch.arange(12.0).reshape(6, 2) % 4, "b": torch.arange(6) % 2}, [6])
        out = QueryModule(["a", "b"])(td)
        print(out["_hash"].tolist(), out["_index"].tolist())
        """
    )
    # another process, whose hash() is seeded differently from this one's
    env = {**os.environ, "PYTHONHASHSEED": "54321"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    td = TensorDict({"a": torch.arange(12.0).reshape(6, 2) % 4, "b": torch.arange(6) % 2}, [6])
    out = QueryModule(["a", "b"])(td)
    assert result.stdout.strip() == f"{out['_hash'].tolist()} {out['_index'].tolist()}"


def test_module_contract():
    qm = QueryModule(["key1", "key2"], index_key="idx")
    assert isinstance(qm, nn.Module)
    assert qm.in_keys == ["key1", "key2"] and qm.out_keys == ["idx", "_hash"]
    assert isinstance(qm.hash_to_int, HashToInt)
    assert "in_keys=['key1', 'key2']" in repr(qm)

    # a minimal stand-in for a sequential runner: reads in_keys, writes out_keys
    def run(modules, td):
        for m in modules:
            assert all(k in td.keys(include_nested=True) for k in m.in_keys)
            td = m(td)
            assert all(k in td.keys(include_nested=True) for k in m.out_keys)
        return td

    out = run([qm, QueryModule("idx", index_key="idx2", hash_key="h2")], seed_query())
    assert out["idx2"].tolist() == [0, 0, 1, 2]


def test_locked_input_fails_before_touching_the_table():
    qm = QueryModule("key1")
    locked = seed_query().lock_()
    with pytest.raises(RuntimeError, match="locked TensorDict: call it with clone=True"):
        qm(locked)
    assert len(qm.hash_to_int) == 0
    out = qm(locked, clone=True)
    assert out["_index"].tolist() == [0, 0, 0, 1]
    assert "_index" not in locked.keys()
