"""`with td.<view op>(...) as view:` writes what changed in `view` back into `td`, on every kind.

A property test over the containers of `strategies.py`: inside the block a new
key is set, an existing leaf is replaced and (where the kind allows keys to
come and go) another is deleted; after the block the source holds the new
entries in its own layout, the deletion, and every other leaf unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import td_core

if str(Path(__file__).parent) not in sys.path:  # the strategies module sits beside this file
    sys.path.insert(0, str(Path(__file__).parent))
from strategies import containers, quick

SETTINGS = quick(25)

Tensor = torch.Tensor
# (view of td, the tensor function that takes a leaf of the view back to td's layout)
Made = tuple[Any, Callable[[Tensor], Tensor]]


def _perm_back(order: list[int]) -> Callable[[Tensor], Tensor]:
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return lambda t: t.permute(*inverse, *range(len(order), t.ndim))


def _reshape_back(bs: torch.Size, n: int) -> Callable[[Tensor], Tensor]:
    return lambda t: t.reshape(*bs, *t.shape[n:])


@st.composite
def view_ops(draw: st.DrawFn, td: Any) -> tuple[str, Callable[[Any], Made]]:
    """A view op that applies to `td`, and how to build the view with its tensor inverse."""
    bs, n = td.batch_size, td.batch_dims
    ops: list[tuple[str, Callable[[Any], Made]]] = []
    d0 = draw(st.integers(0, n - 1))
    d1 = draw(st.integers(0, n - 1))
    order = draw(st.permutations(range(n)))
    ops += [
        ("transpose", lambda t: (t.transpose(d0, d1), _perm_back(_swap(n, d0, d1)))),
        ("swapaxes", lambda t: (t.swapaxes(d0, d1), _perm_back(_swap(n, d0, d1)))),
        ("permute", lambda t: (t.permute(*order), _perm_back(list(order)))),
        ("movedim", lambda t: (t.movedim(d0, d1), _perm_back(_moved(n, d0, d1)))),
        ("view", lambda t: (t.view(-1), _reshape_back(bs, 1))),
        ("reshape", lambda t: (t.reshape(-1), _reshape_back(bs, 1))),
        ("flatten", lambda t: (t.flatten(), _reshape_back(bs, 1))),
        ("unsqueeze", lambda t: (t.unsqueeze(d0), _reshape_back(bs, n + 1))),
        ("atleast_3d", lambda t: (t.atleast_3d(), _reshape_back(bs, max(n, 3)))),
        ("flip", lambda t: (t.flip(d0), lambda x: x.flip(d0))),
        ("roll", lambda t: (t.roll(1, d0), lambda x: x.roll(-1, d0))),
    ]
    if not td_core.is_tensorclass(td):  # a tensorclass result holds its fields only
        ops += [
            ("flatten_keys", lambda t: (t.flatten_keys("."), lambda x: x)),
            ("exclude", lambda t: (t.exclude("nested"), lambda x: x)),
        ]
    if 1 in bs:
        ops.append(("squeeze", lambda t: (t.squeeze(), _reshape_back(bs, n - bs.count(1)))))
    if bs[0] > 1:
        ops.append(("unflatten", lambda t: (t.unflatten(0, (1, bs[0])), _reshape_back(bs, n + 1))))
    if n >= 2:
        ops.append(("rot90", lambda t: (t.rot90(1, (0, 1)), lambda x: x.rot90(-1, (0, 1)))))
    return draw(st.sampled_from(ops))


def _swap(n: int, d0: int, d1: int) -> list[int]:
    order = list(range(n))
    order[d0], order[d1] = order[d1], order[d0]
    return order


def _moved(n: int, src: int, dst: int) -> list[int]:
    rest = [d for d in range(n) if d != src]
    rest.insert(dst, src)
    return rest


def _leaves(td: Any) -> dict[Any, Any]:
    """Copies of the leaves (a lazy stack's member by member: ragged leaves do not stack)."""
    if isinstance(td, td_core.LazyStackedTensorDict):
        return {
            (i, k): v for i, m in enumerate(td.unbind(td.stack_dim)) for k, v in _leaves(m).items()
        }
    return {k: td.get(k).clone() for k in td.keys(True, True)}


def _same_leaves(td: Any, before: dict[Any, Any], skip: tuple[Any, ...], name: str) -> None:
    after = _leaves(td)
    for key, value in before.items():
        leaf = key[1] if isinstance(td, td_core.LazyStackedTensorDict) else key
        if leaf not in skip:
            assert (after[key] == value).all(), (name, key)


@SETTINGS
@given(containers(), st.data())
def test_view_writes_back_set_update_and_delete(td: Any, data: st.DataObject) -> None:
    assume(td.batch_dims > 0)
    name, make = data.draw(view_ops(td), label="op")
    free_keys = not td_core.is_tensorclass(td)  # a tensorclass holds its fields, no other key
    top = sorted(
        k for k in td.keys() if k != "ragged" and not td_core.is_tensor_collection(td.get(k))
    )
    target = top[0]
    victim = top[1] if len(top) > 1 and free_keys else None
    before = _leaves(td)
    shape = td.get(target).shape
    with make(td)[0] as view:
        _, back = make(td)
        new = torch.arange(view.numel()).reshape(view.shape).float()
        replaced = torch.full_like(view.get(target), 3)
        view.set(target, replaced)
        if free_keys:
            view.set("new", new)
        if victim is not None:
            view.del_(victim)
    assert (td.get(target) == back(replaced)).all(), name
    assert td.get(target).shape == shape, name
    if free_keys:
        assert td.get("new").shape == td.batch_size, name
        assert (td.get("new") == back(new)).all(), name
    if victim is not None:
        assert victim not in td.keys(), name
    _same_leaves(td, before, (target, victim, "new"), name)


@SETTINGS
@given(containers(), st.data())
def test_failed_block_writes_nothing_back(td: Any, data: st.DataObject) -> None:
    assume(td.batch_dims > 0)
    # a lazy stack's view may share its members, whose writes reach the source at once
    assume(not isinstance(td, td_core.LazyStackedTensorDict))
    name, make = data.draw(view_ops(td), label="op")
    assume(make(td)[0] is not td)  # e.g. view(-1) of one batch dim: no view, writes are direct
    keys = set(td.keys(True))
    target = sorted(
        k for k in td.keys() if k != "ragged" and not td_core.is_tensor_collection(td.get(k))
    )[0]
    original = td.get(target)
    try:
        with make(td)[0] as view:
            view.set(target, torch.full_like(view.get(target), 3))
            if not td_core.is_tensorclass(td):
                view.set("new", torch.zeros(view.shape))
            raise ZeroDivisionError
    except ZeroDivisionError:
        pass
    assert set(td.keys(True)) == keys, name
    assert (td.get(target) == original).all(), name
