"""td-query's QueryModule as a member of td-nn sequences (td-query does not import td-nn)."""

import torch
from torch import nn
from torch.distributions import Categorical

from td_core import TensorDict
from td_nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    symbolic_trace,
)
from td_query import QueryModule

OBS = torch.tensor([[0.0, 1.0], [0.0, 1.0], [2.0, 0.0], [0.0, 1.0], [2.0, 0.0], [5.0, 5.0]])


def counter() -> TensorDictSequential:
    """A count table indexed by content: the query turns observations into dense row ids."""
    return TensorDictSequential(
        TensorDictModule(
            lambda obs: obs.sum(-1).round().long(), in_keys=[("agent", "obs")], out_keys=["action"]
        ),
        QueryModule(in_keys=[("agent", "obs"), "action"], index_key="obs_id"),
        TensorDictModule(nn.Embedding(16, 3), in_keys=["obs_id"], out_keys=["embedding"]),
    )


def batch(obs: torch.Tensor = OBS) -> TensorDict:
    return TensorDict({("agent", "obs"): obs}, batch_size=[len(obs)])


def test_sequence_keys_account_for_the_query():
    seq = counter()
    # "action" is written by the first member, so only the observation comes from outside
    assert seq.in_keys == [("agent", "obs")]
    assert seq.out_keys == ["action", "obs_id", "_hash", "embedding"]


def test_equal_rows_get_equal_ids_and_embeddings():
    seq = counter()
    out = seq(batch())
    assert out["obs_id"].tolist() == [0, 0, 1, 0, 1, 2]  # dense, in first-seen order
    assert out["_hash"].shape == (6,)
    emb = out["embedding"]
    torch.testing.assert_close(emb[0], emb[1], rtol=0, atol=0)
    torch.testing.assert_close(emb[2], emb[4], rtol=0, atol=0)
    assert not torch.equal(emb[0], emb[2])


def test_the_query_keeps_its_table_across_calls_and_copies():
    seq = counter()
    seq(batch())
    out = seq(batch(torch.tensor([[5.0, 5.0], [9.0, 9.0], [0.0, 1.0]])))
    assert out["obs_id"].tolist() == [2, 3, 0]
    # its state (the hash table) travels with the sequence's state_dict
    other = counter()
    other.load_state_dict(seq.state_dict())
    assert other(batch(OBS[:3]))["obs_id"].tolist() == [0, 0, 1]


def test_select_subsequence_keeps_what_the_query_needs():
    seq = counter()
    sub = seq.select_subsequence(out_keys=["obs_id"])
    assert len(list(sub)) == 2  # the action module and the query
    assert sub.out_keys == ["action", "obs_id", "_hash"]
    assert sub(batch())["obs_id"].tolist() == [0, 0, 1, 0, 1, 2]
    assert seq.select_subsequence(in_keys=["obs_id"]).out_keys == ["embedding"]


def test_symbolic_trace_of_a_sequence_with_a_query():
    seq = counter()
    graph = symbolic_trace(seq)
    out = graph(batch())
    assert out["obs_id"].tolist() == [0, 0, 1, 0, 1, 2]
    torch.testing.assert_close(out["embedding"], seq(batch())["embedding"], rtol=0, atol=0)


def test_a_policy_over_deduplicated_observations():
    # the query's ids select per-observation logits; a Categorical head samples actions
    logits = nn.Embedding(16, 4)
    policy = ProbabilisticTensorDictSequential(
        QueryModule(in_keys=["obs"], index_key="obs_id"),
        TensorDictModule(logits, in_keys=["obs_id"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(
            in_keys=["logits"],
            out_keys=["action"],
            distribution_class=Categorical,
            return_log_prob=True,
        ),
    )
    td = TensorDict(obs=OBS, batch_size=[6])
    out = policy(td)
    assert out["action"].tolist() == logits.weight[out["obs_id"]].argmax(-1).tolist()
    expected = torch.log_softmax(logits.weight[out["obs_id"]], -1).gather(
        -1, out["action"][:, None]
    )[:, 0]
    torch.testing.assert_close(out["action_log_prob"], expected)
    # log_prob reruns the members on a copy: the same rows get the same ids again
    torch.testing.assert_close(policy.log_prob(out), expected)
    assert policy[0].hash_to_int(out["_hash"], extend=False).tolist() == out["obs_id"].tolist()
