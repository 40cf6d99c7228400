"""td-nn's modules against upstream tensordict.nn, wrapping the very same networks.

Run: ``uv run python benchmarks/bench_nn.py [--quick] [--filter NAME]``.

Ratios are td / upstream (lower is better). The ``mlp`` floor calls the bare
network(s) on tensors, so ``td/mlp`` is the cost of the TensorDict wrapper
relative to the network itself; the printed per-case lines also give the
wrapper overhead in microseconds (td time minus the floor).
"""

from __future__ import annotations

import pathlib
import statistics
import sys

import tensordict
import tensordict.nn as upstream_nn
import torch
from torch import nn
from torch.distributions import Normal

import td_nn
from td_core import TensorDict

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from harness import Case, Suite

torch.manual_seed(0)
torch.set_num_threads(1)  # overhead, not intra-op parallelism, is what is measured

BATCH = 32
IN, HIDDEN, OUT = 32, 64, 16


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


x = torch.randn(BATCH, IN)
ours_td = TensorDict(x=x, batch_size=[BATCH])
their_td = tensordict.TensorDict(x=x, batch_size=[BATCH])

suite = Suite("nn")

# ---------------------------------------------------------------- one module around an MLP
net = mlp()
ours = td_nn.TensorDictModule(net, in_keys=["x"], out_keys=["y"])
theirs = upstream_nn.TensorDictModule(net, in_keys=["x"], out_keys=["y"])
suite.add(
    f"TensorDictModule(mlp) batch {BATCH}",
    lambda: ours(ours_td),
    lambda: theirs(their_td),
    mlp=lambda: net(x),
)

# ---------------------------------------------------------------- a wrapper around nothing
ident = td_nn.TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["y"])
their_ident = upstream_nn.TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["y"])
suite.add(
    "TensorDictModule(identity): pure overhead",
    lambda: ident(ours_td),
    lambda: their_ident(their_td),
)

# ---------------------------------------------------------------- the wrapper's own cost
# A TensorDictModule around an nn.Module on a small TensorDict, against doing its work by
# hand: read the input, call the module, write the output (`by_hand`, on td's container).
# `module_call` times the bare module call, the unit the overhead is reported in below.
x_small = torch.randn(4, 3)
small_ours = TensorDict(x=x_small, batch_size=[4])
small_theirs = tensordict.TensorDict(x=x_small, batch_size=[4])
for label, inner in (("nn.Identity()", nn.Identity()), ("nn.Linear(3, 3)", nn.Linear(3, 3))):
    ours_small = td_nn.TensorDictModule(inner, in_keys=["x"], out_keys=["y"])
    theirs_small = upstream_nn.TensorDictModule(inner, in_keys=["x"], out_keys=["y"])

    def by_hand(inner: nn.Module = inner) -> None:
        small_ours["y"] = inner(small_ours["x"])

    assert torch.equal(ours_small(small_ours)["y"], theirs_small(small_theirs)["y"])
    suite.add(
        f"TensorDictModule({label}) batch 4: overhead",
        lambda m=ours_small: m(small_ours),
        lambda m=theirs_small: m(small_theirs),
        by_hand=by_hand,
        module_call=lambda inner=inner: inner(x_small),
    )

identity = lambda x: x  # noqa: E731
ours_ident3 = td_nn.TensorDictSequential(
    *[td_nn.TensorDictModule(identity, in_keys=["x"], out_keys=["x"]) for _ in range(3)]
)
theirs_ident3 = upstream_nn.TensorDictSequential(
    *[upstream_nn.TensorDictModule(identity, in_keys=["x"], out_keys=["x"]) for _ in range(3)]
)
suite.add(
    "TensorDictSequential(3 x identity): pure overhead",
    lambda: ours_ident3(ours_td),
    lambda: theirs_ident3(their_td),
)

# ---------------------------------------------------------------- nested keys
nested_ours = TensorDict({("obs", "x"): x}, [BATCH])
nested_theirs = tensordict.TensorDict({("obs", "x"): x}, [BATCH])
ours_nested = td_nn.TensorDictModule(net, in_keys=[("obs", "x")], out_keys=[("out", "y")])
theirs_nested = upstream_nn.TensorDictModule(net, in_keys=[("obs", "x")], out_keys=[("out", "y")])
suite.add(
    f"TensorDictModule(mlp) nested keys batch {BATCH}",
    lambda: ours_nested(nested_ours),
    lambda: theirs_nested(nested_theirs),
    mlp=lambda: net(x),
)

# ---------------------------------------------------------------- a sequence of 3 modules
l1, act, l2 = nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT)


def three(lib):  # the same three layers, each wrapped in a TensorDictModule
    return lib.TensorDictSequential(
        lib.TensorDictModule(l1, in_keys=["x"], out_keys=["h"]),
        lib.TensorDictModule(act, in_keys=["h"], out_keys=["h"]),
        lib.TensorDictModule(l2, in_keys=["h"], out_keys=["y"]),
    )


ours_seq, theirs_seq = three(td_nn), three(upstream_nn)
suite.add(
    f"TensorDictSequential(3 modules) batch {BATCH}",
    lambda: ours_seq(ours_td),
    lambda: theirs_seq(their_td),
    mlp=lambda: l2(act(l1(x))),
)

# ---------------------------------------------------------------- keyword tensors in
suite.add(
    f"TensorDictModule(mlp) called with x= batch {BATCH}",
    lambda: ours(x=x),
    lambda: theirs(x=x),
    mlp=lambda: net(x),
)

# ---------------------------------------------------------------- a Normal policy
head = nn.Linear(IN, 2 * OUT)


def split(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    loc, scale = h.chunk(2, -1)
    return loc, nn.functional.softplus(scale) + 1e-3


def policy(lib):
    return lib.ProbabilisticTensorDictSequential(
        lib.TensorDictModule(head, in_keys=["x"], out_keys=["h"]),
        lib.TensorDictModule(split, in_keys=["h"], out_keys=["loc", "scale"]),
        lib.ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=Normal,
            return_log_prob=True,
        ),
    )


ours_policy, theirs_policy = policy(td_nn), policy(upstream_nn)


def bare_policy() -> torch.Tensor:
    loc, scale = split(head(x))
    dist = Normal(loc, scale)
    action = dist.mean
    return dist.log_prob(action)


suite.add(
    f"ProbabilisticTensorDictSequential(Normal) batch {BATCH}",
    lambda: ours_policy(ours_td),
    lambda: theirs_policy(their_td),
    mlp=bare_policy,
)


if __name__ == "__main__":
    cases = suite.main()
    print()
    for case in cases:
        if "by_hand" in case.times:
            # medians over rounds of the differences of samples taken back to back
            def over(side: str, ours: str = "td", case: Case = case) -> float:
                pairs = zip(case.samples[ours], case.samples[side])
                return statistics.median(a - b for a, b in pairs) * 1e6

            print(
                f"{case.name:<48} td over the bare module call {over('module_call'):5.2f} us "
                f"(upstream {over('module_call', 'ref'):5.2f} us); "
                f"over doing it by hand {over('by_hand'):5.2f} us"
            )
        if "mlp" in case.times:
            overhead = (case.times["td"] - case.times["mlp"]) * 1e6
            ref = (case.times["ref"] - case.times["mlp"]) * 1e6
            print(f"{case.name:<48} wrapper overhead td {overhead:6.2f} us, upstream {ref:6.2f} us")
