"""A tour of td: the five packages at work on a generated image data set.

    uv run python docs/examples/tour.py            # 100k rows, 300 training steps
    uv run python docs/examples/tour.py --quick    # a small run (CI)
    uv run python docs/examples/tour.py --out DIR  # keep the data set and checkpoint in DIR

1. generate labelled images and save them with td-memmap (one file per entry);
2. find repeated images with td-query's `QueryModule` (content hashing);
3. train a td-nn ensemble with a td-distributions head on random batches read from disk
   with `torch.optim.Adam`, and plot the loss and accuracy over the steps with matplotlib
   into a PNG (`training.png` in DIR, or `td-tour-training.png` in the temp folder when the
   files are not kept);
4. checkpoint the parameters with memmap and load them into a fresh model.

Progress bars (tqdm) show the stages that take a while, when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch
import torch.nn.functional as F
from matplotlib.figure import (
    Figure,
)  # a Figure saves PNGs with the Agg backend: no GUI, no pyplot state
from torch import nn
from tqdm import tqdm

import td_core
import td_distributions
import td_memmap
import td_nn
import td_query
from td_core import TensorDict
from td_distributions import OneHotCategorical
from td_nn import (
    EnsembleModule,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_interaction_type,
)
from td_query import QueryModule

CLASSES, SIDE, CHUNK, BATCH, MEMBERS = 10, 16, 10_000, 256, 3
EVALS = 20  # held-out accuracy is measured this many times during training
SUMMARY: list[tuple[str, float, str]] = []  # (stage, seconds, outcome)
T = TypeVar("T")


@contextmanager
def stage(name: str, title: str) -> Iterator[list[str]]:
    """Print a stage's title; record its time and the outcome the body appends."""
    print(f"\n{len(SUMMARY) + 1}. {title}")
    outcome: list[str] = []
    start = time.perf_counter()
    yield outcome
    SUMMARY.append((name, time.perf_counter() - start, ", ".join(outcome)))


def progress(items: Iterable[T], what: str, unit: str) -> tqdm[T]:
    """`items` with a progress bar on stderr; none when stderr is not a terminal (CI logs)."""
    return tqdm(items, desc=f"   {what}", unit=unit, disable=None)


# --------------------------------------------------------------------------- data
def make_rows(start: int, stop: int, prototypes: torch.Tensor) -> TensorDict:
    """Rows ``start:stop``: a noisy class prototype per image, and about 1 image in 10 repeated."""
    gen = torch.Generator().manual_seed(start)
    n = stop - start
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    noise = torch.randn(n, 1, SIDE, SIDE, generator=gen)
    images = (128 + 25 * prototypes[labels] + 70 * noise).clamp(0, 255).to(torch.uint8)
    repeat = torch.rand(n, generator=gen) < 0.1  # a camera that sometimes sends a frame twice
    source = torch.randint(0, n, (n,), generator=gen)[repeat]
    images[repeat], labels[repeat] = images[source], labels[source]
    # a TensorDict: entries of any shape sharing the leading batch dims [n]
    return TensorDict(images=images, labels=labels, batch_size=[n])


def generate_and_save(rows: int, folder: Path) -> str:
    prototypes = F.interpolate(torch.randn(CLASSES, 1, 4, 4), size=SIDE, mode="bilinear")
    # One row of zeros, expanded to `rows` (no memory), then memmap_like: a folder with one
    # file per entry, each of the full size but sparse, so nothing is written yet.
    template = TensorDict(
        images=torch.zeros(1, SIDE, SIDE, dtype=torch.uint8),
        labels=torch.zeros((), dtype=torch.long),
    )
    store = template.expand(rows).memmap_like(folder)
    # Fill it chunk by chunk: indexing a memory-mapped TensorDict writes through to the files.
    for start in progress(range(0, rows, CHUNK), "writing chunks", "chunk"):
        stop = min(start + CHUNK, rows)
        store[start:stop] = make_rows(start, stop, prototypes)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
    print(f"   {rows:,} rows saved in {folder} ({size:.1f} MB)")
    return f"{rows:,} rows, {size:.1f} MB"


def deduplicate(data: TensorDict) -> torch.Tensor:
    """Row indices of the first copy of every distinct image."""
    # QueryModule hashes each row's "images" (SipHash, vectorised) and maps every new hash
    # to the next free index: equal images get equal ids, across calls too.
    query = QueryModule(in_keys=["images"], index_key="image_id")
    chunks = progress(data.split(CHUNK), "hashing chunks", "chunk")
    ids = torch.cat([query(chunk.select("images"))["image_id"] for chunk in chunks])
    distinct = int(ids.max()) + 1
    rows = torch.arange(len(ids))
    first = torch.full((distinct,), len(ids)).scatter_reduce_(0, ids, rows, "amin")
    print(f"   {distinct:,} distinct images; {len(ids) - distinct:,} repeated rows are left out")
    return first


# --------------------------------------------------------------------------- model
def make_model() -> ProbabilisticTensorDictSequential:
    """Images in, a vote of MEMBERS classifiers out; modules read and write by key."""
    net = nn.Sequential(nn.Linear(SIDE * SIDE, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    return ProbabilisticTensorDictSequential(
        # uint8 images -> float features
        TensorDictModule(
            lambda im: im.float().div(255).flatten(-3), in_keys=["images"], out_keys=["x"]
        ),
        # MEMBERS re-initialised copies of the net, run at once with torch.vmap: outputs
        # (and the TensorDict) get a leading dim of size MEMBERS
        EnsembleModule(
            TensorDictModule(net, in_keys=["x"], out_keys=["logits"]), num_copies=MEMBERS
        ),
        # a distribution over one-hot labels built from "logits"; a call writes "label"
        ProbabilisticTensorDictModule(
            in_keys=["logits"], out_keys=["label"], distribution_class=OneHotCategorical
        ),
    )


def predict(model: ProbabilisticTensorDictSequential, batch: TensorDict) -> torch.Tensor:
    """Every member's vote: one-hot labels of shape [MEMBERS, len(batch), CLASSES]."""
    # the most likely label, not a random sample; no gradients are needed to predict
    with set_interaction_type("mode"), torch.no_grad():
        return model(batch.copy())["label"]


def accuracy(votes: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of rows whose majority vote (over the members, dim 0) is the label."""
    return (votes.sum(0).argmax(-1) == labels).float().mean().item()


def train(
    data: TensorDict, train_rows: torch.Tensor, steps: int, test: TensorDict
) -> tuple[ProbabilisticTensorDictSequential, dict[str, list[float]]]:
    """Train on random batches; record the loss and accuracy of every step and, EVALS times,
    the accuracy on the held-out `test` rows."""
    model = make_model()
    history: dict[str, list[float]] = {
        "loss": [], "batch_accuracy": [], "eval_step": [], "test_accuracy": []
    }  # fmt: skip
    # the ensemble's parameters are registered (TensorDictParams), so torch.optim sees them.
    # torch's first optimizer imports torch._dynamo (add_param_group is wrapped to keep
    # Dynamo out): seconds, once per process, so the tour shows what it costs
    start = time.perf_counter()
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)
    print(
        f"   torch.optim.Adam ready in {time.perf_counter() - start:.1f} s (first use loads torch._dynamo)"
    )
    every = max(steps // EVALS, 1)
    bar = progress(range(steps + 1), "training", "step")
    for step in bar:
        # advanced indexing reads only the rows asked for from the files
        batch = data[train_rows[torch.randint(len(train_rows), (BATCH,))]]
        dist = model.get_dist(batch)  # runs the members before the head
        loss = -dist.log_prob(F.one_hot(batch["labels"], CLASSES)).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        history["loss"].append(loss.item())
        # each member's most likely class for each row, one-hot: [MEMBERS, BATCH, CLASSES]
        votes = F.one_hot(dist.logits.detach().argmax(-1), CLASSES)
        history["batch_accuracy"].append(accuracy(votes, batch["labels"]))
        if step % every == 0 or step == steps:
            history["eval_step"].append(step)
            history["test_accuracy"].append(accuracy(predict(model, test), test["labels"]))
            bar.set_postfix(loss=f"{history['loss'][-1]:.3f}")
        if step % max(steps // 6, 1) == 0:
            tqdm.write(f"   step {step:4d}  loss {history['loss'][-1]:.4f}")
    return model, history


def plot(history: dict[str, list[float]], path: Path) -> Path:
    """Loss and accuracy over the steps, side by side, as a PNG file."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    loss_ax, acc_ax = fig.subplots(1, 2)
    loss_ax.plot(history["loss"], color="tab:blue")
    loss_ax.set(title="loss over the training steps", xlabel="step", ylabel="loss")
    acc_ax.plot(history["batch_accuracy"], color="tab:blue", alpha=0.6, label="training batch")
    acc_ax.plot(
        history["eval_step"], history["test_accuracy"], "o-", color="tab:orange", label="held-out"
    )
    acc_ax.set(title="accuracy", xlabel="step", ylim=(0, 1))
    acc_ax.legend(loc="lower right")
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
    fig.savefig(path, dpi=100)
    return path


def evaluate(model: ProbabilisticTensorDictSequential, test: TensorDict) -> float:
    votes, labels = predict(model, test), test["labels"]
    ensemble = accuracy(votes, labels)  # majority vote
    members = ", ".join(f"{m:.1%}" for m in (votes.argmax(-1) == labels).float().mean(-1))
    print(f"   accuracy on {len(labels):,} held-out images: {ensemble:.1%} (members: {members})")
    return ensemble


def checkpoint(model: ProbabilisticTensorDictSequential, folder: Path, test: TensorDict) -> int:
    # from_module: every parameter and buffer, nested like the module tree
    params = TensorDict.from_module(model)
    params.memmap(folder, num_threads=2)  # one raw file per tensor, written in parallel
    loaded = TensorDict.load_memmap(folder)  # maps the files: nothing is read yet
    fresh = make_model()  # new random weights
    loaded.to_module(fresh, inplace=True)  # copy the checkpoint into its parameters
    same = torch.equal(predict(fresh, test), predict(model, test))
    count = len(list(loaded.keys(include_nested=True, leaves_only=True)))
    print(f"   {count} tensors saved to {folder}, loaded into a fresh model")
    print(f"   same predictions as the trained model: {same}")
    if not same:
        raise SystemExit("the reloaded model predicts differently")
    return count


# --------------------------------------------------------------------------- tour
def tour(rows: int, steps: int, out: Path, plot_path: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a model this small runs fastest on one thread
    versions = ", ".join(
        f"{m.__name__} {m.__version__}"
        for m in (td_core, td_nn, td_distributions, td_memmap, td_query)
    )
    print(f"td tour: {rows:,} rows, {steps} training steps, files in {out}")
    print(f"   {versions}, torch {torch.__version__}")

    with stage("data set", "generate a data set and save it (td-core, td-memmap)") as outcome:
        outcome.append(generate_and_save(rows, out / "dataset"))

    with stage("dedup", "load it back and find repeated images (td-memmap, td-query)") as outcome:
        data = TensorDict.load_memmap(out / "dataset")  # maps the files: reads nothing yet
        print(f"   {data!r}".replace("\n", "\n   "))
        distinct = deduplicate(data)
        outcome.append(f"{len(distinct):,} distinct images")

    with stage(
        "training", "train an ensemble with a probabilistic head (td-nn, td-distributions)"
    ) as outcome:
        distinct = distinct[torch.randperm(len(distinct))]
        held_out = min(2_000, len(distinct) // 5)
        test, train_rows = data[distinct[:held_out]], distinct[held_out:]
        model, history = train(data, train_rows, steps, test)
        final = evaluate(model, test)
        print(f"   loss and accuracy over the steps, drawn in {plot(history, plot_path)}")
        losses = history["loss"]
        outcome += [
            f"{steps} steps",
            f"loss {losses[0]:.2f} -> {losses[-1]:.2f}",
            f"accuracy {final:.1%}",
        ]

    with stage(
        "checkpoint", "checkpoint the parameters and reload them (td-core, td-memmap)"
    ) as outcome:
        outcome.append(f"{checkpoint(model, out / 'model', test)} tensors saved and reloaded")

    print("\nsummary")
    for name, seconds, what in SUMMARY:
        print(f"   {seconds:6.2f} s  {name:<11} {what}")
    print(f"   {sum(seconds for _, seconds, _ in SUMMARY):6.2f} s  total")
    print(f"   training curves: {plot_path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the data set")
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    parser.add_argument(
        "--out", type=Path, help="keep the files in this folder (default: a temp dir)"
    )
    parser.add_argument("--quick", action="store_true", help="5,000 rows and 60 steps (CI)")
    args = parser.parse_args()
    rows, steps = (5_000, 60) if args.quick else (args.rows, args.steps)
    if rows < 10 or steps < 1:
        parser.error("--rows must be >= 10 and --steps >= 1")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        tour(rows, steps, args.out, args.out / "training.png")
    else:
        # the files go in a temp folder removed at the end; the plot stays beside it
        plot_path = Path(tempfile.gettempdir()) / "td-tour-training.png"
        with tempfile.TemporaryDirectory(prefix="td-tour-") as tmp:
            tour(rows, steps, Path(tmp), plot_path)


if __name__ == "__main__":
    main()
