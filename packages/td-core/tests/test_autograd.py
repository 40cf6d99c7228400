"""Autograd paths: gradients of a loss through parameters, zero_grad, backward, data views."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_core import LazyStackedTensorDict, TensorDict, TensorDictParams, lazy_stack, tensorclass
from td_core.errors import BatchSizeError


def make_params() -> TensorDictParams:
    g = torch.Generator().manual_seed(0)
    return TensorDictParams(
        TensorDict(
            {
                "w": torch.randn(3, generator=g),
                "n": {"b": torch.randn(3, generator=g)},
                "k": torch.arange(3),
            },
            [3],
        )
    )


def test_grad_of_a_loss_through_params_and_zero_grad() -> None:
    params = make_params()
    assert params.grad is None
    loss = (params["w"] * 2).sum() + params["n", "b"].pow(2).sum()
    loss.backward()
    grad = params.grad
    assert set(grad.keys(True, True)) == {("n", "b"), "w"}  # the int buffer has no grad
    assert torch.equal(grad["w"], torch.full((3,), 2.0))
    assert torch.allclose(grad["n", "b"], 2 * params["n", "b"].detach())
    assert params.zero_grad(set_to_none=False) is params
    assert params.grad["w"].eq(0).all()
    params.zero_grad()
    assert params.grad is None and params["w"].grad is None


def test_grad_leaves_out_leaves_without_one() -> None:
    td = TensorDict(
        {"a": torch.ones(3, requires_grad=True), "b": torch.ones(3, requires_grad=True)}, [3]
    )
    (td["a"] * 3).sum().backward()
    assert list(td.grad.keys()) == ["a"]


def test_optimizer_sees_params_and_soft_update_through_data() -> None:
    source, target = make_params(), make_params()
    with torch.no_grad():
        target["w"].add_(1.0)
    snapshot = source.data.clone()
    assert not snapshot["w"].requires_grad and snapshot["w"].data_ptr() != source["w"].data_ptr()
    target.data.update_(source.data)
    assert torch.equal(target["w"], source["w"]) and target["w"].requires_grad
    handles = {id(p) for p in source.parameters()}
    assert id(source["w"]) in handles  # what an optimizer would hold
    source["w"].sum().backward()
    with torch.no_grad():  # an SGD step, without importing torch.optim (slow to import)
        for p in source.parameters():
            if p.grad is not None:
                p.sub_(p.grad)
    assert torch.allclose(source["w"], snapshot["w"] - 1)


def test_data_copy_() -> None:
    source, target = make_params(), make_params()
    target.data.copy_(source.data)
    assert torch.equal(target["w"], source["w"])


def test_data_setter_rebinds_and_validates_first() -> None:
    td = TensorDict({"a": torch.zeros(2), "b": torch.zeros(2)}, [2])
    with pytest.raises(KeyError, match="'b'"):
        td.data = TensorDict({"a": torch.ones(2)}, [2])
    assert td["a"].eq(0).all()
    td.data = TensorDict({"a": torch.ones(2), "b": torch.ones(2)}, [2])
    assert td["a"].eq(1).all() and td["b"].eq(1).all()


def test_backward_of_losses() -> None:
    w = torch.ones(3, requires_grad=True)
    TensorDict({"l1": w.sum(), "n": {"l2": (w**2).sum()}}, []).backward()
    assert w.grad.tolist() == [3.0, 3.0, 3.0]
    w.grad = None
    out = TensorDict({"y": w * 2}, [3])
    out.backward(TensorDict({"y": torch.ones(3)}, [3]))
    assert w.grad.tolist() == [2.0, 2.0, 2.0]


def test_backward_errors() -> None:
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="no leaf"):
        TensorDict({"a": torch.ones(())}, []).backward()
    with pytest.raises(RuntimeError, match=r"key 'y' has shape \[3\]"):
        TensorDict({"y": w * 2}, [3]).backward()
    with pytest.raises(KeyError, match="'y'"):
        TensorDict({"y": w * 2}, [3]).backward(TensorDict({"z": torch.ones(3)}, [3]))
    with pytest.raises(BatchSizeError, match=r"shape \[2\]"):
        TensorDict({"y": w * 2}, [3]).backward(TensorDict({"y": torch.ones(2)}, []))
    with pytest.raises(TypeError, match="TensorDict"):
        TensorDict({"y": w * 2}, [3]).backward(torch.ones(3))


def test_requires_grad_is_all_or_nothing() -> None:
    td = TensorDict({"a": torch.zeros(2), "i": torch.zeros(2, dtype=torch.long)}, [2])
    with pytest.raises(RuntimeError, match=r"key .i. has dtype torch\.int64"):
        td.requires_grad_()
    assert not td["a"].requires_grad
    td.select("a").requires_grad_()
    assert td.requires_grad


def test_lazy_stack_autograd_reaches_members() -> None:
    members = [TensorDict({"a": torch.zeros(2, i + 1)}, [2]) for i in range(2)]
    stack = lazy_stack(members, 0)
    assert stack.requires_grad_() is stack and members[1]["a"].requires_grad
    sum(m["a"].sum() for m in members).backward()
    assert stack.grad.tensordicts[1]["a"].shape == (2, 2)
    stack.zero_grad()
    assert members[0]["a"].grad is None
    assert stack.param_count() == 2 * 1 + 2 * 2 and stack.bytes() == 4 * 6
    assert not stack.detach().tensordicts[0]["a"].requires_grad


def test_detach_inplace_refuses_views_before_changing_anything() -> None:
    base = torch.ones(2, 3)
    td = TensorDict({"a": torch.ones(2, requires_grad=True), "v": base[0]}, [])
    with pytest.raises(RuntimeError, match="key 'v' is a view"):
        td.detach_()
    assert td["a"].requires_grad
    params = make_params()
    params.detach_()
    assert not params["w"].requires_grad


def test_param_count_and_bytes() -> None:
    x = torch.ones(3)
    td = TensorDict({"a": x, "b": x, "s": "text", "e": torch.ones(1).expand(10)}, [])
    assert td.param_count() == 16 and td.param_count(count_duplicates=False) == 13
    assert td.bytes() == 64 and td.bytes(count_duplicates=False) == 52
    assert make_params().param_count() == 9


def test_params_in_a_module() -> None:
    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.params = make_params()

    holder = Holder()
    holder.params["w"].sum().backward()
    assert holder.params.grad["w"].eq(1).all()
    holder.zero_grad()
    assert holder.params.grad is None


def test_grad_and_data_setters_reach_lazy_members() -> None:
    members = [TensorDict({"a": torch.zeros(2, requires_grad=True)}, [2]) for _ in range(3)]
    stack = lazy_stack(members, 1)
    stack.grad = TensorDict({"a": torch.ones(2, 3)}, [2, 3])
    assert all(m["a"].grad.eq(1).all() for m in members)
    stack.data = TensorDict({"a": torch.full((2, 3), 4.0)}, [2, 3])
    assert all(m["a"].eq(4).all() for m in members)
    with pytest.raises(BatchSizeError, match=r"batch_size \[3\]"):
        stack.data = TensorDict({"a": torch.ones(3)}, [3])


def _grad_pair(lazy: bool) -> tuple[TensorDict, TensorDict, torch.Tensor]:
    w = torch.arange(1.0, 4.0, requires_grad=True)
    zeros = {"a": torch.zeros(3), "n": {"b": torch.zeros(3, 2)}}
    dest = TensorDict(zeros, [3]).clone()
    src = TensorDict({"a": w * 2, "n": {"b": (w * 3).unsqueeze(-1).expand(3, 2)}}, [3])
    if lazy:
        dest = lazy_stack([dest[i].clone() for i in range(3)], 0)
    return dest, src, w


@pytest.mark.parametrize("method", ["copy_", "update_"])
@pytest.mark.parametrize("lazy", [False, True], ids=["dense", "lazy"])
def test_copy_from_a_source_that_requires_grad_records_the_graph(lazy: bool, method: str) -> None:
    dest, src, w = _grad_pair(lazy)
    getattr(dest, method)(src)
    (dest["a"].sum() + dest["n", "b"].sum()).backward()
    assert torch.equal(w.grad, torch.full((3,), 8.0))  # 2 + 3 * 2 per element


def test_copy_into_leaves_with_history_replaces_it() -> None:
    w = torch.ones(3, requires_grad=True)
    dest = TensorDict({"a": w * 5, "b": torch.zeros(3)}, [3])
    dest.copy_(TensorDict({"a": torch.full((3,), 2.0), "b": torch.ones(3)}, [3]))
    assert torch.equal(dest["a"], torch.full((3,), 2.0))
    dest["a"].sum().backward()  # the overwritten history gets zeros, as with Tensor.copy_
    assert torch.equal(w.grad, torch.zeros(3))


@pytest.mark.parametrize("method", ["copy_", "update_"])
def test_copy_into_a_leaf_that_requires_grad_refuses_before_writing(method: str) -> None:
    dest = TensorDict({"a": torch.zeros(3), "z": torch.zeros(3, requires_grad=True)}, [3])
    src = TensorDict(
        {"a": torch.ones(3), "z": torch.ones(3) * torch.ones(3, requires_grad=True)}, [3]
    )
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        getattr(dest, method)(src)
    assert torch.equal(dest["a"], torch.zeros(3))


def test_copy_under_no_grad_records_nothing() -> None:
    dest, src, _ = _grad_pair(False)
    with torch.no_grad():
        dest.copy_(src)
    assert not dest["a"].requires_grad and torch.equal(dest["a"], src["a"].detach())


@pytest.mark.parametrize("index", [slice(0, 2), 1], ids=["slice", "int"])
def test_copy_at_into_a_view_of_a_leaf_that_requires_grad_refuses_before_writing(
    index: object,
) -> None:
    dest = TensorDict({"a": torch.zeros(3), "z": torch.zeros(3, requires_grad=True)}, [3])
    src = TensorDict({"a": torch.ones(3), "z": torch.ones(3, requires_grad=True) * 2}, [3])[index]
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        dest.copy_at_(src, index)
    assert torch.equal(dest["a"], torch.zeros(3))


def test_bytes_counts_gradients_and_jagged_components_once_each():
    plain = torch.zeros(3)
    with_grad = torch.ones(3, requires_grad=True)
    (with_grad + 1).sum().backward()
    offsets, lengths = torch.tensor([0, 1, 3]), torch.tensor([1, 2])
    njt = torch.nested.nested_tensor_from_jagged(torch.ones(3), offsets, lengths=lengths)
    # the same memory as `plain` and as njt's offsets and lengths
    shared = torch.nested.nested_tensor_from_jagged(plain, offsets, lengths=lengths)
    td = TensorDict(plain=plain, with_grad=with_grad, njt=njt, shared=shared)
    njt_bytes = 3 * 4 + 3 * 8 + 2 * 8  # values, offsets, lengths
    assert td.bytes() == 12 + 2 * 12 + 2 * njt_bytes
    assert td.bytes(count_duplicates=False) == 12 + 2 * 12 + njt_bytes


# ------------------------------------------------------------ torch.autograd.grad
def test_autograd_grad_over_tensordicts():
    td = TensorDict({"a": torch.randn(3, 2), "n": {"b": torch.randn(3)}, "s": "text"}, [3])
    inputs = td.float().requires_grad_()
    outputs = inputs * 2
    grads = torch.autograd.grad(outputs, inputs, torch.ones_like(outputs))
    assert (grads == 2).all()
    assert grads["s"] == "text"
    loss = (inputs["a"] ** 2).sum() + inputs["n", "b"].sum()
    (grads,) = (torch.autograd.grad(loss, (inputs,)),)
    assert torch.equal(grads["a"], 2 * inputs["a"]) and (grads["n", "b"] == 1).all()


def test_autograd_grad_keeps_the_kind_of_the_inputs():
    @tensorclass
    class Pair:
        x: torch.Tensor
        tag: str

    pair = Pair(x=torch.randn(3, requires_grad=True), tag="t", batch_size=[3])
    out = pair + 1
    grads = torch.autograd.grad(out, pair, torch.ones_like(out))
    assert type(grads) is Pair and (grads.x == 1).all()
    stack = lazy_stack([TensorDict(a=torch.randn(2), batch_size=[2]) for _ in range(3)])
    stack.requires_grad_()
    out = stack * 3
    grads = torch.autograd.grad(out, stack, torch.ones_like(out))
    assert isinstance(grads, LazyStackedTensorDict) and (grads == 3).all()


def test_autograd_grad_refuses_several_inputs():
    td = TensorDict(a=torch.randn(2, requires_grad=True), batch_size=[2])
    with pytest.raises(ValueError, match="single input"):
        torch.autograd.grad(td * 2, (td, td), torch.ones_like(td))
    with pytest.raises(ValueError, match="grad_outputs must have the leaves"):
        torch.autograd.grad(td * 2, td, TensorDict(a=torch.ones(3), batch_size=[3]))


def test_backward_errors_name_the_key_with_upstreams_words():
    w = torch.ones(3, requires_grad=True)
    td = TensorDict({"a": w * 2, "b": torch.zeros(3)}, [3])
    with pytest.raises(
        RuntimeError, match=r"'a' has shape \[3\].*implicitly created only for scalar"
    ):
        td.backward()
    with pytest.raises(KeyError, match=r"Missing gradient entry for key 'a'.*\['b'\]"):
        td.backward(TensorDict({"b": torch.ones(3)}, [3]))
    with pytest.raises(
        RuntimeError, match=r"Mismatch in shape: the gradient at key 'a' has shape \[4\]"
    ):
        td.backward(TensorDict({"a": torch.ones(4)}, []))
    with pytest.raises(TypeError, match="gradient must be a TensorDictBase"):
        td.backward(torch.ones(3))
    with pytest.raises(RuntimeError, match="no leaf tensor requiring gradients"):
        td.detach().backward()
    assert w.grad is None


@pytest.mark.parametrize("lazy", [False, True])
def test_torch_autograd_grad_of_tensordicts(lazy):
    td = TensorDict({"a": torch.randn(3, 2), "b": {"c": torch.randn(3)}}, [3])
    if lazy:
        td = lazy_stack([td[0], td[1], td[2]], 0)
    inputs = td.float().requires_grad_()
    outputs = inputs * 3 + 1
    grads = torch.autograd.grad(outputs, inputs, torch.ones_like(outputs))
    assert type(grads) is type(inputs) and grads.batch_size == inputs.batch_size
    assert (grads == 3).all()
    with pytest.raises(ValueError, match="grad_outputs must have the leaves of outputs"):
        torch.autograd.grad(inputs * 2, inputs, torch.ones(3))


def test_data_and_grad_of_a_locked_tensordict_are_locked():
    td = TensorDict(
        {"a": torch.randn(3, requires_grad=True), "b": {"c": torch.randn(3, requires_grad=True)}},
        [3],
    )
    (td["a"].sum() + td["b", "c"].sum()).backward()
    assert not td.grad.is_locked and not td.data.is_locked
    assert td.grad is not td.grad
    td.lock_()
    assert td.grad.is_locked and td.data.is_locked
    assert td.data["a"].data_ptr() == td["a"].data_ptr()
