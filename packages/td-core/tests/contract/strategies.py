"""Hypothesis strategies that build any kind of td container with random shapes and dtypes.

`containers()` draws one container: a dense TensorDict (flat or nested), a lazy
stack along any batch dim (its members' leaves may differ in trailing shape: a
ragged stack), a tensorclass, a `TensorDictParams`, a sub-view (`td[i]` or
`td["nested"]`) or a memory-mapped TensorDict (when td-memmap is installed).
Every leaf is drawn with its own dtype and trailing shape; values are small
integers (exact in every dtype, so sums and means compare without rounding noise).

```python
@given(containers())
def test_clone(td):
    assert_same_td(td.clone(), td)
```
"""

from __future__ import annotations

import importlib.util
import tempfile
from typing import Any

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import td_core

__all__ = ["KINDS", "containers", "batch_sizes", "leaf_specs", "assert_same_td", "ragged"]

KINDS = (
    "dense",
    "nested",
    "lazy",
    "ragged",
    "tensorclass",
    "params",
    "view_index",
    "view_key",
)
if importlib.util.find_spec("td_memmap") is not None:
    KINDS = (*KINDS, "memmap")

DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool)
FLOATS = (torch.float32, torch.float64)
_MEMMAP_ROOT: tempfile.TemporaryDirectory[str] | None = None


@td_core.tensorclass
class Pair:
    """The tensorclass the strategies build: two tensor fields and a nested one."""

    a: torch.Tensor
    b: torch.Tensor
    nested: Any


def quick(max_examples: int) -> settings:
    """Hypothesis settings of the contract suite: few examples, no deadline, nothing on disk."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def batch_sizes(min_dims: int = 1, max_dims: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    """Batch sizes of `min_dims` to `max_dims` dims, each of size 1 to 4."""
    return st.lists(st.integers(1, 4), min_size=min_dims, max_size=max_dims).map(tuple)


def leaf_specs(dtypes: tuple[torch.dtype, ...] = DTYPES) -> st.SearchStrategy[Any]:
    """`(dtype, trailing shape)` of one leaf: up to two feature dims of size 1 to 3."""
    return st.tuples(st.sampled_from(dtypes), st.lists(st.integers(1, 3), max_size=2).map(tuple))


def _tensor(spec: Any, batch: tuple[int, ...], seed: int) -> torch.Tensor:
    dtype, feature = spec
    g = torch.Generator().manual_seed(seed)
    values = torch.randint(-4, 5, (*batch, *feature), generator=g)
    return values > 0 if dtype is torch.bool else values.to(dtype)


@st.composite
def _entries(
    draw: st.DrawFn, batch: tuple[int, ...], dtypes: tuple[torch.dtype, ...], nested: bool
) -> dict[str, Any]:
    """A dict of one to three leaves (`l0`, `l1`, ...), with a `nested` dict if asked."""
    specs = draw(st.lists(leaf_specs(dtypes), min_size=1, max_size=3))
    seed = draw(st.integers(0, 2**16))
    out: dict[str, Any] = {f"l{i}": _tensor(s, batch, seed + i) for i, s in enumerate(specs)}
    if nested:
        out["nested"] = draw(_entries(batch, dtypes, False))
    return out


def _memmapped(td: td_core.TensorDict) -> td_core.TensorDict:
    global _MEMMAP_ROOT
    if _MEMMAP_ROOT is None:
        _MEMMAP_ROOT = tempfile.TemporaryDirectory(prefix="td-strategies-")
    folder = tempfile.mkdtemp(dir=_MEMMAP_ROOT.name)
    td.memmap(folder)
    return td_core.TensorDict.load_memmap(folder)


@st.composite
def _lazy(draw: st.DrawFn, batch: tuple[int, ...], ragged: bool) -> Any:
    """A lazy stack of 1 to 3 members along a random dim of `batch` (which it must hold)."""
    dim = draw(st.integers(0, len(batch) - 1))
    count = batch[dim]
    member_batch = batch[:dim] + batch[dim + 1 :]
    # the members share keys, dtypes and shapes (only values differ) ...
    entries = draw(_entries(member_batch, DTYPES, True))
    template = td_core.TensorDict(entries, batch_size=member_batch)
    members = [
        template.apply(lambda t, i=i: t.roll(i, -1) if t.ndim else t.clone()) for i in range(count)
    ]
    if ragged:  # ... and a ragged leaf whose trailing size grows with the member
        seed = draw(st.integers(0, 2**16))
        for i, m in enumerate(members):
            m["ragged"] = _tensor((torch.float32, (i + 1,)), member_batch, seed + i)
    return td_core.LazyStackedTensorDict.lazy_stack(members, dim)


@st.composite
def containers(draw: st.DrawFn, kinds: tuple[str, ...] = KINDS) -> Any:
    """One container of a kind drawn from `kinds`, with random batch size and leaves."""
    kind = draw(st.sampled_from(kinds))
    batch = draw(batch_sizes())
    if kind in ("lazy", "ragged"):
        return draw(_lazy(batch, kind == "ragged"))
    if kind == "tensorclass":
        entries = draw(_entries(batch, DTYPES, True))
        nested = td_core.TensorDict(entries["nested"], batch_size=batch)
        a, b = entries["l0"], entries.get("l1", entries["l0"].clone())
        return Pair(a=a, b=b, nested=nested, batch_size=list(batch))
    if kind == "params":
        entries = draw(_entries(batch, FLOATS, True))
        return td_core.TensorDictParams(td_core.TensorDict(entries, batch_size=batch))
    if kind == "view_index":
        outer = (draw(st.integers(1, 3)), *batch)
        entries = draw(_entries(outer, DTYPES, True))
        return td_core.TensorDict(entries, batch_size=outer)[draw(st.integers(0, outer[0] - 1))]
    if kind == "view_key":
        entries = draw(_entries(batch, DTYPES, True))
        return td_core.TensorDict({"nested": entries}, batch_size=batch)["nested"]
    td = td_core.TensorDict(draw(_entries(batch, DTYPES, kind != "dense")), batch_size=batch)
    return _memmapped(td) if kind == "memmap" else td


def ragged(td: Any) -> bool:
    """Whether `td` is a lazy stack whose members' leaves differ in shape (at any depth)."""
    if not isinstance(td, td_core.LazyStackedTensorDict):
        return False
    members = td.tensordicts
    return any(_shapes(m) != _shapes(members[0]) or ragged(m) for m in members)


def _shapes(td: Any) -> dict[Any, torch.Size]:
    return {k: td.get_item_shape(k) for k in td.keys(True, True)}


def assert_same_td(actual: Any, expected: Any) -> None:
    """Same batch size, keys, dtypes and exactly equal values (ragged stacks member by member)."""
    assert actual.batch_size == expected.batch_size, (actual.batch_size, expected.batch_size)
    if ragged(actual) or ragged(expected):
        d = (actual if ragged(actual) else expected).stack_dim
        for a, e in zip(actual.unbind(d), expected.unbind(d)):
            assert_same_td(a, e)
        return
    keys = set(expected.keys(True, True))
    assert set(actual.keys(True, True)) == keys
    for key in keys:
        a, e = actual.get(key), expected.get(key)
        assert a.dtype == e.dtype, (key, a.dtype, e.dtype)
        assert torch.equal(a, e), key
