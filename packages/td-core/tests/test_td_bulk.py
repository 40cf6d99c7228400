"""Operations over every leaf: apply, arithmetic, comparisons, casts, copies, memory."""

import operator

import pytest
import torch

from td_core import TensorDict

LEAVES = ["a", ("n", "b"), ("n", "m", "c")]


def make_td(scale=1.0):
    return TensorDict(
        {
            "a": torch.arange(6.0).reshape(3, 2) * scale,
            "n": {"b": torch.full((3,), 2.0) * scale, "m": {"c": torch.ones(3, 4) * scale}},
        },
        batch_size=[3],
    )


# ---------------------------------------------------------------- apply


def test_apply_returns_new_tensordict():
    td = make_td()
    out = td.apply(lambda x: x + 1)
    assert isinstance(out, TensorDict)
    assert out is not td
    assert out.batch_size == td.batch_size
    assert out["n"].batch_size == td["n"].batch_size
    for key in LEAVES:
        assert torch.equal(out[key], td[key] + 1), key
    assert torch.equal(td["a"], torch.arange(6.0).reshape(3, 2))


def test_apply_several_tensordicts():
    x, y, z = make_td(), make_td(10.0), make_td(100.0)
    out = x.apply(lambda a, b, c: a + b + c, y, z)
    for key in LEAVES:
        assert torch.equal(out[key], x[key] * 111), key


def test_apply_none_drops_entry():
    data = TensorDict(
        {"a": torch.tensor(1.0, dtype=torch.float), "b": torch.tensor(1, dtype=torch.int64)}, []
    )
    data_float = data.apply(lambda x: x if x.dtype == torch.float else None)
    assert "a" in data_float.keys()
    assert "b" not in data_float.keys()


def test_apply_none_drops_nested_entry():
    td = TensorDict(
        {"a": torch.zeros(2), "n": {"i": torch.zeros(2, dtype=torch.int64), "f": torch.zeros(2)}},
        [2],
    )
    out = td.apply(lambda x: x if x.is_floating_point() else None)
    keys = set(out.keys(include_nested=True, leaves_only=True))
    assert keys == {"a", ("n", "f")}


def test_apply_can_change_feature_shape_and_dtype():
    td = make_td()
    out = td.apply(lambda x: x.unsqueeze(-1).to(torch.float64))
    assert out["a"].shape == torch.Size([3, 2, 1])
    assert out["n", "b"].dtype == torch.float64
    assert out.batch_size == torch.Size([3])


def test_apply_in_place():
    td = make_td()
    a = td["a"]
    out = td.apply_(lambda x: x * 2)
    assert out is td
    assert td["a"] is a
    assert torch.equal(a, torch.arange(6.0).reshape(3, 2) * 2)
    assert torch.equal(td["n", "m", "c"], torch.full((3, 4), 2.0))


def test_named_apply_sees_nested_keys():
    td = make_td()
    seen = []

    def fn(key, value):
        seen.append(key)
        return value * 0 if key == ("n", "b") else value

    out = td.named_apply(fn, nested_keys=True)
    assert set(seen) == set(LEAVES)
    assert (out["n", "b"] == 0).all()
    assert torch.equal(out["a"], td["a"])


def test_named_apply_leaf_names():
    td = make_td()
    seen = []
    td.named_apply(lambda key, value: seen.append(key) or value)
    assert set(seen) == {"a", "b", "c"}


def test_named_apply_none_drops():
    td = make_td()
    out = td.named_apply(lambda key, value: None if key == "a" else value, nested_keys=True)
    assert "a" not in out.keys()
    assert ("n", "b") in out.keys(include_nested=True)


# ---------------------------------------------------------------- arithmetic


OTHER_KINDS = ["scalar", "tensor", "tensordict"]


def _leafwise(op, td, other_kind, other_td):
    """`op(td, other)` for an `other` of `other_kind`: a TensorDict of td's batch size.

    Yields `(key, result leaf, op on td's leaf)` for every leaf.
    """
    other = {"scalar": 2.0, "tensor": torch.tensor(2.0), "tensordict": other_td}[other_kind]
    out = op(td, other)
    assert isinstance(out, TensorDict)
    assert out.batch_size == td.batch_size
    for key in LEAVES:
        rhs = other[key] if other_kind == "tensordict" else other
        yield key, out[key], op(td[key], rhs)


@pytest.mark.parametrize(
    "op",
    [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow],
    ids=lambda op: op.__name__,
)
@pytest.mark.parametrize("other_kind", OTHER_KINDS)
def test_binary_operators(op, other_kind):
    for key, got, want in _leafwise(op, make_td() + 1, other_kind, make_td(3.0)):
        assert torch.allclose(got, want), key


@pytest.mark.parametrize(
    "op", [operator.add, operator.sub, operator.mul], ids=["radd", "rsub", "rmul"]
)
def test_reflected_operators(op):
    td = make_td()
    out = op(3.0, td)
    for key in LEAVES:
        assert torch.equal(out[key], op(3.0, td[key])), key


def test_neg_and_abs():
    td = make_td()
    assert torch.equal((-td)["n", "b"], -td["n", "b"])
    assert torch.equal(abs(-td)["a"], td["a"])


INPLACE = [
    ("iadd", operator.iadd, operator.add),
    ("isub", operator.isub, operator.sub),
    ("imul", operator.imul, operator.mul),
    ("itruediv", operator.itruediv, operator.truediv),
]


@pytest.mark.parametrize(("iop", "op"), [c[1:] for c in INPLACE], ids=[c[0] for c in INPLACE])
@pytest.mark.parametrize("other_kind", ["scalar", "tensordict"])
def test_inplace_operators_keep_tensors(iop, op, other_kind):
    td = make_td() + 1
    before = td.clone()
    leaves = {key: td[key] for key in LEAVES}
    other = 2.0 if other_kind == "scalar" else make_td(3.0)
    result = iop(td, other)
    assert result is td
    for key in LEAVES:
        rhs = other if other_kind == "scalar" else other[key]
        assert td[key] is leaves[key], key
        assert torch.allclose(td[key], op(before[key], rhs)), key


@pytest.mark.parametrize(
    ("method", "arg", "expected"),
    [
        ("add_", 1.0, lambda t: t + 1),
        ("sub_", 1.0, lambda t: t - 1),
        ("mul_", 3.0, lambda t: t * 3),
        ("div_", 2.0, lambda t: t / 2),
    ],
)
def test_inplace_methods(method, arg, expected):
    td = make_td()
    before = td.clone()
    a = td["a"]
    out = getattr(td, method)(arg)
    assert out is td
    assert td["a"] is a
    for key in LEAVES:
        assert torch.allclose(td[key], expected(before[key])), key


def test_add_with_tensordict_and_alpha():
    td = make_td()
    out = td.clone().add_(make_td(), alpha=2)
    for key in LEAVES:
        assert torch.equal(out[key], td[key] * 3), key


# ---------------------------------------------------------------- comparisons


@pytest.mark.parametrize(
    "op",
    [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge],
    ids=lambda op: op.__name__,
)
@pytest.mark.parametrize("other_kind", OTHER_KINDS)
def test_comparisons_give_bool_tensordict(op, other_kind):
    twos = make_td().apply(lambda x: torch.full_like(x, 2.0))
    for key, got, want in _leafwise(op, make_td(), other_kind, twos):
        assert got.dtype == torch.bool, key
        assert torch.equal(got, want), key


def test_eq_all_any():
    a, b = make_td(), make_td()
    eq = a == b
    assert isinstance(eq, TensorDict)
    assert eq.all()
    assert eq.any()
    assert bool((a == b).all()) is True
    b["n", "m", "c"][0, 0] = -1
    assert not (a == b).all()
    assert (a == b).any()
    assert not (a != a).any()
    assert (a != b).any()


def test_all_any_on_values():
    td = TensorDict({"x": torch.tensor([1, 1]), "n": {"y": torch.tensor([True, False])}}, [2])
    assert not td.all()
    assert td.any()
    assert TensorDict({"x": torch.zeros(2)}, [2]).any() == False  # noqa: E712


def test_logical_and_or():
    td = make_td()
    both = (td > 0) & (td < 5)
    either = (td > 4) | (td < 1)
    for key in LEAVES:
        assert torch.equal(both[key], (td[key] > 0) & (td[key] < 5)), key
        assert torch.equal(either[key], (td[key] > 4) | (td[key] < 1)), key


# ---------------------------------------------------------------- copies


def test_clone_is_deep():
    td = make_td()
    c = td.clone()
    assert isinstance(c, TensorDict)
    assert c.batch_size == td.batch_size
    for key in LEAVES:
        assert torch.equal(c[key], td[key])
        assert c[key].data_ptr() != td[key].data_ptr()
    c["n", "m", "c"].zero_()
    assert (td["n", "m", "c"] == 1).all()
    c["new"] = torch.zeros(3)
    assert "new" not in td.keys()
    c["n", "new"] = torch.zeros(3)
    assert ("n", "new") not in td.keys(include_nested=True)


def test_detach():
    td = make_td().requires_grad_()
    out = (td * 2).detach()
    for key in LEAVES:
        assert not out[key].requires_grad, key
        assert out[key].grad_fn is None


def test_requires_grad_():
    td = make_td()
    out = td.requires_grad_()
    assert out is td
    for key in LEAVES:
        assert td[key].requires_grad, key
    td.requires_grad_(False)
    assert not td["a"].requires_grad


def test_zero_():
    td = make_td() + 1
    a = td["a"]
    assert td.zero_() is td
    assert td["a"] is a
    for key in LEAVES:
        assert (td[key] == 0).all(), key


def test_fill_one_key():
    td = make_td()
    a = td["a"]
    assert td.fill_("a", 5.0) is td
    assert td["a"] is a
    assert (td["a"] == 5).all()
    td.fill_(("n", "b"), -1)
    assert (td["n", "b"] == -1).all()
    assert (td["n", "m", "c"] == 1).all()


# ---------------------------------------------------------------- casts and devices


@pytest.mark.parametrize(
    ("method", "dtype"),
    [
        ("float", torch.float32),
        ("double", torch.float64),
        ("half", torch.float16),
        ("bfloat16", torch.bfloat16),
        ("int", torch.int32),
        ("bool", torch.bool),
    ],
)
def test_dtype_casts(method, dtype):
    td = make_td()
    out = getattr(td, method)()
    assert out.batch_size == td.batch_size
    for key in LEAVES:
        assert out[key].dtype == dtype, key
        assert torch.equal(out[key], td[key].to(dtype)), key
    assert td["a"].dtype == torch.float32


def test_to_dtype():
    td = make_td()
    out = td.to(torch.float64)
    for key in LEAVES:
        assert out[key].dtype == torch.float64, key
    assert td["a"].dtype == torch.float32


def test_to_device():
    td = make_td()
    out = td.to("meta")
    assert out.device == torch.device("meta")
    assert out["n"].device == torch.device("meta")
    for key in LEAVES:
        assert out[key].device.type == "meta", key
    out2 = td.to(torch.device("cpu"))
    assert out2.device == torch.device("cpu")
    assert torch.equal(out2["a"], td["a"])


def test_a_device_without_index_gets_one_as_upstream():
    # "cuda" is the current CUDA device (cuda:0 here on a GPU machine: see
    # tests-integration/test_cuda.py), another accelerator its index 0; cpu and meta stay
    assert TensorDict({}, [], device="xpu").device == torch.device("xpu", 0)
    assert TensorDict({}, [], device=torch.device("xpu")).device == torch.device("xpu", 0)
    assert TensorDict({}, [], device="cpu").device == torch.device("cpu")
    assert TensorDict({}, [], device="meta").device.index is None


def test_to_device_keyword_and_device_dtype():
    td = make_td()
    assert td.to(device="meta")["a"].device.type == "meta"
    both = td.to("meta", torch.float64)
    assert both["n", "b"].device.type == "meta"
    assert both["n", "b"].dtype == torch.float64


def test_to_other_tensor():
    td = make_td()
    out = td.to(torch.zeros(1, dtype=torch.float64))
    for key in LEAVES:
        assert out[key].dtype == torch.float64, key


def test_contiguous():
    td = make_td().expand(4, 3)
    assert not td["a"].is_contiguous()
    out = td.contiguous()
    assert out.batch_size == torch.Size([4, 3])
    for key in LEAVES:
        assert out[key].is_contiguous(), key
        assert torch.equal(out[key], td[key]), key


def test_share_memory_():
    td = make_td()
    assert not td.is_shared()
    out = td.share_memory_()
    assert out is td
    assert td.is_shared()
    for key in LEAVES:
        assert td[key].is_shared(), key


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path; CUDA is available")
def test_pin_memory_without_cuda_raises():
    td = make_td()
    with pytest.raises(RuntimeError, match=r"(?i)cuda|nvidia"):
        td.pin_memory()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs CUDA, not available")
def test_pin_memory_with_cuda():
    td = make_td().pin_memory()
    for key in LEAVES:
        assert td[key].is_pinned(), key
