"""`set_printoptions(compact=True)`: the same text as upstream's compact repr, for every kind.

Each case builds the same data with a module `m` (td_core, or upstream
tensordict) and the test compares the two reprs under `compact=True`.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import pytest
import torch

import td_core as td

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up


def _nested(m: Any) -> Any:
    return m.TensorDict(
        a=torch.zeros(10, 3),
        b=m.TensorDict(c=torch.zeros(10, 2, dtype=torch.long), batch_size=[10, 2]),
        batch_size=[10],
    )


def _wide(m: Any) -> Any:
    out = m.TensorDict({f"key_{i}": torch.zeros(4, i, dtype=torch.float64) for i in range(8)}, [4])
    out["nested"] = m.TensorDict(
        {f"sub_{i}": torch.zeros(4, i, dtype=torch.uint8) for i in range(8)}, [4]
    )
    out["deep"] = m.TensorDict(
        inner=m.TensorDict({f"leaf_number_{i}": torch.zeros(4, 2) for i in range(4)}, [4]),
        batch_size=[4],
    )
    return out


def _dtypes(m: Any) -> Any:
    kinds = [torch.bool, torch.bfloat16, torch.complex64, torch.int8, torch.uint16, torch.float16]
    return m.TensorDict({f"x{i}": torch.zeros(3, dtype=d) for i, d in enumerate(kinds)})


def _non_tensor(m: Any) -> Any:
    out = m.TensorDict(a=torch.zeros(3, 4), batch_size=[3])
    out["text"] = "hello"
    out["number"] = m.NonTensorData(3, batch_size=[3])
    out["stacked"] = torch.stack([m.TensorDict(s="x"), m.TensorDict(s="y"), m.TensorDict(s="z")])[
        "s"
    ]
    return out


def _lazy(m: Any, dim: int) -> Any:
    first = m.TensorDict(a=torch.zeros(2, 3), b=torch.zeros(2, 3, dtype=torch.long), batch_size=[2])
    second = m.TensorDict(a=torch.zeros(2, 4), c=torch.zeros(2, 2), batch_size=[2])
    return m.LazyStackedTensorDict(first, second, stack_dim=dim)


def _lazy_exclusive_wide(m: Any) -> Any:
    members = [
        m.TensorDict({"common": torch.zeros(3), f"only_in_member_{i}_long_name": torch.zeros(i)})
        for i in range(4)
    ]
    return m.LazyStackedTensorDict(*members)


def _lazy_nested(m: Any) -> Any:
    members = [
        m.TensorDict(a=torch.zeros(2, 3), b=m.TensorDict(c=torch.zeros(2, i)), batch_size=[2])
        for i in range(3)
    ]
    return m.LazyStackedTensorDict(*members, stack_dim=1)


def _lazy_mixed(m: Any) -> Any:
    # dims that differ in number, promoted dtypes, a non-tensor, devices that differ, a nested stack
    inner = m.LazyStackedTensorDict(m.TensorDict(x=torch.zeros(3)), m.TensorDict(x=torch.zeros(5)))
    first = m.TensorDict(
        r=torch.zeros(2, 3, 1), p=torch.zeros(2, dtype=torch.int32), s="u", batch_size=[2]
    )
    first["n"] = inner
    first["d"] = torch.zeros(2, 3, device="meta")
    second = m.TensorDict(r=torch.zeros(2, 4), p=torch.zeros(2), s="v", batch_size=[2])
    second["n"] = inner.clone()
    second["d"] = torch.zeros(2, 3)
    return m.LazyStackedTensorDict(first, second, stack_dim=0)


def _lazy_in_dense(m: Any) -> Any:
    stack = m.LazyStackedTensorDict(m.TensorDict(a=torch.zeros(3)), m.TensorDict(a=torch.zeros(4)))
    return m.TensorDict(l=stack, b=torch.zeros(2, 5), batch_size=[2])


def _empty(m: Any) -> Any:
    return m.TensorDict(a=m.TensorDict(), b=m.TensorDict(batch_size=[2, 3]), batch_size=[2])


def _devices(m: Any) -> Any:
    out = m.TensorDict(a=torch.zeros(3, device="meta"), b=torch.zeros(3), batch_size=[3])
    out["c"] = m.TensorDict(d=torch.zeros(3, device="meta"), batch_size=[3])
    return out


def _device_set(m: Any) -> Any:
    return m.TensorDict(a=torch.zeros(3, 2), device="cpu", batch_size=[3])


def _unbatched(m: Any) -> Any:
    return m.TensorDict(a=m.UnbatchedTensor(torch.zeros(5, 6)), b=torch.zeros(3), batch_size=[3])


def _classes(m: Any) -> tuple[Any, Any]:
    @m.tensorclass
    class Point:
        x: torch.Tensor
        label: Any = None
        extra: Any = None
        note: str = "a"
        hidden: Any = dataclasses.field(default=None, repr=False)

    @m.tensorclass(shadow=True)
    class Shadow:
        batch_size: torch.Tensor
        device: torch.Tensor

    return Point, Shadow


def _tensorclass(m: Any) -> Any:
    point, _ = _classes(m)
    return point(
        x=torch.zeros(3, 2),
        label=m.TensorDict(q=torch.zeros(3)),
        note="hello",
        hidden=torch.zeros(3),
        batch_size=[3],
    )


def _tensorclass_nested(m: Any) -> Any:
    point, _ = _classes(m)
    return m.TensorDict(t=point(x=torch.zeros(3, 2), batch_size=[3], device="cpu"), batch_size=[3])


def _tensorclass_stacked(m: Any) -> Any:
    point, _ = _classes(m)
    return torch.stack([point(x=torch.zeros(3, 2), batch_size=[3], device="cpu")] * 2)


def _tensorclass_shadow(m: Any) -> Any:
    _, shadow = _classes(m)
    return shadow(batch_size=torch.zeros(2), device=torch.ones(2))


def _tensorclass_ragged(m: Any) -> Any:
    point, _ = _classes(m)
    members = [point(x=torch.zeros(3), note="u"), point(x=torch.zeros(4), note="v")]
    return point.from_tensordict(m.LazyStackedTensorDict(*members))


def _tensorclass_in_stack(m: Any) -> Any:
    point, _ = _classes(m)
    members = [m.TensorDict(a=torch.zeros(n), t=point(x=torch.zeros(3))) for n in (3, 4)]
    return m.LazyStackedTensorDict(*members)


def _params(m: Any) -> Any:
    source = m.TensorDict(
        a=torch.zeros(3, 2),
        b=m.TensorDict(c=torch.zeros(3)),
        n=torch.zeros(3, dtype=torch.long),
        batch_size=[3],
    )
    return m.TensorDictParams(source)


def _params_wide(m: Any) -> Any:
    return m.TensorDictParams(
        m.TensorDict({f"param_{i}": torch.zeros(3, 2) for i in range(6)}, [3])
    )


def _params_nested(m: Any) -> Any:
    return m.TensorDict(p=_params(m), batch_size=[3])


def _views(m: Any) -> Any:
    source = m.TensorDict(a=torch.zeros(4, 3), b=m.TensorDict(c=torch.zeros(4, 2)), batch_size=[4])
    return m.TensorDict(row=source[0], rows=source[1:3], batch_size=[])


def _memmap(m: Any, tmp_path: Any) -> Any:
    source = m.TensorDict(a=torch.zeros(4, 3), b=m.TensorDict(c=torch.zeros(4, 2)), batch_size=[4])
    return source.memmap(tmp_path / m.__name__)


CASES = {
    "nested": _nested,
    "wide_wraps_one_entry_per_line": _wide,
    "dtypes": _dtypes,
    "non_tensor": _non_tensor,
    "lazy_dim0": lambda m: _lazy(m, 0),
    "lazy_dim1": lambda m: _lazy(m, 1),
    "lazy_nested": _lazy_nested,
    "lazy_exclusive_wide": _lazy_exclusive_wide,
    "lazy_mixed": _lazy_mixed,
    "lazy_in_dense": _lazy_in_dense,
    "lazy_indexed": lambda m: _lazy_nested(m)[0],
    "empty": _empty,
    "empty_lazy_stack": lambda m: m.LazyStackedTensorDict(stack_dim=0),
    "odd_keys_locked": lambda m: m.TensorDict({"a.b": torch.zeros(3), "": torch.zeros(1)}).lock_(),
    "devices": _devices,
    "device_set": _device_set,
    "unbatched": _unbatched,
    "tensorclass": _tensorclass,
    "tensorclass_nested": _tensorclass_nested,
    "tensorclass_stacked": _tensorclass_stacked,
    "tensorclass_shadow": _tensorclass_shadow,
    "tensorclass_ragged": _tensorclass_ragged,
    "tensorclass_in_stack": _tensorclass_in_stack,
    "params": _params,
    "params_wide": _params_wide,
    "params_nested": _params_nested,
    "views": _views,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compact_repr_matches_upstream(name):
    build = CASES[name]
    with up.set_printoptions(compact=True):
        theirs = repr(build(up))
    with td.set_printoptions(compact=True):
        ours = repr(build(td))
        assert str(build(td)) == ours
    assert ours == theirs


def test_compact_repr_of_memmap_matches_upstream(tmp_path):
    with up.set_printoptions(compact=True):
        theirs = repr(_memmap(up, tmp_path))
    with td.set_printoptions(compact=True):
        ours = repr(_memmap(td, tmp_path))
    assert ours == theirs


def test_compact_repr_of_sub_tensordict_matches_upstream_but_for_the_class_name():
    # td's sub-view class is `SubTensorDict`, upstream's `_SubTensorDict` (docs/migration.md)
    def build(m):
        source = m.TensorDict(
            a=torch.zeros(4, 3), b=m.TensorDict(c=torch.zeros(4, 2)), batch_size=[4]
        )
        return source._get_sub_tensordict(0)

    with up.set_printoptions(compact=True):
        theirs = repr(build(up))
    with td.set_printoptions(compact=True):
        ours = repr(build(td))
    assert ours == theirs.replace("_SubTensorDict", "SubTensorDict")
    assert ours.startswith("SubTensorDict(batch_size=[], fields={")


@pytest.mark.parametrize(
    "options",
    [
        {"sort_keys": None},
        {"sort_keys": lambda text: -len(text)},
        {"verbose": False},
        {"show_dtype": False, "show_batch_size": False, "show_device": False},
        {"show_shape": False},  # compact=True passed: the detailed-only option is ignored
    ],
    ids=["insertion_order", "sort_function", "not_verbose", "no_header", "detailed_only"],
)
def test_compact_options_match_upstream(options):
    def build(m):
        out = m.TensorDict(b=torch.zeros(2), a=torch.zeros(2, 2, 3), device="cpu", batch_size=[2])
        out["c"] = m.LazyStackedTensorDict(
            m.TensorDict(x=torch.zeros(2)), m.TensorDict(x=torch.zeros(3))
        )
        return out

    with up.set_printoptions(compact=True, **options):
        theirs = repr(build(up))
    with td.set_printoptions(compact=True, **options):
        ours = repr(build(td))
    assert ours == theirs


def test_default_stays_detailed():
    assert td.get_printoptions()["compact"] is False
    text = repr(_nested(td))
    assert text.startswith("TensorDict(\n    fields={\n") and "Tensor(shape=" in text
    with up.set_printoptions(compact=False):
        assert text == repr(_nested(up))


def test_context_manager_decorator_and_set_restore_the_option():
    x = _nested(td)
    with td.set_printoptions(compact=True):
        assert td.get_printoptions()["compact"] is True
        compact = repr(x)
        assert compact == "TensorDict(batch_size=[10], fields={a: f32[3], b: [2]{c: i64[]}})"
    assert td.get_printoptions()["compact"] is False
    assert repr(x) != compact

    @td.set_printoptions(compact=True)
    def show(obj):
        return repr(obj)

    assert show(x) == compact
    assert td.get_printoptions()["compact"] is False

    outer = td.set_printoptions(compact=False)
    with outer:  # `.set()` inside a block lasts until the block ends
        td.set_printoptions(compact=True).set()
        assert repr(x) == compact
    assert td.get_printoptions()["compact"] is False


def test_detailed_only_option_without_compact_turns_compact_off():
    x = _nested(td)
    with td.set_printoptions(compact=True):
        with td.set_printoptions(show_is_shared=False):
            assert td.get_printoptions()["compact"] is False
            assert "Tensor(shape=" in repr(x)
        with td.set_printoptions(show_dtype=False):  # read by both forms: compact stays
            assert td.get_printoptions()["compact"] is True
            assert repr(x) == "TensorDict(batch_size=[10], fields={a: [3], b: [2]{c: []}})"
    with up.set_printoptions(show_is_shared=False):
        assert up.get_printoptions()["compact"] is False


def test_compact_repr_of_nested_tensors_matches_upstream():
    def build(m):
        parts = [torch.zeros(2, 3), torch.zeros(4, 3)]
        jagged = torch.nested.nested_tensor(parts, layout=torch.jagged)
        return m.TensorDict(j=jagged, s=torch.nested.nested_tensor(parts), batch_size=[2])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's nested tensors are a prototype
        with up.set_printoptions(compact=True):
            theirs = repr(build(up))
        with td.set_printoptions(compact=True):
            ours = repr(build(td))
    # a jagged dim prints as torch's symbol for it (`j1`, `j2`, ...), numbered per tensor made
    assert re.sub(r"j\d+", "j", ours) == re.sub(r"j\d+", "j", theirs)
    assert "s: f32[-1,3]" in ours and re.search(r"j: f32\[j\d+,3\]", ours)


def test_nested_container_with_its_own_repr_shows_its_class_name():
    # a kind that prints itself its own way (as td-memmap's remote stores do) is not opened
    class Store(td.TensorDict):
        def __repr__(self):
            return "Store(<remote>)"

    x = td.TensorDict(s=Store(a=torch.zeros(2)), b=torch.zeros(2))
    with td.set_printoptions(compact=True):
        assert repr(x) == "TensorDict(batch_size=[], fields={b: f32[2], s: Store})"
        assert repr(x["s"]) == "Store(<remote>)"
