"""td-memmap against upstream tensordict, ``torch.save``/``torch.load`` and safetensors.

From the repository root::

    uv run python benchmarks/bench_memmap.py            # full run (a few minutes)
    uv run python benchmarks/bench_memmap.py --quick    # smoke test

Everything is written under one temporary folder, removed at exit. Cases:

- save and load of a 256 MB parameter TensorDict (fp32), in two layouts:
  ``flat``, one TensorDict of 256 leaves with dotted keys (a ``state_dict``), and
  ``nested``, 128 sub-TensorDicts of ``weight`` and ``bias`` (what
  ``TensorDict.from_module`` gives; packed into data files, one per writer thread,
  as every fresh save here is: see docs/memmap-format.md). ``torch.save``
  saves the same tensors as a flat dict; upstream saves the same TensorDict.
  safetensors only takes flat dicts, so for the nested layout its reference is
  what gives the same TensorDict back (``flatten_keys`` then ``save_file``;
  ``load_file`` then ``unflatten_keys``), with bare ``load_file`` as a floor.
  Loading is "open": every side maps the files (``torch.load(mmap=True)``,
  safetensors' ``load_file``, memory-mapped TensorDicts) except the plain
  ``torch.load`` floor.
- 256 MB in 8 large leaves (2 nested), saved into a fresh folder with td's default
  ``num_threads`` against safetensors' ``save_file`` and ``torch.save``, and opened
  (``load_memmap`` against ``load_file``).
- ``nn.Transformer``'s weights (``TensorDict.from_module``: 184 leaves, 177 MB):
  the anonymous memmap (no prefix, every leaf copied into shared memory) at
  ``num_threads`` 0, 8, 32 and td's default against upstream (upstream's memmap
  benchmark), a fresh-folder checkpoint and its load (and load then every page
  read) against safetensors, and the same save with ``num_threads=16`` and the
  default against ``torch.save(model.state_dict())`` (the seeds' headline).
- the same weights as a ``.tdz`` archive (saved again over the previous one, and
  loaded) and as a zarr store (opened and read whole), against upstream: the
  cases of upstream's memmap benchmark file for single-file saves.
- 1,000 leaves of 16 KB saved into a fresh folder against ``save_file`` and
  ``torch.save``, and loaded then read against ``load_file`` then read.
- random access: 3 random rows of a memory-mapped 100k-row data set (images
  and labels) against loading the whole data set file with ``torch.load``.

Two kinds of save, labelled in each case's name:

- ``re-save``: into the same folder every time (a checkpoint overwritten), for
  every side; td writes a new data file beside the old one, then removes
  the old one. td and upstream use 4 threads; torch.save and safetensors
  have none to use.
- ``fresh folder``: the previous copy (td's folder, upstream's, torch's or
  safetensors' file) is removed before each save, inside the timing on every
  side, and each side runs with its defaults: td's ``num_threads`` (threads, one
  per usable CPU up to 4, for large leaves only: the 8-leaf case; none for
  256 leaves of 1 MB), upstream's (0), torch.save and safetensors (one thread).

What a fresh save of many leaves measures on a given machine depends on its
file system: td creates one file per leaf (256, plus a folder and a metadata
file per sub-TensorDict in the nested layout), torch.save and safetensors one
file. On ext4 without a journal (the machine these numbers come from) every
file created scans the inodes freed in the last minutes, so that a create
costs 0.01 to 1 ms depending on what was deleted lately, by the benchmark
itself (each round removes the previous copy) or by anything else on the
disk. Each suite is one report with ratios td / reference (lower is better);
the plain ``torch.load`` (reading everything) is a floor of the torch suite,
printed as td / floor. Timings on a shared machine vary by 10-30% between runs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable

import tensordict as upstream
import torch
from harness import Suite
from safetensors.torch import load_file, save_file

from td_core import TensorDict
from td_memmap import default_threads

MB = 1 << 20
LAYERS = 128
ROWS = 256
COLS = 256 * MB // 4 // LAYERS // ROWS - 1  # weight + bias of a layer: 2 MB
DATASET_ROWS = 100_000
THREADS = 4

_tmp = tempfile.mkdtemp(prefix="bench_memmap_")
atexit.register(shutil.rmtree, _tmp, ignore_errors=True)


def _path(name: str) -> str:
    return f"{_tmp}/{name}"


def _fresh_savers(
    ours_td: TensorDict,
    flat: dict[str, torch.Tensor],
    folder: str,
    st_file: str,
    pt_file: str,
    pt_payload: object = None,
) -> tuple[Callable[[], object], Callable[[], None], Callable[[], None]]:
    """The 'fresh folder' savers of one case: td.memmap, save_file and torch.save.

    `ours_td` goes to `folder`, `flat` to `st_file` and `pt_payload` (default:
    `flat`) to `pt_file`. Each is written once here; each saver then removes its
    previous copy and writes it again (the removal inside the timing, on every
    side alike).
    """
    payload = flat if pt_payload is None else pt_payload
    ours_td.memmap(folder)
    save_file(flat, st_file)
    torch.save(payload, pt_file)

    def ours_fresh() -> object:
        shutil.rmtree(folder)
        return ours_td.memmap(folder)

    def st_fresh() -> None:
        os.remove(st_file)
        save_file(flat, st_file)

    def torch_fresh() -> None:
        os.remove(pt_file)
        torch.save(payload, pt_file)

    return ours_fresh, st_fresh, torch_fresh


def _params() -> dict[str, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return {
        f"layer{i}": {
            "weight": torch.randn(ROWS, COLS, generator=gen),
            "bias": torch.randn(ROWS, generator=gen),
        }
        for i in range(LAYERS)
    }


def _checkpoint_suites() -> tuple[Suite, Suite, Suite]:
    nested = _params()
    flat = {f"{layer}.{name}": t for layer, d in nested.items() for name, t in d.items()}
    total = sum(t.numel() * t.element_size() for t in flat.values())
    print(
        f"parameters: {total / MB:.0f} MB in {len(flat)} leaves; {THREADS} threads where asked, "
        f"td's default num_threads here: {default_threads()}"
    )

    vs_torch = Suite("memmap vs torch.save", reference="torch")
    vs_safetensors = Suite("memmap vs safetensors", reference="safetensors")
    vs_upstream = Suite("memmap vs upstream", reference="upstream")

    torch.save(flat, _path("state.pt"))
    save_file(flat, _path("state.safetensors"))

    def torch_save() -> None:
        torch.save(flat, _path("state.pt"))

    def st_save() -> None:
        save_file(flat, _path("state.safetensors"))

    def torch_save_fresh() -> None:
        os.remove(_path("state.pt"))
        torch.save(flat, _path("state.pt"))

    def st_save_fresh() -> None:
        os.remove(_path("state.safetensors"))
        save_file(flat, _path("state.safetensors"))

    def torch_load_mmap() -> object:
        return torch.load(_path("state.pt"), mmap=True, weights_only=True)

    def torch_load() -> object:
        return torch.load(_path("state.pt"), weights_only=True)

    def st_load() -> object:
        return load_file(_path("state.safetensors"))

    def st_save_nested() -> None:
        save_file(TensorDict(nested, batch_size=[]).flatten_keys(".").to_dict(), _path("n.st"))

    def st_save_nested_fresh() -> None:
        os.remove(_path("n.st"))
        st_save_nested()

    def st_load_nested() -> object:
        return TensorDict(load_file(_path("n.st")), batch_size=[]).unflatten_keys(".")

    saves: list[tuple[Suite, str, object, object, str]] = []  # added after the loads, see below
    for layout, source in (("flat", flat), ("nested", nested)):
        ours_td = TensorDict(source, batch_size=[])
        theirs_td = upstream.TensorDict(source, batch_size=[])
        ours_dir, theirs_dir = _path(f"td_{layout}"), _path(f"up_{layout}")
        ours_td.memmap(ours_dir, num_threads=THREADS)
        theirs_td.memmap(theirs_dir, num_threads=THREADS)
        leaves = "256 leaves" if layout == "flat" else "128 sub-TensorDicts of 2 leaves"
        leaves += ", packed into one data file"

        def ours_save(td: TensorDict = ours_td, prefix: str = ours_dir) -> object:
            return td.memmap(prefix, num_threads=THREADS)

        fresh_dir, up_fresh_dir = _path(f"td_fresh_{layout}"), _path(f"up_fresh_{layout}")
        ours_td.memmap(fresh_dir)
        theirs_td.memmap(up_fresh_dir)

        def ours_save_fresh(td: TensorDict = ours_td, prefix: str = fresh_dir) -> object:
            shutil.rmtree(prefix)
            return td.memmap(prefix)  # td's default num_threads

        def theirs_save_fresh(
            td: upstream.TensorDict = theirs_td, prefix: str = up_fresh_dir
        ) -> object:
            shutil.rmtree(prefix)
            return td.memmap(prefix)  # upstream's default num_threads (0)

        def theirs_save(td: upstream.TensorDict = theirs_td, prefix: str = theirs_dir) -> object:
            return td.memmap(prefix, num_threads=THREADS, existsok=True)

        def ours_load(prefix: str = ours_dir) -> object:
            return TensorDict.load_memmap(prefix)

        def theirs_load(prefix: str = theirs_dir) -> object:
            return upstream.TensorDict.load_memmap(prefix)

        resave = f"re-save 256MB {layout}, 4 threads"
        fresh = f"save 256MB {layout}, fresh folder, default threads"
        resave_what = (
            f"td.memmap({leaves}) over the previous save, 4 threads, against the same "
            "reference writing its file(s) again"
        )
        fresh_what = (
            f"remove the previous copy, then td.memmap({leaves}) with the default num_threads, "
            "against removing the reference's previous copy and saving again"
        )
        # per reference: its load, re-save and fresh-folder save, what the load case
        # measures, and the floors shown beside it
        Fn = Callable[[], object]
        references: list[tuple[Suite, Fn, Fn, Fn, str, dict[str, Fn]]] = [
            (
                vs_torch,
                torch_load_mmap,
                torch_save,
                torch_save_fresh,
                "load_memmap (maps every leaf) against torch.load(mmap=True); plain torch.load "
                "(reads everything) as a floor",
                {"torch_load_full": torch_load},
            )
        ]
        if layout == "flat":
            references.append(
                (
                    vs_safetensors,
                    st_load,
                    st_save,
                    st_save_fresh,
                    "load_memmap (maps the packed data file) against load_file (maps one)",
                    {},
                )
            )
        else:
            st_save_nested()
            references.append(
                (
                    vs_safetensors,
                    st_load_nested,
                    st_save_nested,
                    st_save_nested_fresh,
                    "load_memmap (one packed save of 128 sub-TensorDicts) against load_file then "
                    "unflatten_keys (the same TensorDict); bare load_file as a floor",
                    {"load_file_only": st_load},
                )
            )
        references.append(
            (
                vs_upstream,
                theirs_load,
                theirs_save,
                theirs_save_fresh,
                "load_memmap against upstream's load_memmap of its own save",
                {},
            )
        )
        for suite, load, save, save_fresh, what, floors in references:
            suite.add(f"load 256MB {layout}", ours_load, load, what=what, **floors)
            saves.append((suite, resave, ours_save, save, resave_what))
            saves.append((suite, fresh, ours_save_fresh, save_fresh, fresh_what))
    # Loads first: a save leaves hundreds of MB of dirty pages whose writeback, in
    # the background, slows whatever runs next (measured: loads 25% slower after a
    # save). main() also flushes them (os.sync) before each suite.
    for suite, name, ours, theirs, what in saves:
        suite.add(name, ours, theirs, what=what)
    return vs_torch, vs_safetensors, vs_upstream


def _few_leaves_cases(vs_torch: Suite, vs_safetensors: Suite) -> None:
    """256 MB in 8 leaves of 32 MB (2 of them in a sub-TensorDict): the large-leaf case.

    Fresh folder on every side (the previous copy removed inside the timing), td
    with the default `num_threads`; the metadata and data end up the same on
    disk as in the other cases (one file per leaf).
    """
    gen = torch.Generator().manual_seed(1)
    rows = 32 * MB // 4 // 256

    def leaf() -> torch.Tensor:
        return torch.randn(rows, 256, generator=gen)

    nested = {**{f"t{i}": leaf() for i in range(6)}, "sub": {"a": leaf(), "b": leaf()}}
    ours_td = TensorDict(nested, batch_size=[])
    flat = ours_td.flatten_keys(".").to_dict()
    folder, st_file, pt_file = _path("td_8"), _path("s8.safetensors"), _path("s8.pt")
    ours_fresh, st_fresh, torch_fresh = _fresh_savers(ours_td, flat, folder, st_file, pt_file)
    loaded = TensorDict.load_memmap(folder)
    assert all(torch.equal(loaded.get(tuple(k.split("."))), v) for k, v in flat.items())

    def ours_open() -> object:
        return TensorDict.load_memmap(folder)

    def st_open() -> object:
        return load_file(st_file)

    what = (
        "remove the previous copy, then td.memmap (8 leaves, 2 nested, packed) with the default "
        "num_threads, against removing the reference's file and saving again"
    )
    vs_safetensors.add(
        "load 256MB 8 leaves",
        ours_open,
        st_open,
        what="load_memmap (maps 8 files) against load_file (maps one)",
    )
    vs_safetensors.add(
        "save 256MB 8 leaves, fresh folder, default threads", ours_fresh, st_fresh, what=what
    )
    vs_torch.add(
        "save 256MB 8 leaves, fresh folder, default threads", ours_fresh, torch_fresh, what=what
    )


def _touch(tensors: object) -> int:
    """Read one element of every 4 KB page of every tensor: each page is faulted in.

    A `sum` over the whole leaves would time torch's reduction (and its OpenMP
    threads, which on a busy 2-CPU machine swing by 3x) more than the load.
    """
    total = 0
    for t in tensors:  # type: ignore[attr-defined]
        flat = torch.Tensor._make_subclass(torch.Tensor, t).reshape(-1)
        step = max(4096 // t.element_size(), 1)
        total += int(flat[::step].count_nonzero())
    return total


def _many_small_cases(vs_torch: Suite, vs_safetensors: Suite) -> None:
    """1,000 leaves of 16 KB (16 MB) in one TensorDict: the many-small-leaves checkpoint.

    td writes 1,000 files (one per leaf) where torch.save and safetensors write
    one: this is the cost of file creation, not of bytes (see the module doc).
    """
    gen = torch.Generator().manual_seed(2)
    ours_td = TensorDict({f"l{i}": torch.randn(64, 64, generator=gen) for i in range(1000)}, [])
    flat = ours_td.to_dict()
    folder, st_file, pt_file = _path("td_small"), _path("small.safetensors"), _path("small.pt")
    ours_fresh, st_fresh, torch_fresh = _fresh_savers(ours_td, flat, folder, st_file, pt_file)

    what = (
        "remove the previous copy, then td.memmap (1,000 leaves of 16 KB, packed) with the default "
        "num_threads, against removing the reference's file and saving again"
    )
    vs_safetensors.add(
        "load+read 1000 leaves 16MB",
        lambda: _touch(TensorDict.load_memmap(folder).values()),
        lambda: _touch(load_file(st_file).values()),
        what="load_memmap then every page of every leaf read, against load_file then the same",
    )
    vs_safetensors.add("save 1000 leaves 16MB, fresh folder", ours_fresh, st_fresh, what=what)
    vs_torch.add("save 1000 leaves 16MB, fresh folder", ours_fresh, torch_fresh, what=what)


def _transformer_cases(vs_upstream: Suite, vs_safetensors: Suite, vs_torch: Suite) -> None:
    """`TensorDict.from_module(nn.Transformer())`: 184 leaves, 177 MB, mostly of 1-4 MB.

    Upstream's memmap benchmark: the anonymous memmap (no prefix: every leaf copied
    into shared memory) at several `num_threads`; a checkpoint of the same weights
    into a fresh folder against safetensors' `save_file` of the flat dict, and
    (the seeds' headline, with `num_threads=16` and the default) against
    `torch.save(model.state_dict())`; its load, then every page read.
    """
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nn.Transformer's note on nested tensors
        model = torch.nn.Transformer()
    ours_td = TensorDict.from_module(model)
    theirs_td = upstream.TensorDict.from_module(model)
    for threads in (0, 8, 32, None):
        label = "default" if threads is None else str(threads)
        vs_upstream.add(
            f"anonymous memmap Transformer, num_threads={label}",
            lambda n=threads: ours_td.memmap(num_threads=n),
            lambda n=threads: theirs_td.memmap(num_threads=n or 0),
            what="TensorDict.from_module(nn.Transformer()).memmap(num_threads=N) without a "
            "prefix (184 leaves, 177 MB into shared memory); upstream's default is 0",
        )
    _single_file_cases(vs_upstream, ours_td, theirs_td)
    flat = {k: v.detach().clone() for k, v in ours_td.flatten_keys(".").items()}
    folder, st_file = _path("td_transformer"), _path("transformer.safetensors")
    ours_fresh, st_fresh, torch_fresh = _fresh_savers(
        ours_td, flat, folder, st_file, _path("transformer.pt"), model.state_dict()
    )

    vs_safetensors.add(
        "save Transformer 177MB 184 leaves, fresh folder",
        ours_fresh,
        st_fresh,
        what="remove the previous copy, then TensorDict.from_module(nn.Transformer())"
        ".memmap(folder) with the default num_threads, against save_file of the flat dict",
    )
    vs_safetensors.add(
        "load Transformer 177MB 184 leaves",
        lambda: TensorDict.load_memmap(folder),
        lambda: load_file(st_file),
        what="load_memmap of the Transformer checkpoint against load_file",
    )
    vs_safetensors.add(
        "load+read Transformer 177MB 184 leaves",
        lambda: _touch(TensorDict.load_memmap(folder).values(True, True)),
        lambda: _touch(load_file(st_file).values()),
        what="load_memmap then every page of every leaf read, against load_file then the same",
    )
    for threads in (16, None):
        label = "default" if threads is None else str(threads)

        def ours(n: int | None = threads) -> object:
            shutil.rmtree(folder)
            return ours_td.memmap(folder, num_threads=n)

        vs_torch.add(
            f"save Transformer 177MB, fresh folder, num_threads={label}",
            ours,
            torch_fresh,
            what="the seeds' headline: remove the previous copy, then TensorDict.from_module("
            f"nn.Transformer()).memmap(folder, num_threads={label}), against removing the file "
            "and torch.save(model.state_dict())",
        )


def _single_file_cases(vs_upstream: Suite, ours_td: TensorDict, theirs_td: object) -> None:
    """The Transformer as a `.tdz` archive and as a zarr store, as upstream's memmap file
    times them: saved again over the previous archive, loaded; a zarr store read whole."""
    ours_tdz, theirs_tdz = _path("td_transformer.tdz"), _path("up_transformer.tdz")
    vs_upstream.add(
        "save Transformer archive over the previous one",
        lambda: ours_td.save(ours_tdz, num_threads=32),
        lambda: theirs_td.save(theirs_tdz, num_threads=32),  # type: ignore[attr-defined]
        what="TensorDict.from_module(nn.Transformer()).save('model.tdz', num_threads=32), "
        "the archive of the previous call replaced (upstream's test_serialize_model_archive)",
    )
    vs_upstream.add(
        "load Transformer archive",
        lambda: TensorDict.load_memmap(ours_tdz),
        lambda: upstream.TensorDict.load_memmap(theirs_tdz),
        what="load_memmap of that archive: 401 entries, 109 metadata files "
        "(upstream's test_load_archive)",
    )
    try:
        import zarr  # noqa: F401  # zarr>=3.1 needs Python>=3.11
    except ImportError:
        print("zarr is not installed: the zarr case is left out")
        return
    ours_zarr, theirs_zarr = _path("td_transformer.zarr"), _path("up_transformer.zarr")
    ours_td.data.to_zarr(ours_zarr)  # parameters: their data, as upstream's benchmark
    theirs_td.data.to_zarr(theirs_zarr)  # type: ignore[attr-defined]
    vs_upstream.add(
        "open and read Transformer zarr store",
        lambda: TensorDict.from_zarr(ours_zarr).to_tensordict(),
        lambda: upstream.TensorDict.from_zarr(theirs_zarr).to_tensordict(),
        what="TensorDict.from_zarr(store).to_tensordict(): open the store (109 groups, 184 "
        "arrays) and read every array (upstream's test_load_zarr)",
    )


def _dataset_suite(vs_upstream: Suite) -> Suite:
    proto = TensorDict(
        {
            "images": torch.zeros(3, 16, 16, dtype=torch.uint8),
            "labels": torch.zeros((), dtype=torch.int64),
        },
        batch_size=[],
    ).expand(DATASET_ROWS)
    data = proto.memmap_like(_path("dataset"), num_threads=THREADS)
    gen = torch.Generator().manual_seed(0)
    data["images"].copy_(
        torch.randint(0, 255, (DATASET_ROWS, 3, 16, 16), dtype=torch.uint8, generator=gen)
    )
    data["labels"].copy_(torch.arange(DATASET_ROWS))
    torch.save(
        {"images": data["images"].clone(), "labels": data["labels"].clone()}, _path("dataset.pt")
    )
    up_data = upstream.TensorDict(
        {"images": data["images"].clone(), "labels": data["labels"].clone()},
        batch_size=[DATASET_ROWS],
    ).memmap(_path("dataset_up"))
    rows = torch.tensor([1, 10_000, 50_000])

    def ours_rows() -> object:
        return data[rows]

    def theirs_rows() -> object:
        return up_data[rows]

    def load_whole() -> object:
        return torch.load(_path("dataset.pt"), weights_only=True)

    suite = Suite("memmap random access", reference="load_whole_file")
    suite.add(
        "3 random rows of 100k",
        ours_rows,
        load_whole,
        what="index 3 rows of a memory-mapped data set against torch.load of the whole file",
    )
    vs_upstream.add(
        "3 random rows of 100k",
        ours_rows,
        theirs_rows,
        what="index 3 rows of a memory-mapped data set, td against upstream",
    )
    return suite


def main() -> None:
    vs_torch, vs_safetensors, vs_upstream = _checkpoint_suites()
    _few_leaves_cases(vs_torch, vs_safetensors)
    _many_small_cases(vs_torch, vs_safetensors)
    _transformer_cases(vs_upstream, vs_safetensors, vs_torch)
    access = _dataset_suite(vs_upstream)
    for suite in (vs_torch, vs_safetensors, vs_upstream, access):
        os.sync()
        print(f"\n== {suite.title}")
        cases = suite.main()
    for case in cases:  # the ratio is too small for the report's two decimals
        speedup = case.times["ref"] / case.times["td"]
        print(f"{case.name}: memory-mapped rows are {speedup:.0f}x faster than loading the file")


if __name__ == "__main__":
    main()
