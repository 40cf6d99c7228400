"""Pointwise math and casts over 100 leaves: td against upstream tensordict, on identical data.

Run: ``uv run python benchmarks/bench_pointwise.py [--quick] [--filter NAME]``.

Ratios are td / upstream (lower is better). The floor ``tree`` is
``torch.utils._pytree.tree_map`` doing the same tensor work on a plain nested dict
(one torch call per leaf). ``lerp_`` is the soft target-network update of RL libraries.
The three sides start from equal values and their results are compared on the first
call (``Suite(check=True)``); ``--list`` prints what each case measures.
"""

from __future__ import annotations

import operator
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

BATCH = 16


def source() -> dict:
    """100 leaves: 40 at the top, 30 under ``m``, 30 under ``(m, n)`` (a parameter tree)."""
    return {
        **{f"w{i}": torch.randn(BATCH, 8) for i in range(40)},
        "m": {
            **{f"w{i}": torch.randn(BATCH, 8) for i in range(30)},
            "n": {f"w{i}": torch.randn(BATCH, 4, 4) for i in range(30)},
        },
    }


def copies() -> tuple[TensorDict, Upstream, dict]:
    """Independent copies of the same values in td, upstream and a plain nested dict."""
    data = source()
    return (
        TensorDict(_pytree.tree_map(torch.clone, data), batch_size=[BATCH]),
        Upstream(_pytree.tree_map(torch.clone, data), batch_size=[BATCH]),
        _pytree.tree_map(torch.clone, data),
    )


ours, theirs, plain = copies()
ours2, theirs2, plain2 = copies()
tree = _pytree.tree_map

suite = Suite("pointwise", check=True)


def leafwise(name: str, what: str, method: str, *args: float) -> None:
    """A case calling `method(*args)` on td, on upstream and on each leaf of the plain tree."""
    call = operator.methodcaller(method, *args)
    suite.add(
        name, lambda: call(ours), lambda: call(theirs), what=what, tree=lambda: tree(call, plain)
    )


# ---------------------------------------------------------------- out of place
suite.add(
    "add scalar (100 leaves)",
    lambda: ours + 1.5,
    lambda: theirs + 1.5,
    what="out of place: a new tree holding every leaf + 1.5",
    tree=lambda: tree(lambda t: t + 1.5, plain),
)
suite.add(
    "mul TensorDict (100 leaves)",
    lambda: ours * ours2,
    lambda: theirs * theirs2,
    what="out of place: the leaf-by-leaf product of two trees with the same keys",
    tree=lambda: tree(lambda a, b: a * b, plain, plain2),
)
leafwise("exp (100 leaves)", "out of place: a unary math function of every leaf", "exp")
leafwise(
    "clamp (100 leaves)",
    "out of place: a math function with scalar arguments on every leaf",
    "clamp",
    -1.0,
    1.0,
)
suite.add(
    "float64 cast (100 leaves)",
    lambda: ours.float64(),
    lambda: theirs.float64(),
    what="out of place: every leaf cast to float64 (the casts family)",
    tree=lambda: tree(lambda t: t.to(torch.float64), plain),
)

# ---------------------------------------------------------------- in place
leafwise(
    "mul_ scalar (100 leaves)",
    "in place: every leaf multiplied by a scalar (1.0, so the values stay put)",
    "mul_",
    1.0,
)
suite.add(
    "add_ TensorDict (100 leaves)",
    lambda: ours.add_(ours2, alpha=0.0),
    lambda: theirs.add_(theirs2, alpha=0.0),
    what="in place: another tree added with alpha= (the shape of an optimizer step)",
    tree=lambda: tree(lambda a, b: a.add_(b, alpha=0.0), plain, plain2),
)
leafwise(
    "clamp_max_ (100 leaves)",
    "in place: a math function with a scalar argument on every leaf",
    "clamp_max_",
    3.0,
)
leafwise("abs_ (100 leaves)", "in place: a unary math function of every leaf", "abs_")
suite.add(
    "lerp_ (100 leaves, soft update)",
    lambda: ours.lerp_(ours2, 0.005),
    lambda: theirs.lerp_(theirs2, 0.005),
    what="in place: target.lerp_(source, tau), the soft target-network update of RL",
    tree=lambda: tree(lambda a, b: a.lerp_(b, 0.005), plain, plain2),
)

if __name__ == "__main__":
    suite.main()
