import pytest
import torch
from torch import nn

from td_core import (
    LazyStackedTensorDict,
    TensorDict,
    TensorDictParams,
    from_module,
    from_modules,
    make_tensordict,
)


def mlp():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.BatchNorm1d(2))


def test_readme_seed_functional_example():
    layer1 = nn.Linear(3, 4)
    layer2 = nn.Linear(4, 4)
    model = nn.Sequential(layer1, layer2)
    params = TensorDict.from_module(model)
    weights1 = TensorDict(layer1.state_dict(), []).unflatten_keys(".")
    weights2 = TensorDict(layer2.state_dict(), []).unflatten_keys(".")
    assert (params == TensorDict({"0": weights1, "1": weights2}, [])).all()
    x = torch.randn(10, 3)
    with params.to_module(model):
        out = model(x)
    assert out.shape == (10, 4)
    params_stack = torch.stack([params, params], 0)

    def func(x, params):
        with params.to_module(model):
            return model(x)

    y = torch.vmap(func, (None, 0))(x, params_stack)
    assert y.shape == torch.Size([2, 10, 4])
    # vmap runs a batched matmul: equal to the direct call up to float32 rounding
    torch.testing.assert_close(y[0], model(x))
    torch.testing.assert_close(y[1], model(x))


def test_from_module_holds_the_module_tensors():
    model = mlp()
    params = TensorDict.from_module(model)
    assert params["0", "weight"] is model[0].weight
    assert params["3", "running_mean"] is model[3].running_mean
    assert "1" not in params.keys()  # ReLU has no parameters
    assert set(params.keys(True, True)) == {
        ("0", "weight"),
        ("0", "bias"),
        ("2", "weight"),
        ("2", "bias"),
        ("3", "weight"),
        ("3", "bias"),
        ("3", "running_mean"),
        ("3", "running_var"),
        ("3", "num_batches_tracked"),
    }
    assert TensorDict.from_module(model, lock=True).is_locked
    via_state_dict = TensorDict.from_module(model, use_state_dict=True)
    assert (via_state_dict == params).all()


def test_to_module_swaps_and_restores():
    model = nn.Linear(3, 2)
    original = model.weight
    zeros = TensorDict.from_module(model).apply(torch.zeros_like)
    with zeros.to_module(model) as swap:
        assert torch.equal(model(torch.ones(1, 3)), torch.zeros(1, 2))
        assert swap["weight"] is original
    assert model.weight is original
    assert isinstance(model.weight, nn.Parameter)


def test_to_module_inplace_copies_into_parameters():
    model = nn.Linear(3, 2)
    original = model.weight
    before = original.detach().clone()
    ones = TensorDict.from_module(model).apply(torch.ones_like)
    with ones.to_module(model, inplace=True):
        assert model.weight is original and torch.equal(original, torch.ones(2, 3))
    assert torch.equal(original, before)
    ones.to_module(model, inplace=True, return_swap=False)
    assert torch.equal(model.weight, torch.ones(2, 3))


def test_to_module_names_missing_parameter():
    params = TensorDict({"nope": torch.zeros(2)})
    with pytest.raises(KeyError, match="'nope'"):
        params.to_module(nn.Linear(3, 2))
    with pytest.raises(KeyError, match="'sub'"):
        TensorDict({"sub": {"weight": torch.zeros(2)}}).to_module(nn.Linear(3, 2))


def test_from_modules_seed_dense():
    torch.manual_seed(0)
    empty_module = nn.Linear(3, 4, device="meta")
    modules = [nn.Linear(3, 4) for _ in range(2)]
    params = from_modules(*modules)
    assert params.batch_size == torch.Size([2]) and params.is_locked
    assert isinstance(params["weight"], nn.Parameter)
    assert "Parameter(shape=torch.Size([2, 4, 3])" in repr(params)

    def exec_module(params, x):
        with params.to_module(empty_module):
            return empty_module(x)

    x = torch.randn(3)
    y = torch.vmap(exec_module, (0, None))(params, x)
    assert y.shape == (2, 4)
    torch.testing.assert_close(y[1], modules[1](x))
    y.sum().backward()
    assert params["weight"].grad.norm() > 0
    assert modules[0].weight.grad is None


def test_from_modules_seed_lazy():
    empty_module = nn.Linear(3, 4, device="meta")
    modules = [nn.Linear(3, 4) for _ in range(2)]
    params = TensorDict.from_modules(*modules, lazy_stack=True)
    assert isinstance(params, LazyStackedTensorDict)
    text = repr(params)
    assert (
        "bias: Tensor(shape=torch.Size([2, 4])" in text
        and "exclusive_fields={" in text
        and "stack_dim=0" in text
    )

    def exec_module(params, x):
        with params.to_module(empty_module):
            return empty_module(x)

    y = torch.vmap(exec_module, (0, None))(params, torch.randn(3))
    assert y.shape == (2, 4)
    y.sum().backward()
    assert modules[0].weight.grad is not None


def test_from_modules_expand_identical_and_errors():
    shared = nn.Parameter(torch.randn(4))
    a, b = nn.Linear(3, 4), nn.Linear(3, 4)
    a.bias = b.bias = shared
    params = from_modules(a, b, expand_identical=True)
    assert params["bias"].stride(0) == 0 and torch.equal(params["bias"][1], shared)
    with pytest.raises(ValueError, match="'weight'"):
        from_modules(nn.Linear(3, 4), nn.Linear(3, 5))
    with pytest.raises(ValueError, match="cannot be combined"):
        from_modules(a, b, lazy_stack=True, as_module=True)


def test_tensordict_params_is_a_module():
    params = from_modules(nn.Linear(3, 4), nn.Linear(3, 4), as_module=True)
    assert isinstance(params, TensorDictParams) and isinstance(params, nn.Module)

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.params = TensorDictParams(
                TensorDict({"w": torch.zeros(3), "n": {"b": torch.ones(2)}})
            )

    holder = Holder()
    assert sorted(n for n, _ in holder.named_parameters()) == ["params.n.b", "params.w"]
    assert set(holder.state_dict()) == {"params.w", "params.n.b"}
    holder.double()
    assert holder.params["w"].dtype == torch.float64 and isinstance(
        holder.params["w"], nn.Parameter
    )
    opt = torch.optim.SGD(holder.parameters(), lr=1.0)
    holder.params["w"].sum().backward()
    opt.step()
    assert torch.equal(holder.params["w"].detach(), -torch.ones(3, dtype=torch.float64))


def test_tensordict_params_buffers_and_no_convert():
    params = TensorDictParams(
        TensorDict({"f": torch.zeros(2), "i": torch.zeros(2, dtype=torch.long)})
    )
    assert [n for n, _ in params.named_parameters()] == ["f"]
    assert [n for n, _ in params.named_buffers()] == ["i"]
    kept = TensorDictParams(TensorDict({"f": torch.zeros(2)}), no_convert=True)
    assert [n for n, _ in kept.named_parameters()] == []
    params["new"] = torch.ones(2)
    assert "new" in dict(params.named_parameters())
    del params["new"]
    assert "new" not in params.keys() and "new" not in dict(params.named_parameters())


def test_make_tensordict():
    td = make_tensordict({"a": torch.zeros(3, 4)}, b=torch.zeros(3, 4, 2))
    assert td.batch_size == torch.Size([3, 4])
    assert make_tensordict(a=torch.zeros(3, 4), batch_size=[3]).batch_size == torch.Size([3])


def test_to_module_restores_a_slot_that_held_none():
    lin = nn.Linear(3, 4, bias=False)
    td = TensorDict(weight=torch.zeros(4, 3), bias=torch.ones(4))
    with td.to_module(lin):
        assert torch.equal(lin.bias, torch.ones(4))
    assert lin.bias is None


def test_vmap_over_tensordict_params():
    params = from_modules(nn.Linear(2, 2), nn.Linear(2, 2), as_module=True)
    sums = torch.vmap(lambda p: p["weight"].sum(), (0,))(params)
    torch.testing.assert_close(sums, params["weight"].sum((1, 2)))


@pytest.mark.parametrize("as_module", [False, True])
def test_from_modules_expand_identical_sends_gradients_to_the_shared_parameter(as_module):
    shared = nn.Linear(3, 3)
    modules = [nn.Sequential(shared, nn.Linear(3, 4)) for _ in range(3)]
    params = from_modules(*modules, expand_identical=True, as_module=as_module)
    assert not isinstance(params["0", "weight"], nn.Parameter)
    assert params["0", "weight"].data_ptr() == shared.weight.data_ptr()
    assert isinstance(params["1", "weight"], nn.Parameter)
    empty = nn.Sequential(nn.Linear(3, 3, device="meta"), nn.Linear(3, 4, device="meta"))

    def run(p, x):
        with p.to_module(empty):
            return empty(x)

    torch.vmap(run, (0, None))(params, torch.ones(3)).sum().backward()
    assert shared.weight.grad is not None and shared.bias.grad is not None
    assert modules[0][1].weight.grad is None  # the stacked copies got those
    assert params["1", "weight"].grad is not None


def test_from_modules_lazy_stack_with_as_module_is_refused_as_upstream():
    with pytest.raises(RuntimeError, match="within a TensorDictParams"):
        from_modules(nn.Linear(3, 4), nn.Linear(3, 4), lazy_stack=True, as_module=True)


@pytest.mark.parametrize("as_module", [False, True])
def test_from_module_filter_empty(as_module):
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Dropout(), nn.Linear(4, 2)))
    kept = TensorDict.from_module(net, as_module=as_module, filter_empty=False)
    assert kept["1"].is_empty() and kept["2", "0"].is_empty()
    assert kept["2", "1", "weight"] is net[2][1].weight
    dropped = TensorDict.from_module(net, as_module=as_module)
    assert set(dropped.keys()) == {"0", "2"} and set(dropped["2"].keys()) == {"1"}
    assert set(from_module(net, filter_empty=False).keys(True, True)) == set(
        dropped.keys(True, True)
    )


def test_make_tensordict_auto_batch_size_is_an_option_not_an_entry():
    td = make_tensordict(a=torch.zeros(3, 4), b=torch.zeros(3, 4, 5), auto_batch_size=True)
    assert set(td.keys()) == {"a", "b"} and td.batch_size == (3, 4)
    nested = make_tensordict(c=td, d=torch.zeros(3, 5), auto_batch_size=True)
    assert nested.batch_size == (3,) and nested["c"].batch_size == (3, 4)
    assert make_tensordict(c=td, d=torch.zeros(4, 5), auto_batch_size=True).batch_size == ()
    assert make_tensordict(a=torch.zeros(3), auto_batch_size=False).batch_size == ()
    assert make_tensordict({("x", "y"): torch.zeros(2, 3)}, auto_batch_size=True)["x"].shape == (
        2,
        3,
    )


def test_from_module_keeps_a_tensordictparams_child_itself():
    params = TensorDict.from_module(mlp(), as_module=True)
    holder = nn.Module()
    holder.params = params
    assert TensorDict.from_module(holder)["params"] is params
    assert TensorDict.from_module(holder, as_module=True)["params"] is params
    assert TensorDict.from_module(params) is params
    zeros = TensorDict.from_module(holder).apply(lambda x: x.data * 0)
    with zeros.to_module(holder):  # the swap reaches what from_module returned
        assert (TensorDict.from_module(holder)["params"] == 0).all()


@pytest.mark.parametrize("as_module", [False, True])
def test_from_modules_lazy_stack_refuses_lazy_modules(as_module):
    with pytest.raises(RuntimeError, match=r"not compatible with lazy modules\..*Module 0"):
        from_modules(nn.LazyLinear(4), nn.LazyLinear(4), lazy_stack=True, as_module=as_module)


@pytest.mark.parametrize("as_module", [False, True])
def test_from_modules_refuses_lazy_modules_by_name(as_module):
    # td: upstream stacks uninitialized parameters for its patched vmap; td says it cannot
    # (a RuntimeError naming the module), instead of torch's error on their shape
    with pytest.raises(RuntimeError, match=r"module 1 has uninitialized parameters"):
        from_modules(nn.Linear(3, 4), nn.LazyLinear(4), as_module=as_module)
    modules = [nn.LazyLinear(4) for _ in range(2)]
    for module in modules:
        module(torch.zeros(3))
    assert from_modules(*modules, as_module=as_module)["weight"].shape == (2, 4, 3)


def test_tensordictparams_buffers_are_nn_buffers():
    module = nn.Module()
    module.register_buffer("buf", torch.randn(3))
    module.register_buffer("count", torch.zeros((), dtype=torch.long))
    converted = TensorDictParams(TensorDict.from_module(module))
    assert isinstance(converted["buf"], nn.Parameter)
    assert isinstance(converted["count"], nn.Buffer)
    kept = TensorDictParams(TensorDict.from_module(module), no_convert=True)
    assert isinstance(kept["buf"], nn.Buffer) and isinstance(kept["count"], nn.Buffer)
    assert kept["buf"].data_ptr() == module.buf.data_ptr()  # an alias, not a copy
    assert not hasattr(module.buf, "_is_buffer")  # the module's own tensor is not marked


def test_tensordictparams_takes_its_entries_as_keywords():
    params = TensorDictParams(a=0, b=1.0)
    assert isinstance(params["a"], nn.Buffer) and isinstance(params["b"], nn.Parameter)
    with pytest.raises(TypeError, match="not both"):
        TensorDictParams({"a": 0}, b=1.0)


def test_tensordictparams_get_post_hook_rewrites_every_leaf_read():
    td = TensorDict({"a": {"b": torch.zeros((), requires_grad=True)}, "e": torch.zeros(())})
    params = TensorDictParams(td)
    params.register_get_post_hook(lambda self, x: x.data)
    assert params["e"].requires_grad is False
    assert params.get(("a", "b")).requires_grad is False
    assert params["a", "b"].requires_grad is False
    assert not any(v.requires_grad for v in params.values(True, True))
    assert not any(v.requires_grad for _, v in params.items(True, True))
    assert all(p.requires_grad for p in params.parameters())  # the storage is unchanged
    assert params.get("missing", "default") == "default"
    with pytest.raises(ValueError, match="callable"):
        params.register_get_post_hook(3)


def test_ops_on_what_to_module_swapped_out_give_plain_tensordicts():
    module = nn.Linear(2, 2)
    with TensorDict.from_module(module).apply(torch.zeros_like).to_module(module) as old:
        assert type(old.clone()) is TensorDict and type(old + 1) is TensorDict


def test_from_module_use_state_dict_reads_what_the_hooks_saved():
    net = nn.Linear(2, 2)

    def add(module, *args, **kwargs):
        for p in module.parameters(recurse=False):
            p.data += 1

    def restore(module, *args, **kwargs):
        for p in module.parameters(recurse=False):
            p.data = p.data - 1

    net.register_state_dict_pre_hook(add)
    net._register_state_dict_hook(restore)
    before = net.weight.detach().clone()
    saved = TensorDict.from_module(net, use_state_dict=True)
    assert torch.allclose(saved["weight"], before + 1)  # what state_dict() gives
    assert torch.allclose(net.weight, before)
    assert not isinstance(saved["weight"], nn.Parameter)
