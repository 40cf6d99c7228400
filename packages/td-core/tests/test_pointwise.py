"""Pointwise math and casts: error messages, all-or-nothing in-place ops, torch.func transforms."""

from __future__ import annotations

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict


def make() -> TensorDict:
    return TensorDict(
        {
            "a": torch.linspace(0.1, 1.0, 12).reshape(4, 3),
            "i": torch.arange(12).reshape(4, 3),
            "n": {"x": torch.linspace(-1.0, 1.0, 24).reshape(4, 3, 2)},
            "s": "text",
        },
        [4, 3],
    )


def floats() -> TensorDict:
    return make().exclude("i")


# ------------------------------------------------------------------ errors
def test_missing_key_is_named() -> None:
    with pytest.raises(KeyError, match=r"'x'"):
        floats() + floats().exclude(("n", "x"))
    with pytest.raises(KeyError, match=r"'a'"):
        floats().lerp_(floats().exclude("a"), 0.5)


def test_extra_key_is_named_out_of_place_only() -> None:
    other = floats().set("extra", torch.zeros(4, 3))
    with pytest.raises(KeyError, match="extra"):
        floats() + other
    td = floats()
    td.add_(other)  # in place, the operand may hold more keys (as upstream)
    assert torch.allclose(td["a"], 2 * floats()["a"])


def test_default_fills_or_intersects() -> None:
    partial = floats().exclude("a")
    both = floats().add(partial, default="intersection")
    assert set(both.keys(True, True)) == {("n", "x")}
    filled = floats().add(partial, default=0.0)
    assert torch.equal(filled["a"], floats()["a"])


def test_bad_tensor_shape_is_named() -> None:
    with pytest.raises(RuntimeError, match=r"\[5\].*\[4, 3\]"):
        floats() + torch.ones(5)


def test_tensor_operand_aligns_with_batch_dims() -> None:
    t = torch.arange(3.0)
    out = floats() * t
    assert torch.equal(out["n", "x"], floats()["n", "x"] * t[None, :, None])
    assert out.batch_size == torch.Size([4, 3])
    grown = floats() + torch.zeros(2, 4, 3)
    assert grown.batch_size == torch.Size([2, 4, 3])


def test_inplace_bad_shape_leaves_data_unchanged() -> None:
    td = floats()
    with pytest.raises(RuntimeError, match=r"\[2, 4, 3\]"):
        td.add_(torch.ones(2, 4, 3))
    assert (td == floats()).all()


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td.add_(0.5),
        lambda td: td.div_(2),
        lambda td: td.sqrt_(),
        lambda td: td.lerp_(make(), 0.5),
        lambda td: td.mul_(torch.full((4, 3), 0.5)),
    ],
)
def test_failed_inplace_writes_nothing(op) -> None:
    td = make()
    with pytest.raises(RuntimeError, match="'i'"):
        op(td)
    assert (td == make()).all()


def test_clamp_errors() -> None:
    with pytest.raises(TypeError, match="min and max"):
        floats().clamp()
    with pytest.raises(ValueError, match="both be TensorDicts"):
        floats().clamp(min=floats(), max=1.0)


def test_type_needs_a_dtype() -> None:
    with pytest.raises(ValueError, match=r"torch\.float64"):
        floats().type("torch.float64")


def test_quantized_cast_raises_with_a_fix() -> None:
    with pytest.raises(RuntimeError, match="quantize_per_tensor"):
        floats().qint8()


# ------------------------------------------------------------------ results
def test_non_tensor_leaves_are_carried() -> None:
    td = make()
    for out in (td + 1, td.exp(), td.float64(), td.clamp(0, 1)):
        assert out["s"] == "text"
    td.mul_(2)
    assert td["s"] == "text"


@pytest.mark.parametrize(
    "op",
    [
        lambda t: t + 1,
        lambda t: t * 2,
        lambda t: t**2,
        lambda t: t.maximum(t),
        lambda t: t.clamp_max(0.5),
        lambda t: t + t,
        lambda t: t.abs(),
        lambda t: t.float(),
    ],
    ids=["add", "mul", "pow", "maximum", "clamp_max", "td+td", "abs", "float"],
)
def test_empty_nested_tensordicts_are_kept(op) -> None:
    # upstream drops them in binary arithmetic only (a documented difference)
    td = floats().set("empty", TensorDict({}, [4, 3]))
    out = op(td)
    assert "empty" in out.keys()
    assert out["empty"].batch_size == torch.Size([4, 3])


def test_foreach_and_per_leaf_agree() -> None:
    td = floats()
    fast = td.lerp(td.exp(), 0.3)
    slow = td.apply(lambda t: torch.lerp(t, t.exp(), 0.3))
    assert (fast == slow).all()


def test_extras_beyond_upstream() -> None:
    td = floats()
    assert torch.allclose((2**td)["a"], 2 ** td["a"])
    assert torch.allclose(td.rsqrt()["a"], td["a"].rsqrt())
    b = make().bool()
    b &= False
    assert not b.any()
    assert torch.equal(make().mod_(5)["i"], torch.arange(12).reshape(4, 3) % 5)


def test_heterogeneous_lazy_stack_runs_per_member() -> None:
    members = [TensorDict({"r": torch.ones(3, i + 1)}, [3]) for i in range(3)]
    lazy = LazyStackedTensorDict.lazy_stack(members, 0)
    out = (lazy * 2).exp()
    assert [m["r"].shape[-1] for m in out.unbind(0)] == [1, 2, 3]
    lazy.add_(1)
    assert float(members[2]["r"].sum()) == 18.0
    assert lazy.is_floating_point() and lazy.dtype == torch.float32
    assert lazy.float64().unbind(0)[1]["r"].dtype == torch.float64


# ------------------------------------------------------------------ torch.func
def test_vmap_through_pointwise_ops() -> None:
    td = floats()
    out = torch.func.vmap(lambda t: t * 2)(td)
    assert torch.equal(out["a"], td["a"] * 2)
    out = torch.func.vmap(lambda t: (t.exp() + 1).lerp(t, 0.5).clamp(max=2.0))(td)
    ref = (td.exp() + 1).lerp(td, 0.5).clamp(max=2.0)
    assert torch.allclose(out["n", "x"], ref["n", "x"])
    w = torch.arange(4.0)
    out = torch.func.vmap(lambda t, x: t * x)(td, w)
    assert torch.allclose(out["a"], td["a"] * w[:, None])


def test_vmap_inplace() -> None:
    td = floats()
    out = torch.func.vmap(lambda t: t.mul_(3).add_(1))(td.clone())
    assert torch.allclose(out["a"], td["a"] * 3 + 1)


def test_grad_and_jacrev() -> None:
    td = floats()

    def loss(t: TensorDict) -> torch.Tensor:
        return (t.sigmoid() * 2 + t.pow(2))["a"].sum()

    grads = torch.func.grad(loss)(td)
    a = td["a"]
    expected = 2 * torch.sigmoid(a) * (1 - torch.sigmoid(a)) + 2 * a
    assert torch.allclose(grads["a"], expected)

    def f(x: torch.Tensor) -> torch.Tensor:
        return TensorDict({"x": x}, [3]).tanh().mul(3)["x"]

    x = torch.linspace(-1, 1, 3)
    jac = torch.func.jacrev(f)(x)
    assert torch.allclose(jac, torch.diag(3 * (1 - torch.tanh(x) ** 2)))


def test_autograd_through_foreach() -> None:
    a = torch.ones(3, requires_grad=True)
    td = TensorDict({"a": a}, [3])
    (td * 3 + 1).exp()["a"].sum().backward()
    assert torch.allclose(a.grad, 3 * torch.exp(torch.full((3,), 4.0)))


def test_comparing_non_tensor_leaves_of_different_batch_sizes_broadcasts():
    td = TensorDict({"a": torch.zeros(4, 3)}, [4, 3])
    td.set_non_tensor(("data", "text"), "some text")
    flat = TensorDict.from_dict(td.to_dict(), auto_batch_size=False)  # batch_size []
    assert (flat == td).all() and (td == flat).all()
    other = flat.clone()
    other.set_non_tensor(("data", "text"), "other text")
    assert (td != other)["data", "text"].all() and (other == td)["data", "text"].shape == (4, 3)


_FLOAT_MIXES = [
    [torch.float32],
    [torch.float64],
    [torch.float16],
    [torch.bfloat16],
    [torch.float32, torch.float64, torch.bfloat16, torch.float16],
    [torch.float32, torch.int64],
]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dtypes", _FLOAT_MIXES, ids=lambda d: "-".join(str(t)[6:] for t in d))
def test_number_operand_matches_torch_bit_for_bit(op, dtypes) -> None:
    # On CPU a Python number may reach `_foreach` as a 0-dim tensor (a faster overload): the
    # results must be those of torch with the number itself, dtype and bits, in and out of place.
    numbers = [0.1, 1 / 3, 7.77, -2.5, 1e30, 2**40 + 1, -7, 0, float("inf")]
    gen = torch.Generator().manual_seed(0)
    base = {
        f"k{i}": (torch.randn(4, 3, generator=gen) * 100).to(dtypes[i % len(dtypes)])
        for i in range(6)
    }
    td = TensorDict({**base, "sub": {"x": base["k0"].clone()}}, [4])
    for number in numbers:
        out = getattr(td, op)(number)
        in_place_ok = all(dtype.is_floating_point for dtype in dtypes)  # else refused, no write
        written = td.clone()
        if in_place_ok:
            getattr(written, f"{op}_")(number)
        for key, leaf in base.items():
            expected = getattr(torch, op)(leaf, number)
            assert out[key].dtype == expected.dtype, (key, number)
            torch.testing.assert_close(out[key], expected, rtol=0, atol=0, equal_nan=True)
            if in_place_ok:
                in_place = getattr(leaf.clone(), f"{op}_")(number)
                torch.testing.assert_close(written[key], in_place, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(
            out["sub", "x"], getattr(torch, op)(base["k0"], number), rtol=0, atol=0, equal_nan=True
        )


def test_number_operand_keeps_autograd() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    td = TensorDict({"a": x, "b": {"c": x * 2}}, [4])
    ((td * 2.5 + 1.0) / 4.0 - 3)["a"].sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4, 3), 2.5 / 4.0))
