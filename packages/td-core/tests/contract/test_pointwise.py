"""Pointwise math on every kind, against upstream: out of place, in place, every operand sort."""

from __future__ import annotations

import math
import operator

import pytest
import torch

UNARY = (
    "abs acos asin atan ceil cos cosh erf erfc exp expm1 floor frac lgamma log log10 log1p "
    "log2 neg reciprocal round sigmoid sign sin sinh sqrt tan tanh trunc"
).split()
TESTS = "isfinite isnan isneginf isposinf isreal".split()


def floats(td):
    """A floating-point part of ``td`` whose in-place ops reach the input (on every kind)."""
    return td.get("nested") if "nested" in td.keys() else td.exclude("count", "done")


def batch_tensor(td):
    """A float tensor of the batch shape (an operand aligned with the batch dims)."""
    n = math.prod(td.batch_size)
    return torch.arange(n, dtype=torch.float32).reshape(td.batch_size) / n + 0.5


def last_dim(td):
    """A float tensor of the last batch dim's size (broadcast over the leading batch dims)."""
    return torch.linspace(0.5, 1.5, td.batch_size[-1])


def labelled(td):
    """A copy of ``td`` with a non-tensor leaf (a string)."""
    out = td.clone()
    out.set(("nested", "label") if "nested" in out.keys() else "label", "tag")
    return out


CASES = {
    **{name: operator.methodcaller(name) for name in UNARY + TESTS},
    **{
        f"{name}_": (lambda td, m=operator.methodcaller(f"{name}_"): m(floats(td)))
        for name in UNARY
    },
    "sqrt_int_raises": lambda td: td.sqrt_(),
    "neg_dunder": lambda td: -td,
    "abs_dunder": lambda td: abs(td),
    "invert_bool": lambda td: ~td.bool(),
    "invert_float_raises": lambda td: ~floats(td),
    # scalars
    "add_scalar": lambda td: td.add(2),
    "add_alpha_scalar": lambda td: td.add(2, alpha=0.5),
    "add_alpha_td": lambda td: td.add(td, alpha=2),
    "add_td": lambda td: td + td,
    "add_tensor_batch": lambda td: td + batch_tensor(td),
    "add_tensor_last": lambda td: td + last_dim(td),
    "add_tensor_0d": lambda td: td + torch.tensor(1.5),
    "add_tensor_bad_shape": lambda td: td + torch.ones(7),
    "add_tensor_grows_batch": lambda td: td + batch_tensor(td).unsqueeze(0),
    "add_missing_key": lambda td: floats(td) + floats(td).exclude("obs", "y"),
    "add_extra_key": lambda td: floats(td).exclude("obs", "y") + floats(td),
    "add_default_intersection": lambda td: floats(td).add(
        floats(td).exclude("obs", "y"), default="intersection"
    ),
    "add_default_value": lambda td: floats(td).add(
        floats(td).exclude("obs", "y"), default=torch.tensor(0.0)
    ),
    "radd": lambda td: 1 + td,
    "add_": lambda td: floats(td).add_(1.5),
    "add_alpha_": lambda td: floats(td).add_(floats(td), alpha=2),
    "add_tensor_": lambda td: floats(td).add_(batch_tensor(td)),
    "add_float_into_int_raises": lambda td: td.add_(0.5),
    "add_extra_key_": lambda td: floats(td).add_(td.float()),
    "iadd": lambda td: floats(td).__iadd__(2),
    "sub": lambda td: td.sub(td, alpha=0.5),
    "sub_scalar": lambda td: td - 1,
    "rsub_dunder": lambda td: 1 - td,
    "rsub": lambda td: td.rsub(3),
    "rsub_alpha": lambda td: td.rsub(td, alpha=2),
    "sub_": lambda td: floats(td).sub_(floats(td), 0.5),
    "isub": lambda td: floats(td).__isub__(batch_tensor(td)),
    "mul": lambda td: td.mul(3),
    "mul_td": lambda td: td.mul(td),
    "mul_tensor": lambda td: td.mul(last_dim(td)),
    "rmul": lambda td: 2 * td,
    "mul_": lambda td: td.mul_(3),
    "mul_tensor_": lambda td: floats(td).mul_(batch_tensor(td)),
    "imul": lambda td: floats(td).__imul__(floats(td)),
    "div": lambda td: td.div(2),
    "div_td": lambda td: td.float().div(td.float() + 10),
    "truediv": lambda td: td / 4,
    "rtruediv": lambda td: 1 / (td.float() + 10),
    "div_": lambda td: floats(td).div_(2),
    "div_int_raises": lambda td: td.div_(2),
    "itruediv": lambda td: floats(td).__itruediv__(batch_tensor(td)),
    "pow": lambda td: td.pow(2),
    "pow_td": lambda td: floats(td).abs().pow(floats(td)),
    "pow_tensor": lambda td: floats(td).abs().pow(last_dim(td)),
    "pow_dunder": lambda td: td**2,
    "pow_": lambda td: floats(td).pow_(2),
    "ipow": lambda td: floats(td).__ipow__(3),
    "mod": lambda td: td.mod(3),
    "mod_dunder": lambda td: td % 2,
    "mod_td": lambda td: floats(td).mod(floats(td).abs() + 1),
    "maximum": lambda td: td.maximum(0.0),
    "maximum_td": lambda td: td.maximum(td.neg()),
    "maximum_tensor": lambda td: floats(td).maximum(last_dim(td)),
    "maximum_": lambda td: floats(td).maximum_(floats(td).neg()),
    "minimum": lambda td: floats(td).minimum(0.0),
    "minimum_td": lambda td: td.minimum(td.neg()),
    "minimum_": lambda td: floats(td).minimum_(0.1),
    "clamp_min": lambda td: td.clamp_min(0.0),
    "clamp_min_td": lambda td: floats(td).clamp_min(floats(td).neg()),
    "clamp_min_": lambda td: floats(td).clamp_min_(0.0),
    "clamp_max": lambda td: floats(td).clamp_max(0.0),
    "clamp_max_td": lambda td: td.clamp_max(td.neg()),
    "clamp_max_": lambda td: floats(td).clamp_max_(0.0),
    "clamp": lambda td: floats(td).clamp(-0.5, 0.5),
    "clamp_out_empty": lambda td: floats(td).clamp(-0.5, 0.5, out=floats(td).empty()),  # KeyError
    "clamp_min_only": lambda td: td.clamp(min=0),
    "clamp_max_only": lambda td: floats(td).clamp(max=0),
    "clamp_td": lambda td: floats(td).clamp(min=floats(td) - 0.1, max=floats(td) * 0 + 0.3),
    "clamp_none_raises": lambda td: td.clamp(),
    "clamp_mixed_raises": lambda td: floats(td).clamp(min=floats(td), max=1.0),
    "lerp": lambda td: floats(td).lerp(floats(td).exp(), 0.25),
    "lerp_weight_td": lambda td: floats(td).lerp(floats(td).exp(), floats(td).sigmoid()),
    "lerp_weight_tensor": lambda td: floats(td).lerp(floats(td).exp(), batch_tensor(td)),
    "lerp_int_raises": lambda td: td.lerp(td, 0.5),
    "lerp_": lambda td: floats(td).lerp_(floats(td).exp(), 0.25),
    "lerp_weight_td_": lambda td: floats(td).lerp_(floats(td).exp(), floats(td).sigmoid()),
    "lerp_missing_key_": lambda td: floats(td).lerp_(floats(td).exclude("obs", "y"), 0.5),
    "addcmul": lambda td: floats(td).addcmul(floats(td), floats(td), value=2),
    "addcmul_default": lambda td: td.addcmul(td, td),
    "addcmul_": lambda td: floats(td).addcmul_(floats(td).exp(), floats(td), value=0.5),
    "addcdiv": lambda td: floats(td).addcdiv(floats(td), floats(td).exp(), value=2),
    "addcdiv_positional": lambda td: floats(td).addcdiv(floats(td), floats(td).exp(), 3),
    "addcdiv_": lambda td: floats(td).addcdiv_(floats(td), floats(td).exp(), value=0.5),
    "bitwise_and": lambda td: td.bool().bitwise_and(td.bool()),
    "and_dunder": lambda td: td.bool() & (~td.bool()),
    "or_dunder": lambda td: td.int64() | 4,
    "xor_dunder": lambda td: td.int64() ^ td.int64(),
    "rand": lambda td: True & td.bool(),
    "ror": lambda td: 1 | td.int64(),
    "rxor": lambda td: 3 ^ td.int64(),
    "and_float_raises": lambda td: floats(td) & floats(td),
    "logical_and": lambda td: td.logical_and(td),
    "logical_and_tensor": lambda td: td.logical_and(batch_tensor(td)),
    # comparisons
    "eq_scalar": lambda td: td == 0,
    "ne_td": lambda td: td != td.abs(),
    "lt_tensor": lambda td: td < last_dim(td),
    "le_scalar": lambda td: td <= 0.5,
    "gt_td": lambda td: td > td.neg(),
    "ge_tensor": lambda td: td >= batch_tensor(td),
    "eq_missing_key": lambda td: floats(td) == floats(td).exclude("obs", "y"),
    # a non-tensor leaf takes no part in a comparison with a number or a tensor
    "eq_scalar_non_tensor_all": lambda td: (labelled(td).zero_() == 0).all(),
    "le_scalar_non_tensor_all": lambda td: (labelled(td).clamp_max(1.0) <= 1.0).all(),
    "gt_tensor_non_tensor_any": lambda td: (labelled(td) > batch_tensor(td) + 100).any(),
    "ne_td_non_tensor_all": lambda td: (labelled(td) != labelled(td)).any(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pointwise(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
