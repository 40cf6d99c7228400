"""The fast paths of hot operations give the general path's results and errors."""

from __future__ import annotations

import pytest
import tensordict
import torch

from td_core import TensorDict, lazy_stack, set_get_defaults_to_none
from td_core._core.traverse import is_td
from td_core.errors import BatchSizeError, DTypeError


def _nested() -> dict:
    return {"a": torch.zeros(3, 2), "n": {"b": torch.zeros(3), "m": {"c": torch.zeros(3, 4)}}}


def test_contains_flat_and_nested() -> None:
    td = TensorDict(_nested(), [3])
    assert "a" in td and "z" not in td
    assert ("n", "m", "c") in td and ("n", ("m",)) in td
    with pytest.raises(TypeError, match="NestedKey"):  # as upstream (a RuntimeError there)
        1 in td  # noqa: B015


def test_empty_and_unbatched_construction() -> None:
    assert TensorDict({}, []).batch_size == torch.Size([])
    assert TensorDict({}, (2, 3)).batch_size == torch.Size([2, 3])
    td = TensorDict({"a": torch.zeros(3), "b": torch.zeros(())})
    assert td.batch_size == torch.Size([]) and list(td.keys()) == ["a", "b"]
    with pytest.raises(TypeError, match="mapping"):
        TensorDict([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        TensorDict({}, [-1])


def test_items_and_values_are_live_views_as_upstream() -> None:
    td = TensorDict(_nested(), [3])
    items, values = td.items(), td.values()
    assert len(items) == len(values) == 2  # upstream returns its dict's views
    assert next(iter(items))[0] == "a"
    td["z"] = torch.ones(3)
    assert [k for k, _ in items] == ["a", "n", "z"] and len(values) == 3
    assert [k for k, _ in td.items(include_nested=True, leaves_only=True)] == [
        "a",
        ("n", "b"),
        ("n", "m", "c"),
        "z",
    ]


def test_update_nested_merges_and_is_all_or_nothing() -> None:
    td = TensorDict(_nested(), [3])
    sub = td["n"]
    other = TensorDict(_nested(), [3]).apply(lambda t: t + 1)
    assert td.update(other) is td
    assert td["n"] is sub  # merged into the existing sub-TensorDict
    assert (td["n", "m", "c"] == 1).all()
    bad = TensorDict({"a": torch.full((3, 2), 5.0), "n": {"b": torch.zeros(4)}}, [])
    with pytest.raises(BatchSizeError):
        td.update(bad)
    assert (td["a"] == 1).all()  # nothing was written


def test_to_same_device_returns_self_as_upstream() -> None:
    td = TensorDict(_nested(), [3], device="cpu")
    up = tensordict.TensorDict(_nested(), [3], device="cpu")
    assert (td.to("cpu") is td) == (up.to("cpu") is up)
    plain = TensorDict(_nested(), [3])
    moved = plain.to("cpu")
    assert moved is not plain and moved.device == torch.device("cpu")
    assert moved["n", "m"].device == torch.device("cpu")
    assert moved["a"] is plain["a"]
    with_text = TensorDict({**_nested(), "s": "text"}, [3]).to("cpu")
    assert with_text.get("s").device == torch.device("cpu") and with_text["s"] == "text"
    meta = TensorDict({"a": torch.zeros(3), "m": torch.zeros(3, device="meta")}, [3])
    with pytest.raises(NotImplementedError, match="meta"):  # a leaf elsewhere is still moved:
        meta.to("cpu")  # (torch cannot copy a meta tensor's absent data)


def test_select_order_follows_the_arguments_as_upstream() -> None:
    src = {
        "a": torch.zeros(3),
        "n": {"b": torch.zeros(3), "c": torch.zeros(3)},
        "z": torch.zeros(3),
    }
    keys = [("n", "c"), "z", ("n", "b"), "a"]
    ours = TensorDict(src, [3]).select(*keys)
    theirs = tensordict.TensorDict(src, [3]).select(*keys)
    assert list(ours.keys()) == list(theirs.keys()) == ["n", "z", "a"]
    assert list(ours["n"].keys()) == list(theirs["n"].keys()) == ["c", "b"]
    assert list(TensorDict(src, [3]).select("z", "a").keys()) == ["z", "a"]
    with pytest.raises(KeyError, match="'q'"):
        TensorDict(src, [3]).select("a", "q")


def test_copy_of_two_dense_trees_falls_back_where_the_fast_walk_stops() -> None:
    td = TensorDict(_nested(), [3])
    src = TensorDict(_nested(), [3]).apply(lambda t: t + 1)
    src["n", "m", "c"] = torch.ones(3, 1)  # broadcast into the leaf: the general route
    src["extra"] = torch.ones(3)  # a key td lacks: skipped
    td.copy_(src)
    assert torch.equal(td["n", "m", "c"], torch.ones(3, 4)) and "extra" not in td.keys()
    assert torch.equal(td["a"], src["a"])


def test_update_inplace_of_two_dense_trees() -> None:
    td = TensorDict(_nested(), [3])
    src = TensorDict(_nested(), [3]).apply(lambda t: t + 1)
    td.update_(src, clone=True)
    assert torch.equal(td["n", "m", "c"], src["n", "m", "c"])
    src["a"] += 1  # the values were copied, not shared
    assert torch.equal(td["a"], torch.ones(3, 2))
    src["extra"] = torch.ones(3)  # update_ refuses a key td lacks, before writing anything
    with pytest.raises(KeyError, match="extra"):
        td.update_(src)
    assert torch.equal(td["a"], torch.ones(3, 2))


def test_copy_checks_every_shape_before_writing() -> None:
    td = TensorDict(_nested(), [3])
    bad = TensorDict(_nested(), [3]).apply(lambda t: t + 1)
    bad["n", "m", "c"] = torch.ones(3, 5)
    with pytest.raises(BatchSizeError, match="'n', 'm', 'c'"):
        td.copy_(bad)
    assert (td["a"] == 0).all()


def _expected_at(td: TensorDict, src: TensorDict, index: object) -> TensorDict:
    """`td` with `src` written at `index`, leaf by leaf (the slow way)."""
    out = td.clone()
    for key in src.keys(include_nested=True, leaves_only=True):
        out.get(key)[index] = src.get(key)
    return out


_INDICES = {
    "int": 1,
    "negative int": -1,
    "slice": slice(0, 2),
    "strided slice": slice(0, 3, 2),
    "tuple": (1,),
    "positions": torch.tensor([2, 0]),
    "negative positions": torch.tensor([-1]),
    "mask": torch.tensor([True, False, True]),
    "list": [0, 2],
}


@pytest.mark.parametrize("method", ["copy_at_", "update_at_", "setitem"])
@pytest.mark.parametrize("index", list(_INDICES.values()), ids=list(_INDICES))
def test_writes_at_an_index_of_two_dense_trees(index: object, method: str) -> None:
    td = TensorDict(_nested(), [3]).apply(lambda t: torch.arange(t.numel()).view(t.shape) * 1.0)
    src = td[index].apply(lambda t: t + 100)
    expected = _expected_at(td, src, index)
    if method == "setitem":
        td[index] = src
    else:
        getattr(td, method)(src, index)
    assert (td == expected).all()


@pytest.mark.parametrize(
    "index", [3, -4, torch.tensor([0, 3])], ids=["int", "negative", "positions"]
)
def test_copy_at_out_of_range_writes_nothing(index: object) -> None:
    td = TensorDict(_nested(), [3])
    src = TensorDict(_nested(), [3])[0 if type(index) is int else slice(0, 2)].apply(
        lambda t: t + 1
    )
    with pytest.raises(IndexError):
        td.copy_at_(src, index)
    assert (td == 0).all()


@pytest.mark.parametrize("method", ["copy_at_", "update_at_"])
def test_a_write_through_an_index_tensor_refuses_another_dtype_before_writing(
    method: str,
) -> None:
    td = TensorDict(_nested(), [3])
    src = td[torch.tensor([0, 2])].apply(lambda t: t + 1)
    src["n", "m", "c"] = src["n", "m", "c"].double()  # index_put does not cast
    with pytest.raises(DTypeError, match="'n', 'm', 'c'"):
        getattr(td, method)(src, torch.tensor([0, 2]))
    assert (td == 0).all()


def test_setitem_keeps_checking_the_batch_size_of_a_tensordict_value() -> None:
    td = TensorDict(_nested(), [3])
    src = TensorDict(_nested(), [3])[0:2].apply(lambda t: t + 1)
    unbatched = TensorDict(src.to_dict(), [])  # the same leaves, batch_size []
    td[0:2] = unbatched  # each leaf fits its slot, as torch's t[0:2] = v (and upstream)
    assert (td[0:2] == src).all() and (td[2] == 0).all()
    with pytest.raises(BatchSizeError):
        td[0:2] = TensorDict(_nested(), [3])  # 3 rows for 2
    assert (td[0:2] == src).all()


@pytest.mark.parametrize("index", [slice(0, 2), torch.tensor([0, 1])], ids=["slice", "positions"])
def test_copy_at_records_the_graph_of_a_source_that_requires_grad(index: object) -> None:
    w = torch.ones(2, requires_grad=True)
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.zeros(3)}}, [3])
    td.copy_at_(TensorDict({"a": w * 2, "n": {"b": w * 3}}, [2]), index)
    (td["a"].sum() + td["n", "b"].sum()).backward()
    assert torch.equal(w.grad, torch.full((2,), 5.0))


@pytest.mark.parametrize("lazy", [False, True], ids=["dense", "lazy"])
@pytest.mark.parametrize("leaves_only", [False, True])
def test_nested_items_and_values_match_keys_and_get(lazy: bool, leaves_only: bool) -> None:
    td = TensorDict({**_nested(), "s": "text"}, [3])
    if lazy:
        td = lazy_stack([td[i] for i in range(3)], 0)
    keys = list(td.keys(True, leaves_only))
    items = list(td.items(True, leaves_only))
    # as upstream: keys lists a sub-TensorDict after its keys, items before them
    assert sorted(map(str, (k for k, _ in items))) == sorted(map(str, keys))
    for (_, value), expected in zip(items, [td.get(k) for k, _ in items]):
        assert type(value) is type(expected)
        assert (
            (value == expected).all() if is_td(value) or isinstance(value, torch.Tensor) else True
        )
    assert [type(v) for v in td.values(True, leaves_only)] == [type(v) for _, v in items]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7])
def test_split_and_chunk_cut_as_torch(size: int) -> None:
    t = torch.arange(20).view(5, 4)
    td = TensorDict({"a": t, "n": {"b": t.float()}}, [5])
    for ours, theirs in zip(td.split(size), t.split(size), strict=True):
        assert torch.equal(ours["a"], theirs) and ours.batch_size == theirs.shape[:1]
    for ours, theirs in zip(td.chunk(size), t.chunk(size), strict=True):
        assert torch.equal(ours["n", "b"], theirs.float())


def test_lazy_stack_member_by_int_index() -> None:
    members = [TensorDict({"a": torch.full((2,), float(i))}, [2]) for i in range(3)]
    stack = lazy_stack(members, 0)
    assert stack[1] is members[1] and stack[-1] is members[2]
    with pytest.raises(IndexError):
        stack[3]
    along_1 = lazy_stack(members, 1)
    assert torch.equal(along_1[0]["a"], torch.tensor([0.0, 1.0, 2.0]))
    assert along_1[:, 2] is members[2] and along_1[..., -3] is members[0]
    assert along_1[1:, 1].batch_size == torch.Size([1])
    with pytest.raises(IndexError):
        along_1[:, 3]


def test_params_entries_keep_their_order_across_registries() -> None:
    from td_core import TensorDictParams

    params = TensorDictParams(
        TensorDict({"w": torch.zeros(2), "k": torch.arange(2), "n": {"b": torch.ones(2)}}, [2])
    )
    params.set("s", "text")  # one entry per registry: parameter, buffer, module, non-tensor
    keys = ["w", "k", "n", "s"]
    kinds = ["Parameter", "Tensor", "TensorDictParams", "NonTensorData"]
    assert [(k, type(v).__name__) for k, v in params.items()] == list(zip(keys, kinds))
    assert [type(v).__name__ for v in params.values()] == kinds
    assert params.data["k"].dtype == torch.int64


def test_lazy_stack_keys_are_the_members_common_keys() -> None:
    a = TensorDict({"x": torch.zeros(2), "y": torch.zeros(2), "n": {"z": torch.zeros(2)}}, [2])
    b = TensorDict({"y": torch.ones(2), "x": torch.ones(2), "n": {"z": torch.ones(2)}}, [2])
    c = TensorDict({"x": torch.ones(2), "n": {"z": torch.ones(2), "w": torch.ones(2)}}, [2])
    assert list(lazy_stack([a, b], 0).keys(True, True)) == ["x", "y", ("n", "z")]
    assert list(lazy_stack([a, c], 0).keys(True, True)) == ["x", ("n", "z")]


@pytest.mark.parametrize(
    ("leaves", "all_", "any_"),
    [
        ([True, True], True, True),
        ([False, True], False, True),
        ([True, False], False, True),
        ([False, False], False, False),
        ([], True, False),
    ],
)
def test_all_and_any_over_leaves(leaves: list[bool], all_: bool, any_: bool) -> None:
    td = TensorDict({f"k{i}": torch.full((2,), v) for i, v in enumerate(leaves)}, [2])
    assert td.all() is all_ and td.any() is any_


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("last", [True, False])
def test_all_and_any_read_the_first_leaf_once_wherever_it_is(first: bool, last: bool) -> None:
    flat = TensorDict({"a": torch.full((2,), first), "b": torch.full((2,), last)}, [2])
    node_first = TensorDict({"n": {"a": torch.full((2,), first)}, "b": torch.full((2,), last)}, [2])
    for td in (flat, node_first):
        assert td.all() is (first and last) and td.any() is (first or last)


def test_is_empty_counts_leaves_not_nodes() -> None:
    assert TensorDict({}, []).is_empty()
    assert TensorDict({"n": {"m": {}}}, []).is_empty()
    assert not TensorDict({"n": {"m": {"a": torch.zeros(())}}}, []).is_empty()
    assert not TensorDict({"s": "text"}, []).is_empty()  # a non-tensor leaf is a leaf


def test_state_dict_dotted_tensor_leaves_only() -> None:
    td = TensorDict({**_nested(), "s": "text"}, [3])
    sd = td.state_dict(prefix="p.")
    assert list(sd) == ["p.a", "p.n.b", "p.n.m.c"]
    w = torch.zeros(3, requires_grad=True)
    assert not TensorDict({"w": w}, [3]).state_dict()["w"].requires_grad
    assert TensorDict({"w": w}, [3]).state_dict(keep_vars=True)["w"] is w


def test_batch_size_setter_same_size_and_locked() -> None:
    td = TensorDict(_nested(), [3]).lock_()
    td.batch_size = [3]  # unchanged: allowed on a locked TensorDict
    assert td.batch_size == torch.Size([3])
    with pytest.raises(RuntimeError, match="locked"):
        td.batch_size = []
    td.unlock_()
    with pytest.raises(BatchSizeError, match="'a'"):
        td.batch_size = [4]
    assert td.batch_size == torch.Size([3])


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "leaf by leaf"])
@pytest.mark.parametrize("at", [None, 0, 3, 7])
def test_all_and_any_find_the_deciding_leaf_anywhere(
    at: int | None, fuse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from td_core._ops import reduce_engine as _reduce

    if not fuse:
        monkeypatch.setattr(_reduce, "FUSE_NUMEL", 0)
    dtypes = [torch.bool, torch.float32, torch.int64, torch.float64] * 2
    ones = {f"k{i}": torch.ones(4, 2, dtype=d) for i, d in enumerate(dtypes)}
    zeros = {f"k{i}": torch.zeros(4, 2, dtype=d) for i, d in enumerate(dtypes)}
    if at is not None:
        ones[f"k{at}"] = ones[f"k{at}"].clone().index_fill_(1, torch.tensor([1]), 0)
        zeros[f"k{at}"] = zeros[f"k{at}"].clone().index_fill_(1, torch.tensor([1]), 1)
    nested = {"k0": ones.pop("k0"), "n": ones}
    assert TensorDict(nested, [4]).all() is (at is None)
    assert TensorDict(zeros, [4]).any() is (at is not None)
    stack = lazy_stack(list(TensorDict(nested, [4]).unbind(0)), 0)
    assert stack.all() is (at is None)


def test_update_with_nested_tuple_keys_is_all_or_nothing() -> None:
    td = TensorDict(
        {"n": {"a": torch.zeros(3), "m": {"b": torch.zeros(3)}}, "x": torch.zeros(3)}, [3]
    )
    td.update(
        {
            ("n", "a"): torch.ones(3),
            ("n", ("m", "b")): torch.full((3,), 2.0),
            ("x",): torch.full((3,), 3.0),
        }
    )
    assert td["n", "a"].eq(1).all() and td["n", "m", "b"].eq(2).all() and td["x"].eq(3).all()
    td.update({("n", "new"): torch.ones(3), ("z", "w"): torch.ones(3)})  # new keys, a new sub
    assert ("n", "new") in td.keys(True) and td["z"].batch_size == torch.Size([3])
    with pytest.raises(BatchSizeError, match="'n', 'bad'"):
        td.update({("n", "a"): torch.full((3,), 9.0), ("n", "bad"): torch.ones(4)})
    assert td["n", "a"].eq(1).all() and ("n", "bad") not in td.keys(True)


def test_get_of_a_missing_nested_key() -> None:
    td = TensorDict({"n": {"a": torch.zeros(3)}, "x": torch.zeros(3)}, [3])
    assert td.get(("n", "q"), None) is None and td.get(("q", "r"), 7) == 7
    assert td.get(("x", "q"), 5) == 5  # through a leaf: the default
    assert td.get(("n", "q")) is None and td.get(("q", "r")) is None  # as upstream
    with pytest.raises(ValueError, match=r"\('x',\) is a leaf"):  # a leaf on the path: a mistake
        td.get(("x", "q"))
    with set_get_defaults_to_none(False), pytest.raises(KeyError, match=r"\('n', 'q'\)"):
        td.get(("n", "q"))


def test_to_namedtuple_reuses_its_class_per_field_set() -> None:
    td = TensorDict(_nested(), [3])
    first, second = td.to_namedtuple(), td.clone().to_namedtuple()
    assert type(first) is type(second) and first._fields == ("a", "n")
    assert torch.equal(second.n.m.c, td["n", "m", "c"])
    with pytest.raises(ValueError):
        TensorDict({"not an identifier": torch.zeros(3)}, [3]).to_namedtuple()


@pytest.mark.parametrize("op", [torch.stack, torch.cat])
def test_dense_stack_and_cat_read_the_columns_in_the_first_inputs_key_order(op) -> None:
    a = TensorDict({"x": torch.zeros(2), "y": torch.ones(2), "z": torch.full((2,), 2.0)}, [2])
    b = TensorDict(
        {"z": torch.full((2,), 5.0), "x": torch.full((2,), 3.0), "y": torch.ones(2)}, [2]
    )
    out = op([a, b], 0)
    assert list(out.keys()) == ["x", "y", "z"]
    assert out["x"].reshape(-1).tolist() == [0.0, 0.0, 3.0, 3.0]
    assert out["z"].reshape(-1).tolist() == [2.0, 2.0, 5.0, 5.0]
    one = op([TensorDict({"x": torch.zeros(2)}, [2])] * 3, 0)
    assert list(one.keys()) == ["x"] and one["x"].numel() == 6
    assert list(op([TensorDict({}, [2])] * 3, 0).keys()) == []
    other = TensorDict({"x": torch.zeros(2), "y": torch.ones(2), "w": torch.ones(2)}, [2])
    with pytest.raises(KeyError, match="different keys"):  # as many keys, not the same ones
        op([a, other], 0)


def test_a_lazy_stacks_nested_read_restacks_the_members_sub_tensordicts() -> None:
    m0 = TensorDict({"n": TensorDict({"a": torch.zeros(2, 3)}, [2, 3])}, [2])
    stack = lazy_stack([m0, m0.clone()], 1)
    node = stack["n"]
    assert node.batch_size == torch.Size([2, 2, 3]) and node.stack_dim == 1
    assert node.tensordicts[0] is m0["n"] and not node.is_locked
    assert list(stack.keys(True, True)) == [("n", "a")]
    m1 = TensorDict({"n": TensorDict({"a": torch.zeros(2, 4)}, [2, 4])}, [2])
    ragged = lazy_stack([m0, m1], 1)["n"]  # sub-TensorDicts of other sizes: the constructor's
    assert ragged.batch_size == torch.Size([2, 2, -1])  # ragged batch, as upstream
    m2 = TensorDict({"n": TensorDict({"a": torch.zeros(2, 3)}, [2])}, [2])
    with pytest.raises(BatchSizeError, match="as many batch dims"):
        lazy_stack([m0, m2], 1)["n"]  # another rank: no stack of them


def test_len_of_a_nested_keys_view_after_a_write_counts_the_new_key() -> None:
    td = TensorDict(_nested(), [3])
    view = td.keys(include_nested=True)
    it = iter(view)  # a walk, then a write: a later len() walks again
    td["n", "z"] = torch.zeros(3)
    assert len(view) == len(list(it)) + 1 == 6
    assert len(tuple(view)) == len(view) == 6


@pytest.mark.parametrize("keys", [("n", ("n", "b")), (("n", "b"), "n"), (("n", "m", "c"), ("n",))])
def test_select_of_an_entry_and_a_key_under_it_keeps_the_whole_entry(keys) -> None:
    td = TensorDict(_nested(), [3])
    out = td.select(*keys)
    assert list(out.keys(True, True)) == [("n", "b"), ("n", "m", "c")]
    with pytest.raises(KeyError, match="is a leaf"):
        td.select(("a", "x"))


def test_to_a_cpu_string_relabels_without_moving_and_writes_back() -> None:
    td = TensorDict(_nested(), [3])
    out = td.to("cpu")
    assert out.device == torch.device("cpu") and out["n", "m"].device == torch.device("cpu")
    assert out["n", "m", "c"] is td["n", "m", "c"]  # already on cpu: the same tensors
    assert td.to("cpu").to("cpu") is not td and out.to("cpu") is out
    with td.to("cpu") as moved:
        moved["new"] = torch.ones(3)
    assert (td["new"] == 1).all()
    with pytest.raises(RuntimeError):
        td.to("not-a-device")


@pytest.mark.parametrize("order", [(1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0)])
def test_permute_gives_each_leaf_permuted(order) -> None:
    td = TensorDict({"a": torch.randn(2, 3, 4, 5), "n": {"b": torch.randn(2, 3, 4)}}, [2, 3, 4])
    td["s"] = "text"
    out = td.permute(*order)
    assert out.batch_size == torch.Size([td.batch_size[d] for d in order])
    assert torch.equal(out["a"], td["a"].permute(*order, 3))
    assert torch.equal(out["n", "b"], td["n", "b"].permute(*order))
    assert out["a"].data_ptr() == td["a"].data_ptr() and out["s"] == "text"


def test_reshape_to_one_dim_views_or_copies_as_torch() -> None:
    leaf = torch.randn(4, 3, 2).transpose(0, 1)  # [3, 4, 2], not viewable as [12, 2]
    td = TensorDict({"a": leaf, "c": torch.randn(3, 4), "n": {"b": torch.randn(3, 4, 5)}}, [3, 4])
    out = td.reshape(-1)
    assert out.batch_size == torch.Size([12]) and out["n"].batch_size == torch.Size([12])
    assert torch.equal(out["a"], leaf.reshape(12, 2)) and torch.equal(
        out["n", "b"], td["n", "b"].reshape(12, 5)
    )
    assert out["c"].data_ptr() == td["c"].data_ptr()  # a view where one is possible
    with pytest.raises(RuntimeError):
        td.view(-1)  # view refuses the leaf that needs a copy


def test_an_index_tensor_is_checked_on_the_fast_path() -> None:
    td = TensorDict({"a": torch.arange(6).view(3, 2)}, [3])
    assert torch.equal(td[torch.tensor([2, -1, 0])]["a"], td["a"][torch.tensor([2, 2, 0])])
    with pytest.raises(IndexError, match="out of range"):
        td[torch.tensor([0, 3])]
    with pytest.raises(IndexError, match="too many indices"):
        TensorDict({"a": torch.zeros(())}, [])[torch.tensor([0])]
    before = td["a"].clone()
    with pytest.raises(IndexError, match="out of range"):
        td[torch.tensor([1, -4])] = TensorDict({"a": torch.ones(2, 2, dtype=torch.long)}, [2])
    assert torch.equal(td["a"], before)  # nothing written


def test_select_and_exclude_fall_back_at_the_first_nested_key() -> None:
    td = TensorDict(_nested(), [3])
    assert list(td.select("a", ("n", "b")).keys(True, True)) == ["a", ("n", "b")]
    assert list(td.exclude("a", ("n", "m")).keys(True, True)) == [("n", "b")]
    assert list(td.select("z", "a", strict=False).keys()) == ["a"]
    assert list(td.select().keys()) == [] and list(td.exclude().keys()) == ["a", "n"]
    for keys in (("z", "a"), ("z", ("n", "b")), ("a", ("n", "z"))):
        with pytest.raises(KeyError, match="'z'"):
            td.select(*keys)


@pytest.mark.parametrize("index", [(2, 1), (slice(None), 1), (-1, slice(1, 3)), (1,), ()], ids=str)
def test_setitem_at_a_tuple_of_ints_and_slices_writes_that_region_only(index: tuple) -> None:
    td = TensorDict({"a": torch.zeros(3, 4, 5), "n": {"b": torch.zeros(3, 4)}}, [3, 4])
    src = td[index].apply(lambda t: t + 1)
    td[index] = src
    plain = torch.zeros(3, 4)
    plain[index] = 1
    assert torch.equal(td["n", "b"], plain)
    assert torch.equal(td["a"], plain[..., None].expand(3, 4, 5))


@pytest.mark.parametrize("index", [(3, 0), (0, -5), (0, 0, 0)], ids=str)
def test_setitem_at_a_tuple_out_of_range_raises_and_writes_nothing(index: tuple) -> None:
    td = TensorDict({"a": torch.zeros(3, 4)}, [3, 4])
    with pytest.raises(IndexError):
        td[index] = TensorDict({"a": torch.ones(())}, [])
    assert (td["a"] == 0).all()


def test_the_top_level_keys_view_is_live_and_refuses_nested_keys() -> None:
    td = TensorDict(_nested(), [3])
    keys = td.keys()
    td["z"] = torch.zeros(3)
    assert list(keys) == ["a", "n", "z"] and len(keys) == 3
    assert "z" in keys and ("n", "b") in td.keys(True, True)
    assert "b" not in keys and keys == {"a", "n", "z"}
    with pytest.raises(TypeError, match="include_nested"):
        ("n", "b") in keys  # noqa: B015
    del td["z"]
    assert list(keys) == ["a", "n"]
