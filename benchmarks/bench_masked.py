"""Masked and indexed reads and writes: td against upstream tensordict, on identical data.

Run: ``uv run python benchmarks/bench_masked.py [--quick] [--filter NAME]``.

Ratios are td / upstream (lower is better). The ``tree_map`` floor is
``torch.utils._pytree.tree_map`` doing the same tensor work on a plain dict of the
same tensors (with the mask already reshaped to broadcast over the leaves), so
``td/tree_map`` is what the container costs over the bare torch calls.
``get_at`` and ``set_at_`` are called once per key, as user code does. The three
sides' results are compared on the first call (``Suite(check=True)``); ``--list``
prints what each case measures.
"""

from __future__ import annotations

import pathlib
import sys

import tensordict
import torch
from torch.utils import _pytree

from td_core import TensorDict

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from harness import Suite

Upstream = tensordict.TensorDict

torch.manual_seed(0)
torch.set_num_threads(1)

N = 100  # leaves
B = 10  # batch size


def source() -> dict[str, torch.Tensor]:
    return {f"k{i}": torch.randn(B, 3) for i in range(N)}


suite = Suite("masked", check=True)

plain = source()
other_plain = source()
ours = TensorDict(plain, batch_size=[B])
theirs = Upstream(plain, batch_size=[B])
other_ours = TensorDict(other_plain, batch_size=[B])
other_theirs = Upstream(other_plain, batch_size=[B])
mask = torch.rand(B) > 0.5
leaf_mask = mask.reshape(B, 1)  # the floor gets the broadcastable mask for free

suite.add(
    "where(mask, 0.) 100 leaves",
    lambda: ours.where(mask, 0.0),
    lambda: theirs.where(mask, 0.0),
    what="out of place: each leaf where the batch mask holds, 0 elsewhere",
    tree_map=lambda: _pytree.tree_map(lambda t: torch.where(leaf_mask, t, 0.0), plain),
)
suite.add(
    "where(mask, td) 100 leaves",
    lambda: ours.where(mask, other_ours),
    lambda: theirs.where(mask, other_theirs),
    what="out of place: each leaf where the mask holds, the other tree's leaf elsewhere",
    tree_map=lambda: _pytree.tree_map(
        lambda a, b: torch.where(leaf_mask, a, b), plain, other_plain
    ),
)
suite.add(
    "torch.where(mask, td, 0.) 100 leaves",
    lambda: torch.where(mask, ours, 0.0),
    lambda: torch.where(mask, theirs, 0.0),
    what="the same through torch.where and __torch_function__",
    tree_map=lambda: _pytree.tree_map(lambda t: torch.where(leaf_mask, t, 0.0), plain),
)

w_plain = source()
w_ours = TensorDict(_pytree.tree_map(torch.clone, w_plain), batch_size=[B])
w_theirs = Upstream(_pytree.tree_map(torch.clone, w_plain), batch_size=[B])
for method, trees, floor, what in (
    (
        "masked_fill",
        (ours, theirs, plain),
        _pytree.tree_map,
        "out of place: a copy of each leaf with the masked batch rows set to 0",
    ),
    (
        "masked_fill_",
        (w_ours, w_theirs, w_plain),
        _pytree.tree_map_,
        "in place: the masked batch rows of every leaf set to 0",
    ),
):
    ours_fill, theirs_fill = getattr(trees[0], method), getattr(trees[1], method)
    leaf_fill = getattr(torch.Tensor, method)
    suite.add(
        f"{method}(mask, 0.) 100 leaves",
        lambda f=ours_fill: f(mask, 0.0),
        lambda f=theirs_fill: f(mask, 0.0),
        what=what,
        tree_map=lambda tm=floor, f=leaf_fill, d=trees[2]: tm(lambda t: f(t, leaf_mask, 0.0), d),
    )

keys = list(plain)
INDICES = {"int": 3, "slice": slice(2, 7), "tensor": torch.tensor([1, 4, 8])}
for name, idx in INDICES.items():

    def get_ours(idx=idx):
        return {k: ours.get_at(k, idx) for k in keys}

    def get_theirs(idx=idx):
        return {k: theirs.get_at(k, idx) for k in keys}

    suite.add(
        f"get_at {name} 100 leaves",
        get_ours,
        get_theirs,
        what=f"get_at(key, {name} index) called for each of the 100 keys",
        tree_map=lambda idx=idx: _pytree.tree_map(lambda t: t[idx], plain),
    )

    value = torch.ones(3) if name == "int" else torch.ones(B, 3)[idx]

    def set_ours(idx=idx, value=value):
        for k in keys:
            w_ours.set_at_(k, value, idx)
        return w_ours

    def set_theirs(idx=idx, value=value):
        for k in keys:
            w_theirs.set_at_(k, value, idx)
        return w_theirs

    def write(t, idx=idx, value=value):
        t[idx] = value

    suite.add(
        f"set_at_ {name} 100 leaves",
        set_ours,
        set_theirs,
        what=f"set_at_(key, value, {name} index) called for each of the 100 keys",
        tree_map=lambda write=write: _pytree.tree_map_(write, w_plain),
    )

suite.add(
    "zero_ 100 leaves",
    w_ours.zero_,
    w_theirs.zero_,
    what="in place: every leaf set to 0",
    tree_map=lambda: _pytree.tree_map_(torch.Tensor.zero_, w_plain),
)
for method, src_ours, src_theirs, src_plain, rule in (
    ("copy_", ours, theirs, plain, "a key missing in the destination is skipped"),
    ("update_", other_ours, other_theirs, other_plain, "a key missing in the destination raises"),
):
    suite.add(
        f"{method} 100 leaves",
        lambda m=method, s=src_ours: getattr(w_ours, m)(s),
        lambda m=method, s=src_theirs: getattr(w_theirs, m)(s),
        what=f"in place: every leaf overwritten with the same key's leaf of another tree ({rule}); "
        "td checks every shape before the first write, upstream does not",
        tree_map=lambda s=src_plain: _pytree.tree_map_(lambda a, b: a.copy_(b), w_plain, s),
    )
for name, idx in INDICES.items():
    fast = name != "tensor"  # upstream's fast=True refuses an index tensor
    part_ours, part_theirs = other_ours[idx], other_theirs[idx]
    part_plain = {k: v[idx] for k, v in other_plain.items()}

    def write_at(t, v, idx=idx):
        t[idx] = v

    suite.add(
        f"copy_at_ {name} 100 leaves",
        lambda idx=idx, fast=fast, p=part_ours: w_ours.copy_at_(p, idx, fast=fast),
        lambda idx=idx, fast=fast, p=part_theirs: w_theirs.copy_at_(p, idx, fast=fast),
        what=f"in place: another tree's rows written at a {name} index of every leaf",
        tree_map=lambda w=write_at, p=part_plain: _pytree.tree_map_(w, w_plain, p),
    )
    suite.add(
        f"update_at_ {name} 100 leaves",
        lambda idx=idx, p=part_ours: w_ours.update_at_(p, idx),
        lambda idx=idx, p=part_theirs: w_theirs.update_at_(p, idx),
        what="as copy_at_, through update_at_ (keys checked, a missing one raises KeyError)",
        tree_map=lambda w=write_at, p=part_plain: _pytree.tree_map_(w, w_plain, p),
    )
gather_index = torch.randint(0, B, (B,))
suite.add(
    "gather(0, index) 100 leaves",
    lambda: ours.gather(0, gather_index),
    lambda: theirs.gather(0, gather_index),
    what="out of place: batch rows picked by an index tensor, expanded over each leaf",
    tree_map=lambda: _pytree.tree_map(
        lambda t: torch.gather(t, 0, gather_index.reshape(B, 1).expand(B, 3)), plain
    ),
)


if __name__ == "__main__":
    suite.main()
