"""Reductions of td-core against upstream tensordict, on identical data.

Run: ``uv run python benchmarks/bench_reductions.py [--quick] [--filter NAME]``.

Ratios are td / upstream (lower is better). The ``tree_map`` floor is
``torch.utils._pytree.tree_map`` doing the same tensor work on a plain dict of the same
leaves: the cost of the reduction itself, with no container around it. The three
sides' results are compared on the first call (``Suite(check=True)``); ``--list``
prints what each case measures.
"""

from __future__ import annotations

import pathlib
import sys
import warnings

import torch
from torch.utils import _pytree

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict

from td_core import TensorDict

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from harness import Suite

Upstream = tensordict.TensorDict

torch.manual_seed(0)
# One intra-op thread: the leaves are small, and on a loaded machine torch's thread pool
# makes single calls swing by 100x (max(0) on a 16x4 tensor: 15 us to 1.4 ms), on every side.
torch.set_num_threads(1)

N_LEAVES = 100
BATCH = 16
FEATURE = 4

flat = {f"k{i}": torch.randn(BATCH, FEATURE) for i in range(N_LEAVES)}
nested = {f"n{j}": {f"k{i}": torch.randn(BATCH, FEATURE) for i in range(10)} for j in range(10)}
ours, theirs = TensorDict(flat, [BATCH]), Upstream(flat, [BATCH])
ours_n, theirs_n = TensorDict(nested, [BATCH]), Upstream(nested, [BATCH])

suite = Suite("reductions", check=True)

WHOLE = "each leaf reduced over all its dims: a tree of scalars"
BATCH0 = "each leaf reduced over batch dim 0: a tree of batch_size []"
# (case name, the method call on a container, the same tensor work on one leaf, what)
CALLS = [
    ("sum()", lambda td: td.sum(), lambda t: t.sum(), WHOLE),
    ("sum(0)", lambda td: td.sum(0), lambda t: t.sum(0), BATCH0),
    ("mean()", lambda td: td.mean(), lambda t: t.mean(), WHOLE),
    ("mean(0)", lambda td: td.mean(0), lambda t: t.mean(0), BATCH0),
    ("std()", lambda td: td.std(), lambda t: t.std(), WHOLE),
    ("std(0)", lambda td: td.std(0), lambda t: t.std(0), BATCH0),
    ("max()", lambda td: td.max(), lambda t: t.max(), WHOLE),
    ("max(0)", lambda td: td.max(0), lambda t: t.max(0), BATCH0 + ", values and indices"),
]

for label, call, leaf, what in CALLS:
    suite.add(
        f"{label} {N_LEAVES} leaves",
        lambda call=call: call(ours),
        lambda call=call: call(theirs),
        what=what,
        tree_map=lambda leaf=leaf: _pytree.tree_map(leaf, flat),
    )
for label, call, leaf, what in CALLS[:2]:
    suite.add(
        f"{label} {N_LEAVES} leaves nested 10x10",
        lambda call=call: call(ours_n),
        lambda call=call: call(theirs_n),
        what=what + ", through 10 sub-TensorDicts",
        tree_map=lambda leaf=leaf: _pytree.tree_map(leaf, nested),
    )

if __name__ == "__main__":
    suite.main()
