"""Side-by-side timing: td against a reference (upstream tensordict, torchrl, torch.save, ...).

Every benchmark script builds a :class:`Suite`, adds cases with ``suite.add(name,
ours, theirs, what="...", floor_name=floor_fn, ...)`` and calls ``suite.main()``. The runs of
each case are interleaved (ours, theirs, floors, ours, theirs, ...) so that drift
in machine load hits both sides alike, and the report is a ratio per case
(td / reference, lower is better: the median over rounds of the ratio of the
samples taken back to back in that round) with the median and geometric mean across
cases. Absolute times are printed for context only: they depend on the machine.

A suite built with ``check=True`` also compares what each side returns on its
first call (td against the reference and every floor, leaf by leaf), so a ratio
is only reported for sides that did the same work; ``what`` says in words what a
case measures (``--list`` prints it).

Results are also written as JSON under ``benchmarks/results/`` for the docs.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import pathlib
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Case", "Suite", "measure"]

RESULTS = pathlib.Path(__file__).parent / "results"


def _loops_for(fn: Callable[[], object], target: float) -> int:
    """How many calls of ``fn`` take about ``target`` seconds (at least 1)."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= target / 4 or n >= 1 << 20:
            return max(1, int(n * target / max(elapsed, 1e-9)))
        n *= 4


def _sample(fn: Callable[[], object], loops: int) -> float:
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        return (time.perf_counter() - start) / loops
    finally:
        if gc_was_enabled:
            gc.enable()


def measure(fn: Callable[[], object], *, target: float = 0.05, repeats: int = 7) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` samples of ~``target`` s each."""
    fn()
    loops = _loops_for(fn, target)
    return statistics.median(_sample(fn, loops) for _ in range(repeats))


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> dict[tuple[str, ...], Any]:
    """The tensors (and plain values) of a result, keyed by their path, sorted.

    TensorDicts (td's or upstream's) are read through ``to_dict()``; torch's named
    tuples by field. A path is keyed by its sorted names, so upstream's
    ``(values, indices)`` of TensorDicts matches the floor's dict of ``(values, indices)``.
    """
    import torch
    from torch.utils import _pytree

    if isinstance(obj, torch.Tensor):
        return {tuple(sorted(map(str, path))): obj}
    if obj is None:
        return {}
    if hasattr(obj, "batch_size") and hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    items: Any
    if _pytree.is_structseq_instance(obj):
        items = zip(type(obj).__match_args__, obj)
    elif isinstance(obj, Mapping):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return {tuple(sorted(map(str, path))): obj}
    out: dict[tuple[str, ...], Any] = {}
    for key, value in items:
        out.update(_leaves(value, (*path, key)))
    return out


def check_same(name: str, results: dict[str, object]) -> None:
    """Raise ``AssertionError`` unless every result in ``results`` equals ``results["td"]``."""
    import torch

    ours = _leaves(results["td"])
    for side, result in results.items():
        theirs = _leaves(result)
        if ours.keys() != theirs.keys():
            raise AssertionError(
                f"{name}: td returns entries {sorted(ours)}, {side} {sorted(theirs)}"
            )
        for path, value in ours.items():
            try:
                torch.testing.assert_close(value, theirs[path], equal_nan=True)
            except AssertionError as err:
                raise AssertionError(f"{name}: td and {side} differ at {path}: {err}") from None


@dataclass
class Case:
    """One operation timed on td, on the reference, and optionally on floors."""

    name: str
    ours: Callable[[], object]
    theirs: Callable[[], object] | None
    floors: dict[str, Callable[[], object]] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    what: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)

    def run(self, *, target: float, repeats: int, check: bool = False) -> None:
        fns = {"td": self.ours, **({"ref": self.theirs} if self.theirs else {}), **self.floors}
        firsts = {key: fn() for key, fn in fns.items()}  # warm-up, and fail early
        if check:
            check_same(self.name, firsts)
        del firsts
        loops = {key: _loops_for(fn, target) for key, fn in fns.items()}
        samples: dict[str, list[float]] = {key: [] for key in fns}
        for _ in range(repeats):
            for key, fn in fns.items():
                samples[key].append(_sample(fn, loops[key]))
        self.samples = samples
        self.times = {key: statistics.median(v) for key, v in samples.items()}

    def ratio_to(self, side: str) -> float:
        """td's time over ``side``'s: the median of the ratios of samples taken
        back to back (robust to load that drifts between rounds), or of the times."""
        if self.samples.get(side):
            return statistics.median(a / b for a, b in zip(self.samples["td"], self.samples[side]))
        return self.times["td"] / self.times[side]

    @property
    def ratio(self) -> float | None:
        if "ref" not in self.times:
            return None
        return self.ratio_to("ref")

    @property
    def floor_ratios(self) -> dict[str, float]:
        return {k: self.ratio_to(k) for k in self.times if k not in ("td", "ref")}


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:8.2f} {unit}"
    return f"{seconds / 1e-9:8.1f} ns"


class Suite:
    """A list of cases with one report.

    Args:
        title: heading of the report and stem of the JSON results file.
        reference: what ``theirs`` measures (for the column heading).
        check: compare the results of td, the reference and the floors (see the module doc).
    """

    def __init__(self, title: str, *, reference: str = "upstream", check: bool = False) -> None:
        self.title = title
        self.reference = reference
        self.check = check
        self.cases: list[Case] = []

    def add(
        self,
        name: str,
        ours: Callable[[], object],
        theirs: Callable[[], object] | None,
        /,
        *,
        what: str = "",
        **floors: Callable[[], object],
    ) -> None:
        self.cases.append(Case(name, ours, theirs, dict(floors), what=what))

    def add_measured(
        self, name: str, measure_all: Callable[[float, int], dict[str, float]]
    ) -> None:
        """A case timed elsewhere (e.g. in fresh processes): ``measure_all(target, repeats)``
        returns seconds per call keyed ``"td"``, ``"ref"`` and any floor names."""
        case = Case(name, lambda: None, None)
        case.measure_all = measure_all  # type: ignore[attr-defined]
        self.cases.append(case)

    def run(
        self, *, pattern: str = "", target: float = 0.05, repeats: int = 7, save: bool = True
    ) -> list[Case]:
        selected = [c for c in self.cases if pattern in c.name]
        for case in selected:
            external = getattr(case, "measure_all", None)
            if external is not None:
                case.times = external(target, repeats)
            else:
                case.run(target=target, repeats=repeats, check=self.check)
            self._print_row(case)
        self._print_summary(selected)
        if save:
            self._save(selected, merge=bool(pattern))
        return selected

    def _print_row(self, case: Case) -> None:
        ratio = case.ratio
        parts = [
            f"{case.name:<40}",
            f"td {_fmt_time(case.times['td'])}",
            f"{self.reference} {_fmt_time(case.times['ref'])}" if "ref" in case.times else "",
            f"td/{self.reference} {ratio:5.2f}" if ratio is not None else "",
        ]
        for floor, floor_ratio in case.floor_ratios.items():
            parts.append(f"td/{floor} {floor_ratio:5.2f}")
        print("  ".join(p for p in parts if p), flush=True)

    def _print_summary(self, cases: list[Case]) -> None:
        ratios = [c.ratio for c in cases if c.ratio is not None]
        if not ratios:
            return
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(
            f"\n{self.title}: {len(ratios)} cases, td/{self.reference} "
            f"median {statistics.median(ratios):.2f}, geometric mean {geo:.2f}, "
            f"worst {max(ratios):.2f} ({max(cases, key=lambda c: c.ratio or 0).name})"
        )

    def _save(self, cases: list[Case], *, merge: bool = False) -> None:
        """Write the results; with ``merge`` (a filtered run) only the cases run are replaced."""
        RESULTS.mkdir(exist_ok=True)
        slug = self.title.lower().replace(" ", "_")
        path = RESULTS / f"{slug}.json"
        rows = [
            {
                "name": c.name,
                "times": c.times,
                "ratio": c.ratio,
                **({"what": c.what} if c.what else {}),
            }
            for c in cases
        ]
        if merge and path.exists():
            fresh = {row["name"]: row for row in rows}
            old = json.loads(path.read_text())["cases"]
            rows = [fresh.pop(row["name"], row) for row in old] + list(fresh.values())
        path.write_text(
            json.dumps({"title": self.title, "reference": self.reference, "cases": rows}, indent=1)
        )

    def main(self, argv: list[str] | None = None) -> list[Case]:
        """Command line: ``--filter SUBSTRING``, ``--quick`` (short samples, for smoke tests),
        ``--repeats N``, ``--list`` (the cases and what each measures, nothing run)."""
        parser = argparse.ArgumentParser(description=self.title)
        parser.add_argument("--filter", default="", help="only cases whose name contains this")
        parser.add_argument("--quick", action="store_true", help="short samples (smoke test)")
        parser.add_argument("--repeats", type=int, default=7)
        parser.add_argument(
            "--target", type=float, default=0.05, help="seconds per sample (default 0.05)"
        )
        parser.add_argument("--list", action="store_true", help="print what each case measures")
        args = parser.parse_args(argv)
        if args.list:
            for case in self.cases:
                print(f"{case.name:<40}  {case.what}")
            return []
        if args.quick:  # smoke numbers never replace measured ones in results/
            return self.run(pattern=args.filter, target=0.005, repeats=2, save=False)
        return self.run(pattern=args.filter, target=args.target, repeats=args.repeats)
