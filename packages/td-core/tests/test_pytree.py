"""TensorDicts as pytree nodes under `torch.func` transforms and `tree_map`."""

import pytest
import torch
from torch.utils._pytree import tree_map

from td_core import TensorDict, UnbatchedTensor, lazy_stack


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("key", ["a", ("n", "a")])
def test_vmap_keeps_the_lock_of_its_inputs(lazy, key):
    td = TensorDict({key: torch.ones(2, 1)}, [2])
    if lazy:
        td = lazy_stack([td[0], td[1].clone()])
    td.lock_()

    def write(x):
        return x.set(key, x.get(key) + 1)

    with pytest.raises(RuntimeError, match="Cannot modify locked TensorDict"):
        torch.vmap(write)(td)
    assert (td.get(key) == 1).all()


def test_vmap_of_an_unlocked_input_writes_into_the_batched_copy():
    td = TensorDict({"a": torch.ones(2, 1)}, [2])
    out = torch.vmap(lambda x: x.set("b", x["a"] * 3))(td)
    assert not out.is_locked
    assert (out["b"] == 3).all()
    assert "b" not in td


def test_tree_map_of_a_locked_tensordict_returns_a_new_unlocked_one():
    td = TensorDict({"a": torch.ones(2), "n": {"b": torch.zeros(2)}}, [2]).lock_()
    out = tree_map(lambda x: x + 1, td)
    assert not out.is_locked and not out["n"].is_locked
    out["c"] = torch.zeros(2)
    assert (out["n", "b"] == 1).all()


# torch's forward-mode AD scripts its decompositions on first use (torch >= 2.10 warns)
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
@pytest.mark.parametrize("batch_size", [(), (2,), (2, 3)])
@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_jacobian_of_a_tensordict_keeps_the_batch_size(batch_size, transform):
    td = TensorDict(
        {"a": torch.randn(*batch_size, 2), "b": torch.randn(*batch_size, 5)}, batch_size
    )

    def f(x):
        return TensorDict({"x": x["a"] ** 2, "y": x["b"] ** 3}, x.batch_size)

    jac = getattr(torch.func, transform)(f)(td)
    assert jac.batch_size == td.batch_size
    assert jac["x", "a"].shape == (*batch_size, 2, *batch_size, 2)
    assert jac["y", "a"].shape == (*batch_size, 5, *batch_size, 2)
    # each sub-TensorDict's batch size is a prefix of its leaves' shapes
    for sub in (jac["x"], jac["y"]):
        for leaf in sub.values():
            assert leaf.shape[: sub.batch_dims] == sub.batch_size
    expected = torch.diag(2 * td["a"].flatten())
    assert torch.allclose(jac["x", "a"].reshape(expected.shape), expected)


def test_vmap_with_out_dims_past_the_batch_dims_keeps_a_valid_batch_size():
    td = TensorDict({"a": torch.randn(3, 2, 4), "b": torch.randn(3, 2, 5)}, [3, 2])
    out = torch.vmap(lambda x: x * 2, out_dims=-1)(td)
    assert out.batch_size == (2,)
    assert out["a"].shape == (2, 4, 3) and out["b"].shape == (2, 5, 3)


def _with_table():
    table = torch.randn(7, 11)
    td = TensorDict(a=torch.randn(4, 3, 5), table=UnbatchedTensor(table), batch_size=[4, 3])
    return td, table


@pytest.mark.parametrize("nested", [False, True])
def test_vmap_passes_an_unbatched_entry_whole(nested):
    td, table = _with_table()
    seen = []

    def f(x):
        seen.append((tuple(x["table"].shape), type(x.get("table"))))
        return x

    fun = torch.vmap(torch.vmap(f)) if nested else torch.vmap(f)
    out = fun(td)
    assert seen == [((7, 11), UnbatchedTensor)]
    assert out.batch_size == (4, 3) and out["a"].shape == (4, 3, 5)
    assert isinstance(out.get("table"), UnbatchedTensor)
    assert out.get("table").shape == (7, 11) and out.get("table").batch_size == (4, 3)
    assert out.get("table").data_ptr() == table.data_ptr()  # never copied


def test_vmap_of_an_op_on_an_unbatched_entry():
    td, table = _with_table()
    out = torch.vmap(lambda x: x.apply(lambda t: t * 2))(td)
    assert isinstance(out.get("table"), UnbatchedTensor)
    assert torch.equal(out["table"], table * 2)
    summed = torch.vmap(lambda x: x["a"].sum(-1) + x["table"].sum())(td)
    assert torch.allclose(summed, td["a"].sum(-1) + table.sum())


def test_grad_through_an_unbatched_entry():
    td, table = _with_table()
    grads = torch.func.grad(lambda x: (x["table"] ** 2).sum() + x["a"].sum())(td)
    assert torch.allclose(grads["table"], 2 * table)
    assert torch.equal(grads["a"], torch.ones(4, 3, 5))


def test_tree_map_of_an_unbatched_entry_keeps_its_shape():
    td, table = _with_table()
    out = tree_map(lambda t: t + 1, td)
    assert isinstance(out.get("table"), UnbatchedTensor)
    assert torch.equal(out["table"], table + 1)


def test_vmap_keeps_the_names_of_the_dims_it_does_not_map() -> None:
    b = TensorDict({"b": torch.randn(3, 5, 4)}, [3, 5], names=["A", "B"])
    seen = []

    def fn(t: TensorDict) -> TensorDict:
        seen.append(t.names)
        return t

    out = torch.vmap(fn, 1)(b)
    assert seen == [["A"]]  # the mapped dim loses its name inside
    assert out.names == [None, "A"]  # the new dim of the output has none
    assert torch.vmap(fn, 0)(b).names == [None, "B"]


def test_tree_map_over_a_ragged_lazy_stack_runs_per_member() -> None:
    td0 = TensorDict({"a": torch.zeros(3), "b": torch.zeros(4), "s": "x"})
    td1 = TensorDict({"a": torch.zeros(3), "b": torch.zeros(5), "s": "y"})
    stack = lazy_stack([td0, td1])
    out = tree_map(lambda x: x + 1, stack)
    assert type(out) is type(stack)
    assert [t["b"].tolist() for t in out.tensordicts] == [[1.0] * 4, [1.0] * 5]
    assert out.tensordicts[1]["s"] == "y"
    del td0["a"]  # exclusive keys survive too
    out = tree_map(lambda x: x * 0, stack)
    assert "a" in out.tensordicts[1].keys() and "a" not in out.tensordicts[0].keys()


def test_a_ragged_lazy_stack_cannot_enter_vmap() -> None:
    ragged = lazy_stack(
        [TensorDict({"b": torch.zeros(2, 4)}, [2]), TensorDict({"b": torch.zeros(2, 5)}, [2])]
    )
    with pytest.raises(NotImplementedError, match="different keys or entry shapes"):
        torch.vmap(lambda t: t)(ragged)
