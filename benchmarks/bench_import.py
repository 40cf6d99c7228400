"""What ``import td_core`` costs over ``import torch``, against ``import tensordict``.

Run: ``uv run python benchmarks/bench_import.py``. Each import runs in a fresh
interpreter, several times; the report gives the median extra time over
``import torch`` and the number of extra modules loaded.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

PROBE = """
import sys, time
t0 = time.perf_counter(); import torch; t1 = time.perf_counter()
before = len(sys.modules)
import {name}
t2 = time.perf_counter()
print(t2 - t1, len(sys.modules) - before)
"""


def measure(name: str, runs: int = 5) -> tuple[float, int]:
    times, counts = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(name=name)],
            capture_output=True,
            text=True,
            check=True,
        )
        elapsed, modules = out.stdout.split()
        times.append(float(elapsed))
        counts.append(int(modules))
    return statistics.median(times), max(counts)


def main() -> None:
    ours = measure("td_core")
    theirs = measure("tensordict")
    print(f"import td_core    over torch: {ours[0] * 1e3:7.1f} ms, {ours[1]:4d} extra modules")
    print(f"import tensordict over torch: {theirs[0] * 1e3:7.1f} ms, {theirs[1]:4d} extra modules")
    print(f"td/upstream: time {ours[0] / theirs[0]:.2f}, modules {ours[1] / theirs[1]:.2f}")


if __name__ == "__main__":
    main()
