"""td-query against torchrl's QueryModule, SipHash and TensorDictMap.

torchrl pins an older tensordict than the workspace's dev group, so the comparison
runs in its own throw-away environment (nothing is added to any pyproject). From
the repository root:

    uv run --isolated --no-project --with torchrl==0.14.1 \\
        --with-editable packages/td-core --with-editable packages/td-query \\
        python benchmarks/bench_query.py

(torchrl 0.14.1, the newest release, resolves with tensordict 0.14.3 and the
workspace's torch; its QueryModule imports and runs there.) Run
with plain ``uv run python benchmarks/bench_query.py`` and torchrl is missing: td's
side is timed alone, without ratios. ``--quick`` gives a short smoke run.

``--threads N`` sets ``torch.set_num_threads(N)`` for both sides first. td does
its CPU work on one thread (a single-threaded compiled kernel, numpy), but torch
ops of both sides (torch.stack in the SipHash case, torchrl's storage) use OpenMP;
on a machine whose cores are busy with other work, OpenMP barriers wait for
descheduled threads and timings turn into noise, so ``--threads 1`` (the per-core
cost) is the comparison to quote there. Without it, torch's default is kept.

Steady state is measured. On CPU, td hashes batches of at least 8192 rows with a
kernel that ``torch.compile`` builds once a row length has spent 2 s in numpy
(seconds, once per process and row length); every td case is therefore run for
3 s before timing, and the time of the first call is printed apart. The ``compiled=False`` cases show td
without that kernel (numpy only, nothing to build), what a machine without a C++
compiler gets.

Cases:
- hashing 100k rows of two keys (per-key SipHash, then the aggregator), on its own
  and through ``QueryModule.forward`` (which also maps hashes to indices);
- a 10k-row ``TensorDictMap``: build a fresh map, write 10k rows, read them back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from harness import Suite

from td_core import TensorDict
from td_query import QueryModule, SipHash, TensorDictMap

try:
    import tensordict as upstream_tensordict
    import torchrl.data as torchrl_data
except ImportError:  # run without torchrl: td only
    torchrl_data = None

N_HASH = 100_000
N_MAP = 10_000
FIRST_CALLS: dict[str, float] = {}  # seconds taken by the first call of each td case


WARM_SECONDS = 3.0  # past td_query's COMPILE_AFTER_SECONDS, so the default policy has tiered up


def _warm(name: str, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` after calls for WARM_SECONDS; the first call's time (and the build's) go to FIRST_CALLS."""
    start = time.perf_counter()
    fn()
    FIRST_CALLS[name] = time.perf_counter() - start
    while time.perf_counter() - start < WARM_SECONDS:
        fn()
    return fn


def _data(n: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(n, 4, generator=gen),
        "action": torch.randint(0, 10, (n, 2), generator=gen),
    }


def _values(n: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "next_obs": torch.randn(n, 4, generator=gen),
        "reward": torch.randn(n, 1, generator=gen),
    }


def build_suite() -> Suite:
    suite = Suite("query", reference="torchrl")
    keys = ["obs", "action"]

    # ---- hashing 100k rows of two keys
    data = _data(N_HASH, 0)

    def siphash_fn(ours_hash: SipHash) -> Callable[[], torch.Tensor]:
        def ours_siphash() -> torch.Tensor:
            hashes = [ours_hash(data["obs"]), ours_hash(data["action"])]
            return ours_hash(torch.stack(hashes, -1))

        return ours_siphash

    ours_siphash = _warm("SipHash", siphash_fn(SipHash()))
    ours_numpy = _warm("SipHash compiled=False", siphash_fn(SipHash(compiled=False)))
    td = TensorDict(dict(data), batch_size=[N_HASH])
    ours_query = QueryModule(keys)
    _warm("QueryModule", lambda: ours_query(td))

    theirs_siphash = theirs_query_fn = None
    if torchrl_data is not None:
        their_hash = torchrl_data.SipHash()

        def theirs_siphash() -> torch.Tensor:
            return their_hash(
                torch.stack([their_hash(data["obs"]), their_hash(data["action"])], -1)
            )

        their_td = upstream_tensordict.TensorDict(dict(data), batch_size=[N_HASH])
        their_query = torchrl_data.QueryModule(keys)
        their_query(their_td)

        def theirs_query_fn() -> object:
            return their_query(their_td)

    suite.add(f"SipHash {N_HASH // 1000}k rows x 2 keys + aggregate", ours_siphash, theirs_siphash)
    suite.add("  the same, td with compiled=False", ours_numpy, theirs_siphash)
    suite.add(
        f"QueryModule {N_HASH // 1000}k rows, 2 keys", lambda: ours_query(td), theirs_query_fn
    )

    # ---- TensorDictMap: fresh map, write 10k rows, read them back
    src = _data(N_MAP, 1)
    dst = _values(N_MAP, 2)
    src_td = TensorDict(dict(src), batch_size=[N_MAP])
    dst_td = TensorDict(dict(dst), batch_size=[N_MAP])

    def map_fn(compiled: bool | None) -> Callable[[], object]:
        def ours_map() -> object:
            td_map = TensorDictMap.from_tensordict_pair(
                src_td, dst_td, in_keys=keys, hash_module=SipHash(compiled=compiled)
            )
            td_map[src_td] = dst_td
            return td_map[src_td]

        return ours_map

    ours_map = _warm("TensorDictMap", map_fn(None))
    ours_map_numpy = _warm("TensorDictMap compiled=False", map_fn(False))

    theirs_map = None
    if torchrl_data is not None:
        their_src = upstream_tensordict.TensorDict(dict(src), batch_size=[N_MAP])
        their_dst = upstream_tensordict.TensorDict(dict(dst), batch_size=[N_MAP])

        def theirs_map() -> object:
            td_map = torchrl_data.TensorDictMap.from_tensordict_pair(
                their_src, their_dst, in_keys=keys, max_size=N_MAP
            )
            td_map[their_src] = their_dst
            return td_map[their_src]

    suite.add(f"TensorDictMap {N_MAP // 1000}k rows write+read", ours_map, theirs_map)
    suite.add("  the same, td with compiled=False", ours_map_numpy, theirs_map)
    return suite


if __name__ == "__main__":
    import argparse
    import logging

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--threads", type=int, default=None)
    args, rest = parser.parse_known_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    logging.getLogger("torchrl").setLevel(logging.WARNING)  # torchrl logs each storage it builds
    suite = build_suite()
    print(f"threads: {torch.get_num_threads()}; first td calls (before timing):")
    for name, seconds in FIRST_CALLS.items():
        print(f"  {name:<30} {seconds:8.3f} s")
    suite.main(rest)
