"""pad, pad_sequence, unpad_sequence, merge_tensordicts, maybe_dense_stack, dense_stack_tds,
group_by and collate, each checked against upstream tensordict on the same data."""

import warnings

import pytest
import torch

import td_core as td

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up


def leaves(x):
    """{key: tensor} of the tensor leaves, and the batch size."""
    out = {}
    for key in x.keys(include_nested=True, leaves_only=True):
        value = x.get(key)
        if isinstance(value, torch.Tensor):
            out[key if isinstance(key, str) else tuple(key)] = value
    return out, tuple(x.batch_size)


def same(a, b):
    la, bsa = leaves(a)
    lb, bsb = leaves(b)
    assert bsa == bsb
    assert sorted(la, key=str) == sorted(lb, key=str)
    for key in la:
        torch.testing.assert_close(la[key], lb[key], msg=f"key {key}")


def sample(m, n, batched=True):
    return m.TensorDict(
        a=torch.arange(n * 2.0).reshape(n, 2),
        b=torch.arange(n),
        n=m.TensorDict(c=torch.ones(n, 3), batch_size=[n]),
        batch_size=[n] if batched else [],
    )


# ---------------------------------------------------------------------- pad
@pytest.mark.parametrize(
    "pad_size, value", [([1, 2], -1.0), ([-1, 0], 0.0), ([0, 0], 3.0), ([2, 0], 5)]
)
def test_pad_matches_upstream(pad_size, value):
    same(td.pad(sample(td, 3), pad_size, value=value), up.pad(sample(up, 3), pad_size, value=value))


def test_pad_two_dims_and_non_tensor():
    def make(m):
        x = m.TensorDict(a=torch.ones(2, 3, 1), batch_size=[2, 3])
        x["s"] = "v"
        return x

    ours, theirs = td.pad(make(td), [0, 1, 1, 1]), up.pad(make(up), [0, 1, 1, 1])
    same(ours, theirs)
    assert ours["s"] == [["v"] * 5, ["v"] * 5, [None] * 5] or ours[2, 0]["s"] is None
    assert ours[0, 0]["s"] is None and ours[0, 1]["s"] == "v"


def test_pad_tensorclass_keeps_class():
    @td.tensorclass
    class Data:
        x: torch.Tensor

    out = td.pad(Data(x=torch.ones(3), batch_size=[3]), [1, 1])
    assert type(out) is Data and out.batch_size == (5,)


def test_pad_inplace_keeps_identity_and_nested():
    x = sample(td, 3)
    nested = x["n"]
    assert td.pad(x, [0, 1], inplace=True) is x
    assert x.batch_size == (4,) and x["n"] is nested and nested.batch_size == (4,)
    same(x, up.pad(sample(up, 3), [0, 1]))


@pytest.mark.parametrize("pad_size", [[1], [1, 0, 0, 2, 1, 1]])
def test_pad_errors_match_upstream(pad_size):
    with pytest.raises(RuntimeError):
        up.pad(sample(up, 3), pad_size)
    x = sample(td, 3)
    before = x.clone()
    with pytest.raises(RuntimeError, match="pad_size"):
        td.pad(x, pad_size, inplace=True)
    td.assert_close(x, before)


def test_pad_crop_below_zero_leaves_input_unchanged():
    x = sample(td, 3)
    with pytest.raises(RuntimeError, match="below zero"):
        td.pad(x, [-2, -2], inplace=True)
    assert x.batch_size == (3,)


# ------------------------------------------------------------- pad_sequence
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"return_mask": True},
        {"return_mask": ("x", "m"), "padding_side": "left", "padding_value": {"a": 5.0}},
        {"padding_value": 7},
        {"pad_dim": 0, "return_mask": "masks"},
    ],
)
def test_pad_sequence_matches_upstream(kwargs):
    ours = td.pad_sequence([sample(td, 2), sample(td, 4)], **kwargs)
    theirs = up.pad_sequence([sample(up, 2), sample(up, 4)], **kwargs)
    same(ours, theirs)


def test_pad_sequence_feature_dim():
    ours = td.pad_sequence(
        [td.TensorDict(a=torch.ones(n, 8)) for n in (3, 5)], pad_dim=0, return_mask=True
    )
    theirs = up.pad_sequence(
        [up.TensorDict(a=torch.ones(n, 8)) for n in (3, 5)], pad_dim=0, return_mask=True
    )
    same(ours, theirs)
    assert ours["masks", "a"].sum(-1).tolist() == [3, 5]


def test_pad_sequence_non_tensor_padded_with_none():
    def make(m, n):
        x = m.TensorDict(a=torch.ones(n, 2), batch_size=[n])
        x["s"] = "x"
        return x

    ours = td.pad_sequence([make(td, 2), make(td, 3)], return_mask=True)
    theirs = up.pad_sequence([make(up, 2), make(up, 3)], return_mask=True)
    same(ours, theirs)
    assert ours["s"] == [["x", "x", None], ["x", "x", "x"]]


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        ([], {}, RuntimeError),
        (None, {"padding_side": "middle"}, ValueError),
        (None, {"padding_value": {"zz": 1.0}}, KeyError),
        (None, {"pad_dim": 1}, IndexError),
    ],
)
def test_pad_sequence_errors(args, kwargs, error):
    for m in (up, td):
        items = [sample(m, 2), sample(m, 4)] if args is None else args
        with pytest.raises(error):
            m.pad_sequence(items, **kwargs)


def test_pad_sequence_tensorclass_mask_refused():
    @td.tensorclass
    class Data:
        x: torch.Tensor

    items = [Data(x=torch.ones(n), batch_size=[n]) for n in (1, 2)]
    assert type(td.pad_sequence(items)) is Data
    with pytest.raises(RuntimeError, match="to_tensordict"):
        td.pad_sequence(items, return_mask=True)


@pytest.mark.parametrize("side", ["left", "right"])
def test_unpad_sequence_round_trip(side):
    ours = td.unpad_sequence(
        td.pad_sequence([sample(td, 2), sample(td, 4)], return_mask=True, padding_side=side)
    )
    theirs = up.unpad_sequence(
        up.pad_sequence([sample(up, 2), sample(up, 4)], return_mask=True, padding_side=side)
    )
    assert isinstance(ours, td.LazyStackedTensorDict)
    assert "masks" not in ours.keys()
    for i in range(2):
        for key in ("a", "b", ("n", "c")):
            torch.testing.assert_close(ours[i][key], theirs[i][key])


def test_unpad_sequence_tensor_mask_and_errors():
    padded = td.pad_sequence([td.TensorDict(a=torch.ones(n, 2)) for n in (1, 3)], return_mask=True)
    mask = padded["masks", "a"]
    samples = td.unpad_sequence(padded.exclude("masks"), mask)
    assert [s["a"].shape[0] for s in samples.tensordicts] == [1, 3]
    with pytest.raises(ValueError, match="masks"):
        td.unpad_sequence(padded.exclude("masks"))
    with pytest.raises(ValueError, match="shape"):
        td.unpad_sequence(padded.exclude("masks"), mask[0])
    with pytest.raises(ValueError, match="first batch dim"):
        td.unpad_sequence(td.TensorDict(a=torch.ones(2)).exclude("a"))
    bad = mask.clone()
    bad[1] = torch.tensor([True, False, True])
    with pytest.raises(ValueError, match="contiguous"):
        td.unpad_sequence(padded.exclude("masks"), bad)


# ------------------------------------------------------------------ merging
@pytest.mark.parametrize(
    "callback",
    [None, lambda *v: torch.stack(v), {"common": lambda *v: sum(v) + 10}],
    ids=["first", "stack", "per-key"],
)
def test_merge_tensordicts_matches_upstream(callback):
    def make(m):
        a = m.TensorDict({"a": {"b0": 0}, "common": 0})
        b = m.TensorDict({"a": {"b1": 1}, "f": 1, "common": 1})
        c = m.TensorDict({"a": {"b2": 2}, "common": 2})
        return m.merge_tensordicts(a, b, c, callback_exist=callback)

    same(make(td), make(up))


def test_merge_tensordicts_needs_two():
    for m in (td, up):
        with pytest.raises(RuntimeError):
            m.merge_tensordicts(m.TensorDict(a=0))


def test_merge_does_not_modify_inputs():
    a, b = td.TensorDict(a=torch.zeros(2)), td.TensorDict(b=torch.ones(2))
    td.merge_tensordicts(a, b)
    assert list(a.keys()) == ["a"] and list(b.keys()) == ["b"]


# ------------------------------------------------------- maybe_dense_stack
def variants(m):
    a = m.TensorDict(x=torch.zeros(3), n=m.TensorDict(y=torch.zeros(2)))
    b = m.TensorDict(x=torch.ones(3), n=m.TensorDict(y=torch.zeros(4)))
    c = m.TensorDict(x=torch.zeros(4), n=m.TensorDict(y=torch.zeros(2)))
    d = m.TensorDict(x=torch.zeros(3), n=m.TensorDict(z=torch.zeros(2)))
    return a, [a, b, c, d]


@pytest.mark.parametrize("which", range(4))
def test_maybe_dense_stack_types_match_upstream(which):
    a, others = variants(td)
    ua, uothers = variants(up)
    ours = td.maybe_dense_stack([a, others[which]])
    theirs = up.maybe_dense_stack([ua, uothers[which]])
    assert type(ours).__name__ == type(theirs).__name__
    if type(ours).__name__ == "TensorDict":
        assert type(ours.get("n")).__name__ == type(theirs.get("n")).__name__
        torch.testing.assert_close(ours["x"], theirs["x"])


def test_maybe_dense_stack_keeps_tensorclass_and_dim():
    @td.tensorclass
    class Data:
        x: torch.Tensor

    items = [Data(x=torch.ones(2, 3), batch_size=[2]) for _ in range(4)]
    out = td.maybe_dense_stack(items, dim=1)
    assert type(out) is Data and out.batch_size == (2, 4)


def test_classmethod_maybe_dense_stack_is_the_best_intention_stack():
    # top-level entries agree, sub-TensorDicts differ: dense, with a lazy sub-stack
    t0 = td.TensorDict(a=1, b=td.TensorDict(c=2))
    t1 = td.TensorDict(a=1, b=td.TensorDict(d=2))
    for cls in (td.TensorDict, td.LazyStackedTensorDict):
        out = cls.maybe_dense_stack([t0, t1])
        assert type(out) is td.TensorDict and out["a"].tolist() == [1, 1]
        assert type(out.get("b")) is td.LazyStackedTensorDict
    # lazy stacks with the same keys go member by member; other keys keep the inputs whole
    m0 = td.TensorDict(a=torch.zeros(3), b=torch.zeros(4))
    m1 = td.TensorDict(a=torch.zeros(3), b=torch.zeros(5))
    s0 = td.TensorDict.maybe_dense_stack([m0, m1])
    s1 = s0.clone()
    out = td.TensorDict.maybe_dense_stack([s0, s1])
    assert type(out) is td.LazyStackedTensorDict
    assert [type(m) for m in out.tensordicts] == [td.TensorDict, td.TensorDict]
    del s1["a"]
    out = td.TensorDict.maybe_dense_stack([s0, s1])
    assert out.tensordicts[0] is s0 and out.tensordicts[1] is s1


def test_dense_stack_tds():
    a, others = variants(td)
    stack = td.lazy_stack([a, a.clone()])
    assert type(td.dense_stack_tds(stack)) is td.TensorDict
    assert td.dense_stack_tds(a) is a
    assert type(td.dense_stack_tds([a, a], dim=0)) is td.TensorDict
    with pytest.raises(ValueError, match="dim"):
        td.dense_stack_tds([a, a])
    with pytest.raises(ValueError):
        up.dense_stack_tds([a, a])
    nested = td.lazy_stack([td.TensorDict(l=td.lazy_stack([a, others[1]])) for _ in range(2)])
    out = td.dense_stack_tds(nested)
    assert type(out) is td.TensorDict and out.batch_size == (2,)
    assert out["l", "x"].shape == (2, 2, 3)
    assert isinstance(out["l", "n"], td.LazyStackedTensorDict)


@pytest.mark.parametrize("stack_dim, inner_dim", [(0, 0), (1, 0), (0, 1), (2, 1)])
def test_dense_stack_tds_keeps_nested_lazy_members(stack_dim, inner_dim):
    # the nested lazy stacks are stacked member by member, as upstream: member 1's
    # exclusive key 'b' stays visible and the stack dim is shifted past `stack_dim`
    for m in (td, up):
        t0 = m.TensorDict(a=torch.zeros(5, 6, 3), batch_size=[5, 6])
        t1 = m.TensorDict(a=torch.zeros(5, 6, 4), b=torch.zeros(5, 6, 2), batch_size=[5, 6])
        inner = m.LazyStackedTensorDict.lazy_stack([t0, t1], dim=inner_dim)
        box = m.TensorDict(lazy=inner, batch_size=inner.batch_size)
        out = m.dense_stack_tds(m.LazyStackedTensorDict.lazy_stack([box, box + 1], dim=stack_dim))
        nested = out["lazy"]
        assert type(out).__name__ == "TensorDict"
        assert type(nested).__name__ == "LazyStackedTensorDict"
        assert nested.stack_dim == (inner_dim + 1 if stack_dim <= inner_dim else inner_dim)
        assert "b" not in nested.tensordicts[0].keys() and "b" in nested.tensordicts[1].keys()
        for i in range(2):
            assert (out[(slice(None),) * stack_dim + (i,)] == i).all()


def test_compare_with_number_reads_nested_ragged_stack_per_member():
    ragged = td.lazy_stack([td.TensorDict(a=torch.zeros(3)), td.TensorDict(a=torch.ones(4))])
    outer = td.TensorDict(n=ragged, batch_size=[2])
    eq = outer == 0
    assert isinstance(eq["n"], td.LazyStackedTensorDict)
    assert [m["a"].tolist() for m in eq["n"].tensordicts] == [[True] * 3, [False] * 4]
    assert not eq.all() and (outer >= 0).all()


# ----------------------------------------------------------------- group_by
def test_group_by_tensor_and_rows():
    for m in (td, up):
        x = m.TensorDict(uid=torch.tensor([2, 0, 2, 1, 0]), r=torch.arange(5.0), batch_size=[5])
        values, groups = m.group_by(x, "uid")
        assert values.tolist() == [0, 1, 2]
        assert [g["r"].tolist() for g in groups] == [[1.0, 4.0], [3.0], [0.0, 2.0]]
        x = m.TensorDict(
            u=torch.tensor([[1, 2], [0, 1], [1, 2]]), r=torch.arange(3.0), batch_size=[3]
        )
        values, groups = m.group_by(x, "u")
        assert values.tolist() == [[0, 1], [1, 2]]
        assert [g["r"].tolist() for g in groups] == [[1.0], [0.0, 2.0]]


def test_group_by_non_tensor_and_errors():
    x = td.TensorDict(r=torch.arange(5.0), batch_size=[5])
    x["s"] = td.NonTensorStack.from_list(list("abacb"))
    values, groups = td.group_by(x, "s")
    assert values == ["a", "b", "c"]
    assert [g["r"].tolist() for g in groups] == [[0.0, 2.0], [1.0, 4.0], [3.0]]
    with pytest.raises(ValueError):
        td.group_by(td.TensorDict(a=1), "a")
    with pytest.raises(KeyError, match="zz"):
        td.group_by(x, "zz")
    with pytest.raises(TypeError):
        td.group_by(td.TensorDict(n=td.TensorDict(batch_size=[5]), batch_size=[5]), "n")


# ------------------------------------------------------------------ collate
def test_collate_matches_upstream():
    for m in (td, up):
        out = m.collate([(m.TensorDict(x=torch.zeros(3)), i) for i in range(4)])
        assert out[0].batch_size == (4,) and out[1].tolist() == [0, 1, 2, 3]
        out = m.collate([{"t": m.TensorDict(x=torch.zeros(3)), "y": torch.ones(2)}] * 2)
        assert out["t"].batch_size == (2,) and out["y"].shape == (2, 2)
    assert td.collate("not a list") == "not a list"


def test_collate_pad_and_nested_keys():
    def samples(m):
        return [
            m.TensorDict(ids=torch.ones(n, dtype=torch.long), y=torch.tensor(1.0)) for n in (2, 3)
        ]

    ours = td.collate(samples(td), pad_keys={"ids": 7}, mask_key="mask")
    theirs = up.collate(samples(up), pad_keys={"ids": 7}, mask_key="mask")
    same(ours, theirs)
    out = td.collate(samples(td), nested_keys=["ids"])
    assert out["ids"].is_nested and out.batch_size == (2,)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"mask_key": "m"}, ValueError),
        ({"pad_keys": {"zz": 0}}, KeyError),
        ({"pad_keys": {"ids": 0}, "nested_keys": ["ids"]}, ValueError),
        ({"pad_keys": {"ids": 0}, "mask_key": "y"}, ValueError),
    ],
)
def test_collate_errors_match_upstream(kwargs, error):
    for m in (td, up):
        items = [m.TensorDict(ids=torch.ones(n), y=torch.tensor(1.0)) for n in (2, 3)]
        with pytest.raises(error):
            m.collate(items, **kwargs)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("how", ["function", "method"])
def test_pad_leaves_unbatched_data_alone(how, inplace):
    # an UnbatchedTensor has no batch dims: padding keeps its data and gives it the new batch size
    data = torch.randn(3, 4)
    x = td.TensorDict(
        {"a": torch.zeros(2, 3, 1), "u": td.UnbatchedTensor(data), "n": {"v": torch.zeros(2, 3)}},
        [2, 3],
    )
    x["n", "w"] = td.UnbatchedTensor(torch.ones(5))
    out = (
        td.pad(x, [0, 1, 0, 2], inplace=inplace)
        if how == "function"
        else x.pad([0, 1, 0, 2], inplace=inplace)
    )
    assert out.batch_size == (3, 5) and out["a"].shape == (3, 5, 1)
    assert out["u"].shape == (3, 4) and out["u"].data_ptr() == data.data_ptr()
    assert out["u"].batch_size == (3, 5) and out["n", "w"].batch_size == (3, 5)
    assert out["n", "w"].shape == (5,)


def test_pad_function_and_method_agree_on_every_leaf_kind() -> None:
    # one implementation: the function is the method (non-tensor slots hold None)
    src = td.TensorDict(
        {
            "x": torch.arange(6.0).view(3, 2),
            "b": torch.ones(3, dtype=torch.bool),
            "s": td.NonTensorStack("a", "b", "c"),
            "n": td.TensorDict({"y": torch.ones(3, 2, 4)}, [3, 2]),
        },
        [3],
    )
    for pad_size in ([1, 0], [0, 2], [-1, 1]):
        by_function = td.pad(src, pad_size, value=7.0)
        by_method = src.pad(pad_size, value=7.0)
        assert (by_function.exclude("s") == by_method.exclude("s")).all()
        assert by_function["s"] == by_method["s"]
    assert td.pad(src, [0, 1])["s"] == ["a", "b", "c", None]
    assert td.pad(src, [0, 1])["n"].batch_size == torch.Size([4, 2])


def test_pad_of_a_non_tensor_stack_on_its_own() -> None:
    stack = td.NonTensorStack("a", "b")
    padded = td.pad(stack, [1, 1])
    assert isinstance(padded, td.NonTensorStack)
    assert padded.tolist() == [None, "a", "b", None]
    assert td.pad(stack, [0, 1], inplace=True) is stack
    assert stack.tolist() == ["a", "b", None] and stack.batch_size == torch.Size([3])
    single = td.NonTensorData("a", batch_size=[2])
    with pytest.raises(RuntimeError, match="cannot preserve the identity"):
        td.pad(single, [0, 1], inplace=True)
    assert single.batch_size == torch.Size([2])
    with pytest.raises(RuntimeError, match="pairs"):
        td.pad(stack, [1])
