"""TensorDicts through torch.vmap, torch.func, torch.compile and torch.export (CPU)."""

import pickle

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from td_core import TensorDict, lazy_stack, tensorclass


def sample():
    return TensorDict({"a": torch.randn(4, 3), "n": {"b": torch.randn(4, 3)}, "tag": "x"}, [4])


def test_vmap_in_and_out_dims():
    td = TensorDict({"a": torch.randn(4, 5, 3)}, [4, 5])

    def per_sample(t):
        assert t.batch_size == torch.Size([4])
        return t.apply(lambda x: x * 2)

    out = torch.vmap(per_sample, in_dims=1, out_dims=1)(td)
    assert out.batch_size == torch.Size([4, 5])
    assert torch.equal(out["a"], td["a"] * 2)


def test_vmap_keeps_non_tensor_data():
    td = sample()
    out = torch.vmap(lambda t: t.apply(torch.neg))(td)
    assert out["tag"] == "x" and out.batch_size == td.batch_size


def test_functional_call_with_tensordict_params():
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    params = TensorDict.from_module(module).apply(torch.zeros_like)
    out = torch.func.functional_call(
        module, params.flatten_keys(".").to_dict(), (torch.ones(1, 3),)
    )
    assert torch.equal(out, torch.zeros(1, 2))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_get_set_apply_index(backend):
    def step(td):
        out = td.apply(lambda x: x * 2)
        out["c"] = out["a"].sum(-1) + out["n", "b"].mean(-1)
        out[0] = out[1]
        return out[1:3]

    td = sample()
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    got, want = compiled(td), step(td)
    assert got.batch_size == want.batch_size == torch.Size([2])
    assert (got == want).all()


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td[:2] + 1,
        lambda td: td[0] * td[1],
        lambda td: td[torch.tensor([0, 2])] - 1,
        lambda td: torch.stack([td, td], 1),
        lambda td: torch.cat([td, td]),
        lambda td: td.reshape(-1, 1),
        lambda td: td.view(2, -1),
        lambda td: td.sum(0),
        lambda td: td.add_(1),
    ],
    ids=["slice_add", "int_mul", "tensor_index", "stack", "cat", "reshape", "view", "sum", "add_"],
)
def test_compile_fullgraph_traces_the_eager_fast_paths(op):
    # eager fast paths use C-level getters and generators that Dynamo cannot trace
    td = TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(4, 2)}}, [4])
    want = op(td.clone())
    torch._dynamo.reset()
    got = torch.compile(op, fullgraph=True, backend="eager")(td.clone())
    assert got.batch_size == want.batch_size and (got == want).all()


def test_compile_does_not_recompile_on_new_values():
    counter = CompileCounter()

    @torch.compile(backend=counter, fullgraph=True)
    def f(td):
        return (td["a"] * td["n", "b"]).sum()

    for _ in range(3):
        f(sample())
    assert counter.frame_count == 1


def test_compile_lazy_stack_and_tensorclass():
    @tensorclass
    class Pair:
        x: torch.Tensor
        y: torch.Tensor

    @torch.compile(fullgraph=True, backend="eager")
    def f(p):
        return p.x + p.y

    pair = Pair(torch.ones(3), torch.ones(3), batch_size=[3])
    assert torch.equal(f(pair), torch.full((3,), 2.0))
    lazy = lazy_stack([sample(), sample()])
    assert torch.compile(lambda t: t["a"] + 1, backend="eager")(lazy).shape == torch.Size([2, 4, 3])


@tensorclass
class _Labelled:
    x: torch.Tensor
    label: str = "none"
    scale: torch.Tensor = torch.full((3,), 2.0)  # a tensor default: shared, as a dataclass's

    def __post_init__(self):
        self.x = self.x * self.scale


@pytest.mark.parametrize(
    "build",
    [
        lambda a: _Labelled(x=a, label="hi", batch_size=[3]),
        lambda a: _Labelled(a),
        lambda a: _Labelled(x=a, batch_size=[3], device="cpu"),
    ],
    ids=["non_tensor_field", "defaults", "device"],
)
def test_compile_fullgraph_builds_a_tensorclass(build):
    # the generated __init__ reads the defaults and the user's __setattr__ where Dynamo can
    # follow them (a class attribute, a plain dict), not through a closure or a cache wrapper
    want = build(torch.arange(3.0))
    torch._dynamo.reset()
    got = torch.compile(lambda a: build(a).x + 1, fullgraph=True, backend="eager")(
        torch.arange(3.0)
    )
    assert torch.equal(got, want.x + 1) and torch.equal(want.x, torch.arange(3.0) * 2)


def _replace_steps(s):
    s = s.replace(x=s.x + 1)
    return s.replace(x=s.x * s.scale, scale=s.scale + 1)


def _update_in_place(td, src):
    td.update_(src)
    return td["a"] + 0


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (_replace_steps, lambda: (_Labelled(x=torch.ones(3), batch_size=[3]).replace(),)),
        (
            _update_in_place,
            lambda: (TensorDict(a=torch.zeros(4), b=torch.zeros(4)), TensorDict(a=torch.ones(4))),
        ),
    ],
    ids=["tensorclass_replace", "update_"],
)
def test_compile_runs_once_in_one_frame(fn, args):
    # no graph break (a C call Dynamo cannot trace) and no recompile on the second call
    # (a side table filled on first use, which Dynamo guards on)
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter)
    torch._dynamo.reset()
    compiled(*args())
    compiled(*args())
    assert counter.frame_count == 1


@pytest.mark.parametrize(
    "op",
    [lambda td: td + 1, lambda td: td.reshape(3, 1), lambda td: td.clone().lock_()],
    ids=["add", "reshape", "lock_"],
)
def test_compile_fullgraph_of_a_locked_nested_tensordict_keeps_the_lock_graph(op):
    # the lock graph is recorded on the objects while compiling (no id() or weakref of an
    # object made in the graph): the result is locked, and its sub-TensorDict stays held
    def locked():
        sub = TensorDict(b=torch.ones(3), batch_size=[3])
        return TensorDict(a=torch.zeros(3), n=sub, batch_size=[3]).lock_()

    torch._dynamo.reset()
    out = torch.compile(op, fullgraph=True, backend="eager")(locked())
    assert out.is_locked and out["n"].is_locked
    with pytest.raises(RuntimeError, match="locked graph"):
        out["n"].unlock_()
    out.unlock_()  # the root may unlock, and its sub-TensorDict with it
    assert not out["n"].is_locked
    out["n"].lock_()
    out["n"].unlock_()


def test_export_module_taking_a_tensordict():
    class Model(torch.nn.Module):
        def forward(self, td):
            return td["a"] * 2 + td["n", "b"]

    td = sample().exclude("tag")
    exported = torch.export.export(Model(), (td,))
    torch.testing.assert_close(exported.module()(td), Model()(td))


class _Rows(torch.nn.Module):
    def forward(self, x):
        return TensorDict({"x": x, "y": x * 2}, batch_size=x.shape[0])  # a symbolic int


class _Grid(torch.nn.Module):
    def forward(self, x):
        return TensorDict({"x": x, "y": x * 2}, batch_size=[x.shape[0], x.shape[1]])


@pytest.mark.parametrize(
    ("module", "batch_dims"), [(_Rows(), 1), (_Grid(), 2)], ids=["scalar", "two_dims"]
)
def test_export_returning_a_tensordict_with_a_dynamic_batch_size(module, batch_dims):
    # the output spec cannot hold symbolic sizes: the batch size comes back from the leaves
    # (a non-strict export; under a strict one Dynamo shows the symbols as plain ints)
    exported = torch.export.export(
        module,
        (torch.randn(2, 6, 8),),
        dynamic_shapes=({0: torch.export.Dim("batch", min=1)},),
        strict=False,
    )
    out = exported.module()(torch.randn(5, 6, 8))
    assert out.batch_size == torch.Size([5, 6][:batch_dims])
    assert torch.equal(out["y"], out["x"] * 2)


def test_flip_and_roll_keep_non_tensor_values_aligned():
    td = torch.stack(
        [TensorDict({"v": torch.tensor(float(i)), "s": f"row{i}"}, []) for i in range(4)]
    )
    for op in (lambda t: t.flip(0), lambda t: t.roll(1, 0), lambda t: torch.flip(t, (0,))):
        out = op(td)
        assert out["s"] == [f"row{int(v)}" for v in out["v"].tolist()]


def test_adding_a_key_does_not_recompile_per_key_count():
    counter = CompileCounter()

    @torch.compile(backend=counter, fullgraph=True)
    def add_key(td):
        td["out"] = td["a"] * 2
        return td["out"] + 1  # read-after-write inside the compiled region

    for n in range(1, 7):
        td = TensorDict({f"k{i}": torch.randn(3) for i in range(n)}, [3])
        td["a"] = torch.randn(3)
        result = add_key(td)
        # the new key is visible to every eager access afterwards
        assert torch.equal(td["out"], td["a"] * 2) and torch.equal(result, td["a"] * 2 + 1)
        assert "out" in td.keys() and ("out" in td) and len(list(td.keys())) == n + 2
        assert torch.equal(dict(td.items())["out"], td["a"] * 2)
        assert torch.equal(torch.stack([td, td])["out"][0], td["a"] * 2)
        assert torch.equal(pickle.loads(pickle.dumps(td))["out"], td["a"] * 2)
    assert counter.frame_count == 1


def test_torch_max_min_of_two_tensordicts_are_elementwise():
    td = TensorDict({"a": torch.randn(3, 2), "b": {"c": torch.randn(3)}}, [3])
    other = td.clone().neg()
    assert (torch.max(td, other) == td.maximum(other)).all()
    assert (torch.min(td, other) == td.minimum(other)).all()
    assert torch.max(td, 0).values.batch_size == torch.Size([])  # a dim: still the reduction
