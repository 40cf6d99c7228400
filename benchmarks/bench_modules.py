"""td-core beyond the dense container, side by side with upstream tensordict.

Run: ``uv run python benchmarks/bench_modules.py [--quick] [--filter NAME]``.
Cases: lazy stack of 100 TensorDicts then reading one key; from_module +
to_module on a 10-layer MLP; vmap over from_modules of 5 MLPs (floor: a Python
loop over the 5 models); map with 2 workers (floor: a plain loop).
"""

from __future__ import annotations

import tensordict as upstream
import torch
from harness import Suite
from torch import nn

import td_core

torch.manual_seed(0)
torch.set_num_threads(1)  # overhead, not intra-op parallelism, is what is measured
suite = Suite("modules")

# ------------------------------------------------------------------ lazy stack
members = [{"a": torch.randn(10, 3), "b": torch.randn(10, 100)} for _ in range(100)]
ours_members = [td_core.TensorDict(m, [10]) for m in members]
theirs_members = [upstream.TensorDict(m, [10]) for m in members]
suite.add(
    "lazy stack 100 then read one key",
    lambda: td_core.lazy_stack(ours_members)["a"],
    lambda: upstream.LazyStackedTensorDict.lazy_stack(theirs_members)["a"],
    dense=lambda: torch.stack([m["a"] for m in members]),
)

# ------------------------------------------------------------ module params
mlp = nn.Sequential(*[nn.Linear(32, 32) for _ in range(10)])
x = torch.randn(8, 32)


def ours_roundtrip():
    params = td_core.TensorDict.from_module(mlp)
    with params.to_module(mlp):
        pass


def theirs_roundtrip():
    params = upstream.TensorDict.from_module(mlp)
    with params.to_module(mlp):
        pass


suite.add("from_module + to_module 10-layer MLP", ours_roundtrip, theirs_roundtrip)

# ---------------------------------------------------------------- ensembles
# Upstream tensordict patches private torch.vmap functions when imported, which
# slows every vmap call in the process (ours included, ~7x here). So each side
# is timed in a fresh interpreter that imports only its own library.
VMAP_CHILD = """
import statistics, sys, time, torch
torch.set_num_threads(1)  # overhead, not intra-op parallelism, as in the other suites
from torch import nn
lib = __import__(sys.argv[1])
torch.manual_seed(0)
models = [nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)) for _ in range(5)]
shell = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).to("meta")
params = lib.from_modules(*models)
x = torch.randn(8, 32)
def call(p, x):
    with p.to_module(shell):
        return shell(x)
f = torch.vmap(call, (0, None))
loop = lambda: [m(x) for m in models]
fn = loop if sys.argv[2] == "loop" else (lambda: f(params, x))
for _ in range(20): fn()
n, samples = int(sys.argv[3]), []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter()
    for _ in range(n): fn()
    samples.append((time.perf_counter() - t) / n)
print(statistics.median(samples))
"""


def vmap_in_fresh_processes(target: float, repeats: int) -> dict[str, float]:
    """Medians over `repeats` rounds; each round starts td's, upstream's and the loop's
    child one after the other, so load that drifts during the run hits all three."""
    import statistics
    import subprocess
    import sys

    def child(lib: str, what: str) -> float:
        loops = max(5, int(target / 2e-4))
        out = subprocess.run(
            [sys.executable, "-c", VMAP_CHILD, lib, what, str(loops), "3"],
            capture_output=True,
            text=True,
            check=True,
        )
        return float(out.stdout.split()[-1])

    sides = {"td": ("td_core", "vmap"), "ref": ("tensordict", "vmap"), "loop": ("td_core", "loop")}
    samples: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(max(repeats, 3)):
        for side, (lib, what) in sides.items():
            samples[side].append(child(lib, what))
    return {side: statistics.median(times) for side, times in samples.items()}


suite.add_measured("vmap over from_modules of 5 MLPs", vmap_in_fresh_processes)


# ---------------------------------------------------------------------- map
def scale(chunk):
    return chunk.apply(lambda t: t * 2)


data = {"images": torch.randn(2000, 3, 16, 16), "labels": torch.arange(2000)}
ours_data = td_core.TensorDict(data, [2000])
theirs_data = upstream.TensorDict(data, [2000])
suite.add(
    "map with 2 workers (4 chunks)",
    lambda: ours_data.map(scale, num_workers=2, num_chunks=4),
    lambda: theirs_data.map(scale, num_workers=2, num_chunks=4),
    loop=lambda: torch.cat([scale(c) for c in ours_data.chunk(4)]),
)

if __name__ == "__main__":
    suite.main()
