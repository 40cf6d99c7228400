"""td-distributions against upstream tensordict.nn.distributions.

TruncatedNormal on one million values: ``rsample`` and ``log_prob`` on a
distribution built beforehand, and the same calls including construction (the
usual pattern in a policy, which builds a new distribution at every step).
Upstream computes every constant in its constructor; td computes them lazily,
once, on first use. Parameters put the upper bounds 2.7 to 8 deviations
above ``loc``, so both the central and the tail code paths run.

Run: ``uv run python benchmarks/bench_distributions.py [--quick] [--filter rsample]``
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from harness import Suite

from td_distributions import Delta, OneHotCategorical, TruncatedNormal

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # upstream's import warns about deprecated names
    from tensordict.nn.distributions import Delta as UpstreamDelta
    from tensordict.nn.distributions import OneHotCategorical as UpstreamOneHotCategorical
    from tensordict.nn.distributions import TruncatedNormal as UpstreamTruncatedNormal

N = 1_000_000


def _params() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    loc = torch.randn(N, generator=gen)
    scale = torch.rand(N, generator=gen) + 0.5
    a = loc - 1.0
    b = loc + 4.0
    return loc, scale, a, b


def main() -> None:
    loc, scale, a, b = _params()
    ours = TruncatedNormal(loc, scale, a, b)
    theirs = UpstreamTruncatedNormal(loc, scale, a, b)
    value = ours.sample()
    ours.log_prob(value)  # fill the lazy constants, as a reused distribution would have them

    suite = Suite("distributions")
    suite.add("TruncatedNormal.rsample 1M", lambda: ours.rsample(), lambda: theirs.rsample())
    suite.add(
        "TruncatedNormal.log_prob 1M", lambda: ours.log_prob(value), lambda: theirs.log_prob(value)
    )
    suite.add(
        "TruncatedNormal(...).rsample 1M",
        lambda: TruncatedNormal(loc, scale, a, b).rsample(),
        lambda: UpstreamTruncatedNormal(loc, scale, a, b).rsample(),
    )
    suite.add(
        "TruncatedNormal(...).log_prob 1M",
        lambda: TruncatedNormal(loc, scale, a, b).log_prob(value),
        lambda: UpstreamTruncatedNormal(loc, scale, a, b).log_prob(value),
    )
    _small_cases(suite)
    suite.main()


def _small_cases(suite: Suite) -> None:
    """A policy-sized batch (64 rows), where the per-call overhead is what is measured."""
    gen = torch.Generator().manual_seed(1)
    param, logits = torch.randn(64, 3, generator=gen), torch.randn(64, 5, generator=gen)
    # upstream's Delta never checks the value given to log_prob; td's does by default, as
    # torch.distributions do: validate_args=False is the same work
    delta, up_delta = Delta(param, validate_args=False), UpstreamDelta(param)
    suite.add(
        "Delta.log_prob 64x3 (td: validate_args=False)",
        lambda: delta.log_prob(param),
        lambda: up_delta.log_prob(param),
        what="both compare the value with param without checking it (upstream never checks)",
    )
    suite.add("Delta.rsample 64x3", delta.rsample, up_delta.rsample)
    one_hot, up_one_hot = OneHotCategorical(logits=logits), UpstreamOneHotCategorical(logits=logits)
    mode = one_hot.mode
    suite.add(
        "OneHotCategorical.log_prob 64x5",
        lambda: one_hot.log_prob(mode),
        lambda: up_one_hot.log_prob(mode),
        what="default validation on both sides: td checks the value is one-hot, upstream "
        "that its argmax is a category",
    )


if __name__ == "__main__":
    main()
