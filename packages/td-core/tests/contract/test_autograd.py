"""Autograd and parameter views (data, grad, zero_grad, backward, ...) on every kind, against upstream."""

from __future__ import annotations

import warnings

import pytest

import td_core

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as upstream


def _float_leaves(td):
    """The stored ``obs`` and ``("nested", "x")`` tensors (a lazy stack's come from its members)."""
    if td_core.is_tensorclass(td) or upstream.is_tensorclass(td):  # the TensorDict it wraps
        return _float_leaves(td._tensordict)
    if hasattr(td, "tensordicts"):
        return [t for m in td.tensordicts for t in _float_leaves(m)]
    return [t for t in (td.get("obs"), td.get(("nested", "x"), None)) if t is not None]


def _with_grads(td):
    """Make the float leaves ``obs`` and ``("nested", "x")`` require grad and back-propagate."""
    leaves = _float_leaves(td)
    for t in leaves:
        t.requires_grad_()
    sum((i + 1) * t.sum() for i, t in enumerate(leaves)).backward()
    return td


def _zero_data(td):
    for t in _float_leaves(td.data):
        t.zero_()
    return td


CASES = {
    "data": lambda td: td.data,
    "data_clone": lambda td: td.data.clone(),
    "data_no_grad": lambda td: [t.requires_grad for t in td.data.values(True, True)],
    "data_shares_storage": _zero_data,
    "grad_none": lambda td: td.grad is None,
    "grad": lambda td: _with_grads(td).grad,
    "zero_grad": lambda td: _with_grads(td).zero_grad().grad is None,
    "zero_grad_keep": lambda td: _with_grads(td).zero_grad(set_to_none=False).grad,
    "requires_grad": lambda td: td.requires_grad,
    "requires_grad_false": lambda td: td.requires_grad_(False).requires_grad,
    "requires_grad_floats": lambda td: td.select("obs", "reward").requires_grad_().requires_grad,
    "detach": lambda td: td.detach(),
    "detach_grad": lambda td: _with_grads(td).detach().requires_grad,
    "param_count": lambda td: td.param_count(),
    "param_count_kw": lambda td: td.param_count(count_duplicates=False),
    "bytes": lambda td: td.bytes(),
    "bytes_kw": lambda td: td.bytes(count_duplicates=False),
    "backward_no_grad": lambda td: td.backward(),
    "backward_non_scalar": lambda td: td.select("obs").requires_grad_().backward(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_autograd(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
