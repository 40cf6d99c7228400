"""MkDocs hooks of the td documentation: local code only, nothing is fetched.

1. The benchmark page. The marker ``<!-- td:benchmark-results -->`` in
   ``docs/benchmarks.md`` is replaced by one table per benchmark suite, read from
   ``benchmarks/results/<stem>.json`` (written by ``uv run python
   benchmarks/bench_*.py``) or, when a suite has not been run on this machine,
   from the committed snapshot in ``docs/benchmark-data/``. A suite found in
   neither is listed as missing, with the command that produces it. The marker
   ``<!-- td:benchmark-plot -->`` becomes a chart of the ratios per operation family
   (suite), drawn with matplotlib during the build as the generated page asset
   ``assets/benchmark-ratios.svg``.
2. API completeness. Every name in a package's ``__all__`` must have an anchor on
   its ``api/<module>.md`` page; a missing one is logged as an error, which fails
   the strict build even under ``--quiet`` (that hides warnings from ``--strict``).

Run as a script to refresh the snapshot from the current results::

    uv run python docs/_hooks/td_docs.py --snapshot
"""

from __future__ import annotations

import ast
import io
import json
import logging
import math
import pathlib
import shutil
import statistics
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
SNAPSHOT = ROOT / "docs" / "benchmark-data"
PLOT_URI = "assets/benchmark-ratios.svg"
TABLES_MARKER = "<!-- td:benchmark-results -->"
PLOT_MARKER = "<!-- td:benchmark-plot -->"

# Every results file the docs expect: stem -> (script that writes it, what it compares).
SUITES: dict[str, tuple[str, str]] = {
    "core": ("bench_core.py", "td-core against upstream tensordict"),
    "nn": ("bench_nn.py", "td-nn module call overhead against upstream tensordict.nn"),
    "distributions": ("bench_distributions.py", "td-distributions against upstream"),
    "memmap_vs_upstream": ("bench_memmap.py", "td-memmap save/load against upstream memmap"),
    "memmap_vs_torch.save": ("bench_memmap.py", "td-memmap against torch.save/torch.load"),
    "memmap_vs_safetensors": ("bench_memmap.py", "td-memmap against safetensors"),
    "memmap_random_access": ("bench_memmap.py", "reading rows of a memory-mapped data set"),
    "modules": (
        "bench_modules.py",
        "lazy stacks, module parameters, vmap, map: td-core against upstream",
    ),
    "query": ("bench_query.py", "td-query against torchrl"),
    "consolidate": (
        "bench_consolidate.py",
        "consolidated TensorDicts (consolidate, pickle, to(device)) and DataLoader epochs "
        "over a memory-mapped data set: td-core against upstream",
    ),
    "pointwise": (
        "bench_pointwise.py",
        "pointwise math and casts over 100 leaves: td-core against upstream and the pytree floor",
    ),
    "reductions": (
        "bench_reductions.py",
        "reductions over 100 leaves: td-core against upstream and the pytree floor",
    ),
    "masked": (
        "bench_masked.py",
        "masked and indexed reads and writes: td-core against upstream and the pytree floor",
    ),
}

log = logging.getLogger("mkdocs.hooks.td_docs")


# ----------------------------------------------------------------- benchmark data
def _read(path: pathlib.Path) -> dict[str, Any] | None:
    """A results file, or None if it is not a readable one (say, half-written by a run)."""
    try:
        data = json.loads(path.read_text())
        ok = all(
            isinstance(case["name"], str) and isinstance(case["times"]["td"], (int, float))
            for case in data["cases"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if ok else None


def load_suites() -> tuple[list[dict[str, Any]], list[str]]:
    """The suites found (each with its ``source``) and the stems of the missing ones."""
    found, missing = [], []
    extra = {p.stem for folder in (RESULTS, SNAPSHOT) for p in folder.glob("*.json")} - set(SUITES)
    for stem in [*SUITES, *sorted(extra)]:
        for folder, source in ((RESULTS, "local run"), (SNAPSHOT, "snapshot")):
            data = _read(folder / f"{stem}.json")
            if data is not None:
                path = (folder / f"{stem}.json").resolve()
                rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
                data.update(stem=stem, source=source, path=rel)
                found.append(data)
                break
        else:
            missing.append(stem)
    return found, missing


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _md(text: str) -> str:
    """``text`` as literal Markdown table-cell text."""
    for char in "\\`*_[]>|":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;")


def _cases(suite: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in suite.get("cases", []) if (c.get("ratio") or 0) > 0]


def tables_markdown(found: list[dict[str, Any]], missing: list[str]) -> str:
    lines: list[str] = []
    for suite in found:
        ref = suite.get("reference", "reference")
        script, what = SUITES.get(suite["stem"], ("bench_*.py", "Other results"))
        lines += [
            f"### {suite.get('title', suite['stem'])}",
            "",
            f"{what}. Source: `{suite['path']}` ({suite['source']}), "
            f"written by `uv run python benchmarks/{script}`.",
            "",
            f"| case | td | {ref} | td / {ref} | other timings |",
            "|---|---:|---:|---:|---|",
        ]
        for case in suite.get("cases", []):
            times = case.get("times", {})
            ratio = case.get("ratio")
            others = ", ".join(
                f"{k}: {_fmt_time(v)}" for k, v in times.items() if k not in ("td", "ref")
            )
            lines.append(
                "| {} | {} | {} | {} | {} |".format(
                    _md(case["name"]),
                    _fmt_time(times["td"]) if "td" in times else "-",
                    _fmt_time(times["ref"]) if "ref" in times else "-",
                    f"**{ratio:.2f}**" if ratio is not None else "-",
                    others or "",
                )
            )
        ratios = [c["ratio"] for c in _cases(suite)]
        if ratios:
            geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            lines += [
                "",
                f"{len(ratios)} cases: median ratio {statistics.median(ratios):.2f}, "
                f"geometric mean {geo:.2f}.",
            ]
        lines.append("")
    if missing:
        lines += ["### Missing results", ""]
        lines += [
            f"- `{stem}.json`: not in `benchmarks/results/` nor in the snapshot (or not "
            f"readable); run `uv run python benchmarks/{SUITES.get(stem, ('bench_*.py',))[0]}`."
            for stem in missing
        ]
        lines.append("")
    if not found:
        lines += ["No benchmark results were found, so there is no table and no plot.", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------- the plot
def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def ratios_svg(found: list[dict[str, Any]]) -> str:
    """td / reference time per operation family (one suite each), drawn with matplotlib.

    A family's bar is the geometric mean of its cases' ratios; each dot is one case.
    The x axis is logarithmic and the bars grow from 1: left of 1, td is faster.
    """
    from matplotlib.figure import Figure  # Figure renders with Agg/SVG: no GUI, no pyplot

    families = [(s.get("title", s["stem"]), [c["ratio"] for c in _cases(s)]) for s in found]
    families = [(name, ratios) for name, ratios in families if ratios]
    fig = Figure(figsize=(8, 0.45 * max(len(families), 1) + 1.4), layout="constrained")
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.axvline(1.0, color="#333", linewidth=1)
    for row, (_, ratios) in enumerate(families):
        mean = geometric_mean(ratios)
        color = "#2e7d32" if mean <= 1 else "#c62828"
        ax.barh(row, mean - 1, left=1, height=0.6, color=color, alpha=0.35)
        jitter = [row + 0.2 * math.sin(7.0 * i) for i in range(len(ratios))]
        dots = ["#2e7d32" if r <= 1 else "#c62828" for r in ratios]  # each case by its own side
        ax.scatter(ratios, jitter, s=10, c=dots, zorder=3)
        ax.annotate(
            f"{mean:.3g} ({len(ratios)} cases)", (max(ratios), row), xytext=(6, -4),
            textcoords="offset points", fontsize=8, color="#555",
        )  # fmt: skip
    ax.set_yticks(range(len(families)), [name for name, _ in families])
    ax.invert_yaxis()
    ax.set_xlabel("time of td / time of the reference (log scale; left of 1: td is faster)")
    ax.set_title("geometric mean per operation family (bar) and each case (dots)", fontsize=10)
    ax.grid(axis="x", which="both", alpha=0.3)
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})  # no date: the same data, same file
    return out.getvalue()


# -------------------------------------------------------------- API completeness
def public_names(module: str) -> list[str]:
    """``__all__`` of a package, read from its ``__init__.py`` without importing it."""
    init = ROOT / "packages" / module.replace("_", "-") / "src" / module / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{init} has no __all__")


# ------------------------------------------------------------------ MkDocs hooks
def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    found, _ = load_suites()
    files.append(File.generated(config, PLOT_URI, content=ratios_svg(found)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if TABLES_MARKER not in markdown and PLOT_MARKER not in markdown:
        return markdown
    found, missing = load_suites()
    depth = page.file.src_uri.count("/")  # links are relative to the page's source file
    plot = f"![td / reference ratio per benchmark case]({'../' * depth}{PLOT_URI})"
    return markdown.replace(TABLES_MARKER, tables_markdown(found, missing)).replace(
        PLOT_MARKER, plot if found else "*(no results: no plot)*"
    )


def on_page_content(html_text: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    if src.startswith("api/") and src.endswith(".md"):
        module = src[len("api/") : -len(".md")]
        missing = [n for n in public_names(module) if f'id="{module}.{n}"' not in html_text]
        if missing:
            log.error(
                "%s: no API entry for %s (in %s.__all__): add a `::: %s.<name>` line",
                src,
                missing,
                module,
                module,
            )
    return html_text


# ------------------------------------------------------------------------ script
def snapshot() -> None:
    """Copy ``benchmarks/results/*.json`` into the docs snapshot (to be committed)."""
    SNAPSHOT.mkdir(exist_ok=True)
    for path in sorted(RESULTS.glob("*.json")):
        shutil.copyfile(path, SNAPSHOT / path.name)
        print(f"copied {path.relative_to(ROOT)}")
    for stem, (script, _) in SUITES.items():
        if not (RESULTS / f"{stem}.json").is_file():
            print(f"missing {stem}.json: run uv run python benchmarks/{script}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--snapshot"]:
        sys.exit("usage: python docs/_hooks/td_docs.py --snapshot")
    snapshot()
