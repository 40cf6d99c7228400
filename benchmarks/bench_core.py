"""td-core's dense TensorDict against upstream tensordict, on identical data.

Run: ``uv run python benchmarks/bench_core.py [--quick] [--filter NAME]``.

Ratios are td / upstream (lower is better). Floors show how close td gets to doing the
same tensor work on a plain dict (``dict``) or with ``torch.utils._pytree.tree_map``.
Both libraries stack densely with ``torch.stack`` (upstream 0.15 does by default).
"""

from __future__ import annotations

import pathlib
import sys

import tensordict
import torch
from torch.utils import _pytree

import td_core
from td_core import TensorDict

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from harness import Suite

Upstream = tensordict.TensorDict

torch.manual_seed(0)
torch.set_num_threads(1)  # overhead, not intra-op parallelism, is what is measured

B = 1000  # batch size of the indexing cases
N_LEAVES = 20


# ---------------------------------------------------------------- data


def flat_source(n: int, batch: int, feature: int = 3) -> dict[str, torch.Tensor]:
    return {f"k{i}": torch.randn(batch, feature) for i in range(n)}


def nested_source(batch: int = 10) -> dict:
    """30 leaves over three levels: 10 at the top, 10 under n1, 10 under (n1, n2)."""
    return {
        **{f"t{i}": torch.randn(batch, 3) for i in range(10)},
        "n1": {
            **{f"l{i}": torch.randn(batch, 3) for i in range(10)},
            "n2": {f"l{i}": torch.randn(batch, 3) for i in range(10)},
        },
    }


def both(source: dict, batch_size) -> tuple[TensorDict, Upstream]:
    """The same tensors in a td TensorDict and an upstream one (shared storage: read-only use)."""
    return TensorDict(source, batch_size=batch_size), Upstream(source, batch_size=batch_size)


def both_copies(source: dict, batch_size) -> tuple[TensorDict, Upstream, dict]:
    """Independent copies of the same values, for cases that write."""
    ours = TensorDict(_pytree.tree_map(torch.clone, source), batch_size=batch_size)
    theirs = Upstream(_pytree.tree_map(torch.clone, source), batch_size=batch_size)
    plain = _pytree.tree_map(torch.clone, source)
    return ours, theirs, plain


suite = Suite("core")

# ---------------------------------------------------------------- construction

flat10 = flat_source(10, 100)
nested30 = nested_source(100)
suite.add(
    "construct flat 10 leaves",
    lambda: TensorDict(flat10, batch_size=[100]),
    lambda: Upstream(flat10, batch_size=[100]),
)
suite.add(
    "construct nested 30 leaves",
    lambda: TensorDict(nested30, batch_size=[100]),
    lambda: Upstream(nested30, batch_size=[100]),
)

# ---------------------------------------------------------------- get / set / keys

ours_n, theirs_n = both(nested30, [100])
leaf = torch.randn(100, 3)
suite.add("get flat key", lambda: ours_n["t3"], lambda: theirs_n["t3"])
suite.add("get nested key", lambda: ours_n["n1", "n2", "l3"], lambda: theirs_n["n1", "n2", "l3"])
ours_w, theirs_w, _ = both_copies(nested30, [100])


def set_flat(td):
    def run():
        td["t3"] = leaf

    return run


def set_nested(td):
    def run():
        td["n1", "n2", "l3"] = leaf

    return run


suite.add("set flat key", set_flat(ours_w), set_flat(theirs_w))
suite.add("set nested key", set_nested(ours_w), set_nested(theirs_w))
suite.add(
    "keys(include_nested=True)",
    lambda: list(ours_n.keys(include_nested=True)),
    lambda: list(theirs_n.keys(include_nested=True)),
)

# ---------------------------------------------------------------- indexing, batch [1000] x 20 leaves

big = flat_source(N_LEAVES, B)
ours_b, theirs_b = both(big, [B])
mask = torch.rand(B) > 0.5
index = torch.randperm(B)[:100]
INDICES = {"int": 5, "slice": slice(10, 510), "bool mask": mask, "index tensor": index}

for name, idx in INDICES.items():
    suite.add(
        f"getitem {name}",
        lambda idx=idx: ours_b[idx],
        lambda idx=idx: theirs_b[idx],
        dict=lambda idx=idx: {k: v[idx] for k, v in big.items()},
    )

for name, idx in INDICES.items():
    ours_s, theirs_s, plain_s = both_copies(big, [B])
    value_plain = {k: v[idx].clone() + 1 for k, v in plain_s.items()}
    sub_batch = torch.empty(B)[idx].shape
    value_ours = TensorDict(value_plain, batch_size=sub_batch)
    value_theirs = Upstream(value_plain, batch_size=sub_batch)

    def set_td(td, value, idx=idx):
        def run():
            td[idx] = value

        return run

    def set_dict(d=plain_s, value=value_plain, idx=idx):
        def run():
            for k, v in d.items():
                v[idx] = value[k]

        return run

    def set_tree(d=plain_s, value=value_plain, idx=idx):
        def write(dest, src):
            dest[idx] = src

        def run():
            _pytree.tree_map_(write, d, value)

        return run

    suite.add(
        f"setitem {name}",
        set_td(ours_s, value_ours),
        set_td(theirs_s, value_theirs),
        dict=set_dict(),
        tree_map=set_tree(),
    )

small_ours = TensorDict({"a": torch.zeros(3, 4), "b": {"b1": torch.zeros(3, 4)}}, [3, 4])
small_theirs = Upstream({"a": torch.zeros(3, 4), "b": {"b1": torch.zeros(3, 4)}}, [3, 4])
suite.add(
    "getitem (2, 1) of a [3, 4] batch",
    lambda: small_ours[2, 1],
    lambda: small_theirs[2, 1],
    what="a tuple of ints over two batch dims, two leaves (upstream's test_getitem[tuple])",
)

# ---------------------------------------------------------------- lazy pre-allocation

row_source = {"a": torch.randn(3), "b": {"c": torch.zeros(2), "d": torch.ones(4, 2)}}
row_ours = TensorDict(row_source, batch_size=[])
row_theirs = Upstream(row_source, batch_size=[])


def preallocate(cls, row):
    def run():
        td = cls({}, batch_size=[100])
        for i in range(100):
            td[i] = row
        return td

    return run


suite.add(
    "lazy pre-allocation 100 rows",
    preallocate(TensorDict, row_ours),
    preallocate(Upstream, row_theirs),
)

# ---------------------------------------------------------------- apply, clone, to (100 leaves)

hundred = flat_source(100, 10)
ours_h, theirs_h = both(hundred, [10])
suite.add(
    "apply(x + 1) 100 leaves",
    lambda: ours_h.apply(lambda x: x + 1),
    lambda: theirs_h.apply(lambda x: x + 1),
    dict=lambda: {k: v + 1 for k, v in hundred.items()},
    tree_map=lambda: _pytree.tree_map(lambda x: x + 1, hundred),
)
suite.add(
    "clone 100 leaves",
    lambda: ours_h.clone(),
    lambda: theirs_h.clone(),
    dict=lambda: {k: v.clone() for k, v in hundred.items()},
)
suite.add(
    "to(float64) 100 leaves",
    lambda: ours_h.to(torch.float64),
    lambda: theirs_h.to(torch.float64),
    dict=lambda: {k: v.to(torch.float64) for k, v in hundred.items()},
)
suite.add(
    "getitem slice 100 leaves",
    lambda: ours_h[2:8],
    lambda: theirs_h[2:8],
    dict=lambda: {k: v[2:8] for k, v in hundred.items()},
)

# ---------------------------------------------------------------- stack / cat of 100 TensorDicts

members_src = [flat_source(10, 4) for _ in range(100)]
members_ours = [TensorDict(s, batch_size=[4]) for s in members_src]
members_theirs = [Upstream(s, batch_size=[4]) for s in members_src]
assert type(torch.stack(members_theirs[:2])) is Upstream  # upstream stacks densely too
suite.add(
    "torch.stack 100 tds x 10 leaves",
    lambda: torch.stack(members_ours),
    lambda: torch.stack(members_theirs),
    dict=lambda: {k: torch.stack([s[k] for s in members_src]) for k in members_src[0]},
)
suite.add(
    "torch.cat 100 tds x 10 leaves",
    lambda: torch.cat(members_ours),
    lambda: torch.cat(members_theirs),
    dict=lambda: {k: torch.cat([s[k] for s in members_src]) for k in members_src[0]},
)

# ---------------------------------------------------------------- shape ops, batch [10, 100] x 20 leaves

grid = {f"k{i}": torch.randn(10, 100, 3) for i in range(N_LEAVES)}
ours_g, theirs_g = both(grid, [10, 100])
suite.add("reshape(-1)", lambda: ours_g.reshape(-1), lambda: theirs_g.reshape(-1))
suite.add("permute(1, 0)", lambda: ours_g.permute(1, 0), lambda: theirs_g.permute(1, 0))
suite.add("unsqueeze(0)", lambda: ours_g.unsqueeze(0), lambda: theirs_g.unsqueeze(0))

# ---------------------------------------------------------------- structure

flat_ours = ours_n.flatten_keys(".")
flat_theirs = theirs_n.flatten_keys(".")
suite.add(
    "flatten_keys nested 30", lambda: ours_n.flatten_keys("."), lambda: theirs_n.flatten_keys(".")
)
suite.add(
    "unflatten_keys 30",
    lambda: flat_ours.unflatten_keys("."),
    lambda: flat_theirs.unflatten_keys("."),
)

update_src = {f"k{i}": torch.randn(B, 3) for i in range(0, N_LEAVES, 2)}
ours_u, theirs_u, _ = both_copies(big, [B])
update_ours = TensorDict(update_src, batch_size=[B])
update_theirs = Upstream(update_src, batch_size=[B])
suite.add(
    "update 10 of 20 leaves",
    lambda: ours_u.update(update_ours),
    lambda: theirs_u.update(update_theirs),
)
suite.add(
    "update from dict 10 of 20 leaves",
    lambda: ours_u.update(update_src),
    lambda: theirs_u.update(update_src),
)

picked = [f"k{i}" for i in range(0, N_LEAVES, 4)]
suite.add("select 5 of 20", lambda: ours_b.select(*picked), lambda: theirs_b.select(*picked))
suite.add("exclude 5 of 20", lambda: ours_b.exclude(*picked), lambda: theirs_b.exclude(*picked))

# ---------------------------------------------------------------- comparison

ours_c1, theirs_c1 = both(nested30, [100])
ours_c2, theirs_c2, _ = both_copies(nested30, [100])
suite.add(
    "(a == b).all() nested 30",
    lambda: (ours_c1 == ours_c2).all(),
    lambda: (theirs_c1 == theirs_c2).all(),
)

# ---------------------------------------------------------------- hot paths (small, frequent calls)

suite.add("'k3' in td (flat, present key)", lambda: "k3" in ours_b, lambda: "k3" in theirs_b)
suite.add("TensorDict({}, []) (empty)", lambda: TensorDict({}, []), lambda: Upstream({}, []))
suite.add(
    "list(td.items()) 20 leaves",
    lambda: list(ours_b.items()),
    lambda: list(theirs_b.items()),
    dict=lambda: list(big.items()),
)
suite.add(
    "construct flat 10 leaves, no batch_size",
    lambda: TensorDict(flat10),
    lambda: Upstream(flat10),
)
ours_un, theirs_un, _ = both_copies(nested30, [100])
other_ours, other_theirs = both(nested30, [100])
suite.add(
    "update(other) nested 30 leaves",
    lambda: ours_un.update(other_ours),
    lambda: theirs_un.update(other_theirs),
)
suite.add("to('cpu') already on cpu", lambda: ours_n.to("cpu"), lambda: theirs_n.to("cpu"))
ours_dev = TensorDict(nested30, batch_size=[100], device="cpu")
theirs_dev = Upstream(nested30, batch_size=[100], device="cpu")
suite.add(
    "to('cpu') of a device='cpu' td", lambda: ours_dev.to("cpu"), lambda: theirs_dev.to("cpu")
)
nested_picked = ["t1", ("n1", "l2"), ("n1", "n2", "l3"), ("n1", "n2", "l4")]
suite.add(
    "select(nested keys) 4 of 30",
    lambda: ours_n.select(*nested_picked),
    lambda: theirs_n.select(*nested_picked),
)
ours_cp, theirs_cp, _ = both_copies(nested30, [100])
suite.add(
    "copy_(other) nested 30 leaves",
    lambda: ours_cp.copy_(other_ours),
    lambda: theirs_cp.copy_(other_theirs),
    what="in place, grad mode on: td reads every pair's shapes before the first write "
    "(a failed copy_ writes nothing), upstream does not; both check requires_grad",
)
ours_cpf, theirs_cpf, _ = both_copies(big, [B])
suite.add(
    "copy_(other) flat 20 leaves",
    lambda: ours_cpf.copy_(ours_b),
    lambda: theirs_cpf.copy_(theirs_b),
    what="as above, 20 flat leaves of [1000, 3]",
)

# ---------------------------------------------------------------- found by side-by-side scans
ours_up, theirs_up, _ = both_copies(nested30, [100])
suite.add(
    "update_(other) nested 30 leaves",
    lambda: ours_up.update_(other_ours),
    lambda: theirs_up.update_(other_theirs),
    what="in place, as copy_ (a key the destination lacks raises instead of being skipped)",
)
suite.add("chunk(2) nested 30 leaves", lambda: ours_n.chunk(2), lambda: theirs_n.chunk(2))
suite.add("state_dict() nested 30 leaves", ours_n.state_dict, theirs_n.state_dict)
suite.add(
    "list(values(True, True)) nested 30",
    lambda: list(ours_n.values(True, True)),
    lambda: list(theirs_n.values(True, True)),
)
ours_false, theirs_false = both({**nested30, "t0": torch.zeros(100, 3)}, [100])
suite.add(
    "all() nested 30, first leaf false",
    ours_false.all,
    theirs_false.all,
    what="both stop at the first leaf that is not all true",
)
suite.add("all() nested 30, all true", ours_n.all, theirs_n.all, what="every leaf is reduced")
suite.add("is_empty() nested 30", ours_n.is_empty, theirs_n.is_empty)
lazy_ours = td_core.lazy_stack([ours_n] * 4, 1)
lazy_theirs = tensordict.lazy_stack([theirs_n] * 4, 1)
suite.add(
    "lazy stack keys(True, True), 4 x 30 leaves",
    lambda: list(lazy_ours.keys(True, True)),
    lambda: list(lazy_theirs.keys(True, True)),
)
suite.add(
    "lazy stack [:, 2] along dim 1",
    lambda: lazy_ours[:, 2],
    lambda: lazy_theirs[:, 2],
    what="one member of a stack along dim 1: both return the member itself",
)
suite.add(
    "get(nested missing key, default)",
    lambda: ours_n.get(("n1", "missing"), None),
    lambda: theirs_n.get(("n1", "missing"), None),
)
nested_leaf = nested30["n1"]["l3"]
suite.add(
    "update({(sub, key): tensor})",
    lambda: ours_w.update({("n1", "l3"): nested_leaf}),
    lambda: theirs_w.update({("n1", "l3"): nested_leaf}),
    what="one nested entry replaced through a tuple key",
)
suite.add("to_namedtuple() nested 30", ours_n.to_namedtuple, theirs_n.to_namedtuple)

# ---------------------------------------------------------------- non-tensor leaves
# upstream's tensorclass benchmark: a shared string at a large batch; the cost of the
# non-tensor leaf must not grow with the batch's element count
NT_BATCH = [300, 400, 50]
nt_leaf = torch.zeros(NT_BATCH)
ours_nt = TensorDict({"a": nt_leaf, "s": "goodbye"}, batch_size=NT_BATCH)
theirs_nt = Upstream({"a": nt_leaf, "s": "goodbye"}, batch_size=NT_BATCH)
suite.add(
    "split [100, 200] with a non-tensor leaf",
    lambda: torch.split(ours_nt, [100, 200], 0),
    lambda: torch.split(theirs_nt, [100, 200], 0),
    what="batch [300, 400, 50], one float leaf and one shared string",
)
ours_nt10, theirs_nt10 = ours_nt[:10], theirs_nt[:10]
suite.add(
    "stack 2 with a non-tensor leaf",
    lambda: torch.stack([ours_nt10, ours_nt10], 0),
    lambda: torch.stack([theirs_nt10, theirs_nt10], 0),
    what="batch [10, 400, 50] each; upstream collapses the equal strings into one value, "
    "td gives a NonTensorStack (read as a list) that stores the one value and its batch size",
)
suite.add(
    "cat 2 with a non-tensor leaf",
    lambda: torch.cat([ours_nt10, ours_nt10], 0),
    lambda: torch.cat([theirs_nt10, theirs_nt10], 0),
    what="as the stack case, along dim 0",
)

# upstream's tensorclass torch-function benchmark (benchmarks/tensorclass): two float leaves
# at [300, 400, 50], a string field at [300, 400] and a nested tensorclass with a string at
# [300, 400, 50]; stack and cat copy 4 x 3 x 24 MB of floats, the strings must cost nothing


def _tensorclass(decorator):
    @decorator
    class MyData:
        a: torch.Tensor
        b: torch.Tensor
        other: str
        nested: MyData = None

    return MyData


def _tensorclass_data(cls):
    a, b = torch.zeros(300, 400, 50), torch.zeros(300, 400, 50)
    nested = cls(a=a.clone(), b=b.clone(), other="goodbye", batch_size=[300, 400, 50])
    return cls(a=a, b=b, other="hello", nested=nested, batch_size=[300, 400])


ours_tc = _tensorclass_data(_tensorclass(td_core.tensorclass))
theirs_tc = _tensorclass_data(_tensorclass(tensordict.tensorclass))
_tc_leaves = [ours_tc.a, ours_tc.b, ours_tc.nested.a, ours_tc.nested.b]
for name, op, floor, what in (
    ("unbind", lambda tc: torch.unbind(tc, 0), None, "torch.unbind(tc, 0): 300 tensorclasses"),
    ("split", lambda tc: torch.split(tc, [200, 100]), None, "torch.split(tc, [200, 100])"),
    ("stack", lambda tc: torch.stack([tc] * 3, 0), torch.stack, "torch.stack([tc] * 3, 0)"),
    ("cat", lambda tc: torch.cat([tc] * 3, 0), torch.cat, "torch.cat([tc] * 3, 0)"),
):
    # stack and cat: the floor is torch's own op on the four float leaves (the copy itself)
    floors = {} if floor is None else {"torch": lambda f=floor: [f([t] * 3, 0) for t in _tc_leaves]}
    suite.add(
        f"tensorclass {name} with str fields",
        lambda op=op: op(ours_tc),
        lambda op=op: op(theirs_tc),
        what=f"{what}; upstream's tensorclass benchmark (string fields at [300, 400] "
        "and [300, 400, 50])",
        **floors,
    )


# upstream's tensorclass speed benchmark: a constructor of 10 tensor fields, and a field write


def _many_fields(base):
    return type(
        "ManyFields", (base,), {"__annotations__": {f"f{i}": torch.Tensor for i in range(10)}}
    )


OursMany = _many_fields(td_core.TensorClass["tensor_only"])
TheirsMany = _many_fields(tensordict.TensorClass["tensor_only"])
scalar = torch.zeros(())
many_kwargs = {f"f{i}": scalar for i in range(10)}
suite.add(
    "tensorclass init, 10 tensor fields",
    lambda: OursMany(**many_kwargs),
    lambda: TheirsMany(**many_kwargs),
    what="ManyFields(**fields) of a TensorClass['tensor_only'] (upstream's test_tc_init_many_fields)",
)
ours_many, theirs_many = OursMany(**many_kwargs), TheirsMany(**many_kwargs)


def set_field(tc):
    def run():
        tc.f3 = scalar

    return run


suite.add(
    "tensorclass field write tc.f3 = t",
    set_field(ours_many),
    set_field(theirs_many),
    what="a tensor written to a field (upstream's test_tc_first_layer_tensor_only_set)",
)

if __name__ == "__main__":
    suite.main()
