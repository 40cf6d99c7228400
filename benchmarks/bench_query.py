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

``--threads N`` sets ``torch.set_num_threads(N)`` for both sides first. torchrl
hashes in a single-threaded Python loop while td's torch ops may use OpenMP; on a
machine whose cores are busy with other work, OpenMP barriers wait for descheduled
threads and td's timings turn into noise, so ``--threads 1`` (the per-core cost)
is the comparison to quote there. Without it, torch's default is kept.

Cases:
- hashing 100k rows of two keys (per-key SipHash, then the aggregator), on its own
  and through ``QueryModule.forward`` (which also maps hashes to indices);
- a 10k-row ``TensorDictMap``: build a fresh map, write 10k rows, read them back.
"""

from __future__ import annotations

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
    ours_hash = SipHash()

    def ours_siphash() -> torch.Tensor:
        return ours_hash(torch.stack([ours_hash(data["obs"]), ours_hash(data["action"])], -1))

    td = TensorDict(dict(data), batch_size=[N_HASH])
    ours_query = QueryModule(keys)
    ours_query(td)

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
    suite.add(
        f"QueryModule {N_HASH // 1000}k rows, 2 keys", lambda: ours_query(td), theirs_query_fn
    )

    # ---- TensorDictMap: fresh map, write 10k rows, read them back
    src = _data(N_MAP, 1)
    dst = _values(N_MAP, 2)
    src_td = TensorDict(dict(src), batch_size=[N_MAP])
    dst_td = TensorDict(dict(dst), batch_size=[N_MAP])

    def ours_map() -> object:
        td_map = TensorDictMap.from_tensordict_pair(src_td, dst_td, in_keys=keys)
        td_map[src_td] = dst_td
        return td_map[src_td]

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
    build_suite().main(rest)
