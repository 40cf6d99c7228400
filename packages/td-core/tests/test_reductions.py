"""Reductions: error messages, all-or-nothing, and what td does where upstream cannot."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import td_core
from td_core import LazyStackedTensorDict, TensorDict, lazy_stack, tensorclass
from td_core.errors import BatchSizeError, DimError


def make_td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "a": torch.randn(4, 3, 2, generator=g),
            "b": torch.randn(4, 3, generator=g),
            "n": {"x": torch.randn(4, 3, 5, generator=g)},
            "s": "text",
        },
        batch_size=[4, 3],
    )


@tensorclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


def make_tc() -> Pair:
    return Pair(x=torch.arange(12.0).reshape(4, 3), y=torch.ones(4, 3, 2), batch_size=[4, 3])


# ---------------------------------------------------------------- bad dims
BAD_DIMS = {
    "sum": lambda td: td.sum(2),
    "mean_neg": lambda td: td.mean(-3),
    "std_tuple": lambda td: td.std((0, 2)),
    "max": lambda td: td.max(5),
    "amin": lambda td: td.amin(2),
    "logsumexp": lambda td: td.logsumexp(2),
    "quantile": lambda td: td.quantile(0.5, 2),
    "cummax": lambda td: td.cummax(2),
    "softmax": lambda td: td.softmax(-3),
    "all": lambda td: td.all(2),
    "torch_sum": lambda td: torch.sum(td, 2),
}


@pytest.mark.parametrize("name", sorted(BAD_DIMS))
def test_non_batch_dim_names_dim_and_batch_size(name: str) -> None:
    td = make_td()
    before = td.clone()
    with pytest.raises(DimError) as info:
        BAD_DIMS[name](td)
    message = str(info.value)
    assert "[4, 3]" in message and "not a batch dim" in message
    # upstream raises IndexError for most ops, ValueError for logsumexp, RuntimeError for all/any
    assert isinstance(info.value, IndexError)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, RuntimeError)
    assert (td == before).all()
    assert set(td.keys(True, True)) == set(before.keys(True, True))


def test_repeated_dim() -> None:
    with pytest.raises(DimError, match="twice"):
        make_td().sum((0, -2))


def test_dim_of_wrong_type() -> None:
    with pytest.raises(TypeError, match="ints"):
        make_td().sum((0, 1.0))
    with pytest.raises(ValueError, match="'feature'"):
        make_td().sum("features")


def test_feature_with_keepdim() -> None:
    with pytest.raises(TypeError, match="keepdim"):
        make_td().mean("feature", keepdim=True)


def test_scan_needs_one_dim() -> None:
    with pytest.raises(TypeError, match="one batch dim"):
        make_td().cummax((0, 1))
    with pytest.raises(TypeError, match="needs a batch dim"):
        make_td().softmax(None)


def test_reduce_needs_leaves() -> None:
    with pytest.raises(ValueError, match="no tensor leaves"):
        TensorDict({}, [3]).sum(reduce=True)


def test_reduce_along_dim_names_the_shapes() -> None:
    with pytest.raises(BatchSizeError, match=r"\[4, 3, 2\]") as info:
        make_td().sum(0, reduce=True)
    assert isinstance(info.value, RuntimeError)  # what upstream's torch.cat raises


# ---------------------------------------------------------------- semantics
def test_no_dim_reduces_every_dim_of_each_leaf() -> None:
    td = make_td()
    out = td.sum()
    assert out.batch_size == torch.Size([])
    torch.testing.assert_close(out["a"], td["a"].sum())
    assert "s" not in out  # non-tensor leaves are left out
    lse = td.logsumexp()  # but logsumexp reduces the batch dims only
    torch.testing.assert_close(lse["a"], td["a"].logsumexp((0, 1)))


def test_reduce_true_is_one_tensor_over_every_element() -> None:
    td = make_td()
    every = torch.cat([td["a"].flatten(), td["b"].flatten(), td["n", "x"].flatten()])
    torch.testing.assert_close(td.std(reduce=True), every.std())
    torch.testing.assert_close(td.amax(reduce=True), every.max())


def test_max_returns_named_tuple_of_tensordicts() -> None:
    td = make_td()
    values, indices = td.max(1)
    assert type(td.max(1)) is torch.return_types.max
    expected = td["a"].max(1)
    torch.testing.assert_close(values["a"], expected.values)
    torch.testing.assert_close(indices["a"], expected.indices)
    assert values.batch_size == indices.batch_size == torch.Size([4])


def test_amax_and_prod_over_several_dims_reduce_all_of_them() -> None:
    td = make_td()
    torch.testing.assert_close(td.amax((0, 1))["a"], td["a"].amax((0, 1)))
    torch.testing.assert_close(td.prod((0, 1))["b"], td["b"].prod())
    kept = td.quantile(0.5, (0, 1), keepdim=True)
    assert kept.batch_size == torch.Size([1, 1])
    torch.testing.assert_close(kept["b"].flatten(), td["b"].flatten().quantile(0.5).reshape(1))
    assert td.max((0, 1), return_indices=False).batch_size == torch.Size([])
    with pytest.raises(TypeError, match="single index"):
        td.max((0, 1))


def test_max_over_features() -> None:
    values, indices = make_td().max("feature")
    assert values.batch_size == torch.Size([4, 3])
    assert indices["a"].shape == torch.Size([4, 3])


def test_lazy_stack_reduction_matches_dense() -> None:
    td = make_td().exclude("s")
    lazy = LazyStackedTensorDict(*td.unbind(1), stack_dim=1)
    torch.testing.assert_close(lazy.mean(1)["a"], td.mean(1)["a"])
    torch.testing.assert_close(lazy.sum(reduce=True), td.sum(reduce=True))


def test_ragged_lazy_stack_reduces_every_member_with_reduce() -> None:
    members = [TensorDict({"r": torch.ones(3, i + 1)}, [3]) for i in range(3)]
    lazy = LazyStackedTensorDict(*members, stack_dim=0)
    assert lazy.sum(reduce=True).item() == 3 * (1 + 2 + 3)
    assert lazy.all() is True
    with pytest.raises(RuntimeError, match="different shapes"):
        lazy.sum(0)  # over the stack dim: the ragged leaves cannot be combined


@pytest.mark.parametrize("stack_dim", [0, 1, 2])
def test_ragged_lazy_stack_reduces_per_member_off_the_stack_dim(stack_dim: int) -> None:
    g = torch.Generator().manual_seed(0)
    members = [
        TensorDict(
            {"r": torch.randn(4, 3, i + 1, generator=g), "n": {"x": torch.randn(4, 3)}}, [4, 3]
        )
        for i in range(3)
    ]
    lazy = LazyStackedTensorDict(*members, stack_dim=stack_dim)
    dim = 1 if stack_dim == 0 else 0  # a batch dim of the stack other than the stack dim
    inner = dim if dim < stack_dim else dim - 1
    out = lazy.mean(dim)
    assert out.batch_size == torch.Size([3, 3])
    for got, member in zip(out.tensordicts, members):
        torch.testing.assert_close(got["r"], member["r"].mean(inner))
    values, indices = lazy.max(dim, keepdim=True)
    assert (
        values.batch_size
        == indices.batch_size
        == torch.Size(1 if i == dim else s for i, s in enumerate(lazy.batch_size))
    )
    for got, member in zip(indices.tensordicts, members):
        torch.testing.assert_close(got["r"], member["r"].max(inner, keepdim=True).indices)
    scanned = lazy.cummax(dim, return_indices=False)
    for got, member in zip(scanned.tensordicts, members):
        torch.testing.assert_close(got["n", "x"], member["n", "x"].cummax(inner).values)


def test_tensorclass_results_are_tensorclasses() -> None:
    tc = make_tc()
    assert isinstance(tc.sum(0), Pair)
    assert isinstance(tc.max(0).values, Pair)
    assert isinstance(torch.mean(tc, 1), Pair)  # upstream does not dispatch this
    with pytest.raises(ValueError, match="not among its fields"):
        tc.sum(key_transform=lambda k: k + "_sum")


def test_params_reduce_to_plain_tensordicts() -> None:
    params = td_core.TensorDictParams(make_td().exclude("s"))
    out = params.sum(0)
    assert type(out) is TensorDict
    assert not isinstance(out["a"], torch.nn.Parameter)


def test_key_transform_renames_every_level() -> None:
    out = make_td().mean(key_transform=lambda k: f"mean_{k}")
    assert set(out.keys(True, True)) == {"mean_a", "mean_b", ("mean_n", "mean_x")}


# ---------------------------------------------------------------- torch functions
def test_torch_functions_upstream_lacks() -> None:
    td = make_td()
    torch.testing.assert_close(torch.prod(td, 0)["b"], td["b"].prod(0))
    torch.testing.assert_close(torch.amax(td, 1)["a"], td["a"].amax(1))
    assert type(torch.max(td, 0)) is torch.return_types.max
    torch.testing.assert_close(torch.quantile(td, 0.5, 0)["b"], td["b"].quantile(0.5, 0))
    torch.testing.assert_close(torch.softmax(td, 1)["b"], td["b"].softmax(1))
    torch.testing.assert_close(F.softmax(td, 0)["b"], td["b"].softmax(0))
    torch.testing.assert_close(torch.norm(td)["a"], td["a"].norm())
    torch.testing.assert_close(torch.std(td, 0, unbiased=False)["b"], td["b"].std(0, correction=0))
    assert torch.all(td.exclude("s") > -100) is True
    maximum = torch.max(td.exclude("s"), td.exclude("s") * 0)  # two operands: element-wise
    assert (maximum == td.exclude("s").maximum(td.exclude("s") * 0)).all()
    with pytest.raises(TypeError, match="2-norm"):
        torch.norm(td, p=1)


def test_losses_keep_upstream_semantics_and_honour_beta() -> None:
    td = make_td().exclude("s")
    target = td.apply(lambda t: t + 0.3)
    loss = F.smooth_l1_loss(td, target, beta=0.1)
    torch.testing.assert_close(loss["a"], F.smooth_l1_loss(td["a"], target["a"], beta=0.1))
    per_element = F.mse_loss(td, target, reduction="none")
    assert per_element.batch_size == td.batch_size
    with pytest.warns(UserWarning):  # torch's own broadcasting warning
        against_tensor = F.l1_loss(td, torch.zeros(()))
    torch.testing.assert_close(against_tensor["b"], td["b"].abs().mean())
    with pytest.raises(KeyError, match="'x'"):
        F.mse_loss(td, td.exclude(("n", "x")))


@pytest.mark.parametrize("op", ["sum", "mean", "std", "amax", "quantile", "max"])
@pytest.mark.parametrize("lazy", [False, True])
def test_feature_reduces_each_leaf_after_its_own_batch_dims(op, lazy) -> None:
    td = TensorDict(
        a=torch.randn(3, 4, 6),
        b=TensorDict(c=torch.randn(3, 4, 5, 6, 7), d=torch.randn(3, 4, 5, 2), batch_size=(3, 4, 5)),
        label="kept",
        batch_size=(3, 4),
    )
    if lazy:
        td = lazy_stack(list(td.unbind(0)))
    args = (0.5,) if op == "quantile" else ()
    if op != "std":  # a leaf without feature dims: each element alone
        td["b", "e"] = torch.randn(3, 4, 5)
    out = getattr(td, op)(*args, dim="feature")
    if op == "max":
        out = out.values
    assert out.batch_size == (3, 4) and out["b"].batch_size == (3, 4, 5)
    assert out["a"].shape == (3, 4) and out["b", "c"].shape == (3, 4, 5)
    assert out["b", "d"].shape == (3, 4, 5)
    assert out["label"] == td["label"]
    fn = {"amax": torch.amax, "max": torch.amax}.get(op, getattr(torch, op))
    expected = fn(td["b", "c"].flatten(3), *args, dim=-1)
    torch.testing.assert_close(out["b", "c"], expected)


@pytest.mark.parametrize(
    "dtypes",
    [
        [torch.float32],
        [torch.float64],
        [torch.float16],
        [torch.float32, torch.float64, torch.bfloat16],
    ],
    ids=["float32", "float64", "float16", "mixed"],
)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"dim": 0}, {"dim": 1}, {"dim": (0, 1)}, {"keepdim": True}, {"dim": -1, "keepdim": True}],
)
def test_mean_has_the_bits_of_tensor_mean(dtypes, kwargs) -> None:
    # float32/float64 leaves are summed, then divided together: the bits must stay torch's
    gen = torch.Generator().manual_seed(0)
    leaves = {
        f"k{i}": (torch.randn(4, 3, *[5] * (i % 3), generator=gen) * 10 + 3).to(
            dtypes[i % len(dtypes)]
        )
        for i in range(6)
    }
    td = TensorDict({**leaves, "sub": {"x": torch.randn(4, 3, 2, generator=gen)}}, [4, 3])
    out = td.mean(**kwargs)
    keepdim = kwargs.get("keepdim", False)
    for key in td.keys(True, True):
        leaf = td[key]
        if "dim" in kwargs:
            dim = kwargs["dim"]
            dim = tuple(d % 2 for d in dim) if isinstance(dim, tuple) else dim % 2
        else:
            dim = tuple(range(leaf.ndim))
        expected = leaf.mean(dim, keepdim=keepdim)
        assert out[key].dtype == expected.dtype
        torch.testing.assert_close(out[key], expected, rtol=0, atol=0)
    stacked = LazyStackedTensorDict(*td.unbind(1), stack_dim=1)
    assert (stacked.mean(**kwargs) == out).all()


def test_mean_keeps_autograd_and_torch_func() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    TensorDict({"a": x, "b": torch.ones(4)}, [4]).mean(0)["a"].sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4, 3), 0.25))
    batched = torch.randn(5, 4, 3)
    means = torch.vmap(lambda t: TensorDict({"a": t}, [4]).mean(0)["a"])(batched)
    torch.testing.assert_close(means, batched.mean(1), rtol=0, atol=0)


def _mixed_leaves(bad: str | None, value: float | bool) -> TensorDict:
    """Leaves of several shapes, dtypes and layouts (the ones after the first are reduced
    as one flattened tensor), all equal to `value` but for leaf `bad` (one element flipped)."""
    leaves = {
        "first": torch.full((4, 3), value),
        "bools": torch.full((4, 2, 2), bool(value)),
        "ints": torch.full((4,), int(value), dtype=torch.int64),
        "halves": torch.full((4, 5), value, dtype=torch.float16),
        "transposed": torch.full((3, 4), value).t(),  # not contiguous
        "nested": {"x": torch.full((4, 1, 1), value), "y": torch.full((4, 6), value)},
    }
    td = TensorDict(leaves, [4])
    if bad is not None:
        leaf = td.get(tuple(bad.split(".")))
        leaf[(-1,) * leaf.dim()] = not value if leaf.dtype == torch.bool else 1 - value
    return td


@pytest.mark.parametrize("bad", [None, "ints", "halves", "transposed", "nested.y"])
def test_all_and_any_read_every_leaf_of_mixed_shapes_and_dtypes(bad: str | None) -> None:
    assert _mixed_leaves(bad, 1.0).all() is (bad is None)
    assert _mixed_leaves(bad, 0.0).any() is (bad is not None)
    assert _mixed_leaves(bad, 1.0).any() is True
    assert _mixed_leaves(bad, 0.0).all() is False
