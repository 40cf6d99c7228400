"""The one-operand rows of the pointwise table, as methods (`td.exp()`, `td.exp_()`, ...).

Each method is one line running its row of `UNARY` (see `td_core._ops.pointwise_run`).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import torch

from td_core._core.contract import TensorDictContract
from td_core._ops.pointwise_run import Op, run

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["UNARY", "UnaryMixin"]

Tensor = torch.Tensor


def _row(name: str) -> Op:
    return Op(
        name,
        getattr(torch, name),
        getattr(Tensor, f"{name}_"),
        getattr(torch, f"_foreach_{name}", None),
        getattr(torch, f"_foreach_{name}_", None),
    )


# name -> row: torch.<name>, Tensor.<name>_, torch._foreach_<name>(_) where torch has them
UNARY: dict[str, Op] = {
    **{
        name: _row(name)
        for name in (
            "abs",
            "acos",
            "asin",
            "atan",
            "ceil",
            "cos",
            "cosh",
            "erf",
            "erfc",
            "exp",
            "expm1",
            "floor",
            "frac",
            "lgamma",
            "log",
            "log10",
            "log1p",
            "log2",
            "neg",
            "reciprocal",
            "round",
            "rsqrt",
            "sigmoid",
            "sign",
            "sin",
            "sinh",
            "sqrt",
            "tan",
            "tanh",
            "trunc",
        )
    },
    # tests: bool results, no in-place form, no _foreach form
    **{
        name: Op(name, getattr(torch, name))
        for name in ("isfinite", "isnan", "isneginf", "isposinf", "isreal")
    },
    # `~td`: operator.invert raises torch's TypeError on float leaves, as upstream
    "bitwise_not": Op("bitwise_not", operator.invert, Tensor.bitwise_not_),
}


class UnaryMixin(TensorDictContract):
    """One-operand pointwise methods of `td_core.TensorDictBase`."""

    __slots__ = ()

    def abs(self) -> Self:
        """The absolute value of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["abs"])

    def abs_(self) -> Self:
        """The absolute value of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["abs"], inplace=True)

    def acos(self) -> Self:
        """The arccosine of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["acos"])

    def acos_(self) -> Self:
        """The arccosine of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["acos"], inplace=True)

    def asin(self) -> Self:
        """The arcsine of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["asin"])

    def asin_(self) -> Self:
        """The arcsine of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["asin"], inplace=True)

    def atan(self) -> Self:
        """The arctangent of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["atan"])

    def atan_(self) -> Self:
        """The arctangent of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["atan"], inplace=True)

    def ceil(self) -> Self:
        """The ceiling of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["ceil"])

    def ceil_(self) -> Self:
        """The ceiling of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["ceil"], inplace=True)

    def cos(self) -> Self:
        """The cosine of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["cos"])

    def cos_(self) -> Self:
        """The cosine of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["cos"], inplace=True)

    def cosh(self) -> Self:
        """The hyperbolic cosine of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["cosh"])

    def cosh_(self) -> Self:
        """The hyperbolic cosine of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["cosh"], inplace=True)

    def erf(self) -> Self:
        """The error function of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["erf"])

    def erf_(self) -> Self:
        """The error function of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["erf"], inplace=True)

    def erfc(self) -> Self:
        """The complementary error function of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["erfc"])

    def erfc_(self) -> Self:
        """The complementary error function of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["erfc"], inplace=True)

    def exp(self) -> Self:
        """The exponential of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["exp"])

    def exp_(self) -> Self:
        """The exponential of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["exp"], inplace=True)

    def expm1(self) -> Self:
        """The `exp(x) - 1` of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["expm1"])

    def expm1_(self) -> Self:
        """The `exp(x) - 1` of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["expm1"], inplace=True)

    def floor(self) -> Self:
        """The floor of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["floor"])

    def floor_(self) -> Self:
        """The floor of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["floor"], inplace=True)

    def frac(self) -> Self:
        """The fractional part of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["frac"])

    def frac_(self) -> Self:
        """The fractional part of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["frac"], inplace=True)

    def lgamma(self) -> Self:
        """The log of the absolute gamma function of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["lgamma"])

    def lgamma_(self) -> Self:
        """The log of the absolute gamma function of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["lgamma"], inplace=True)

    def log(self) -> Self:
        """The natural logarithm of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["log"])

    def log_(self) -> Self:
        """The natural logarithm of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["log"], inplace=True)

    def log10(self) -> Self:
        """The base-10 logarithm of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["log10"])

    def log10_(self) -> Self:
        """The base-10 logarithm of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["log10"], inplace=True)

    def log1p(self) -> Self:
        """The `log(1 + x)` of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["log1p"])

    def log1p_(self) -> Self:
        """The `log(1 + x)` of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["log1p"], inplace=True)

    def log2(self) -> Self:
        """The base-2 logarithm of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["log2"])

    def log2_(self) -> Self:
        """The base-2 logarithm of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["log2"], inplace=True)

    def neg(self) -> Self:
        """The negation of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["neg"])

    def neg_(self) -> Self:
        """The negation of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["neg"], inplace=True)

    def reciprocal(self) -> Self:
        """The reciprocal `1 / x` of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["reciprocal"])

    def reciprocal_(self) -> Self:
        """The reciprocal `1 / x` of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["reciprocal"], inplace=True)

    def round(self) -> Self:
        """The rounding to the nearest integer of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["round"])

    def round_(self) -> Self:
        """The rounding to the nearest integer of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["round"], inplace=True)

    def rsqrt(self) -> Self:
        """The reciprocal square root of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["rsqrt"])

    def rsqrt_(self) -> Self:
        """The reciprocal square root of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["rsqrt"], inplace=True)

    def sigmoid(self) -> Self:
        """The logistic sigmoid of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["sigmoid"])

    def sigmoid_(self) -> Self:
        """The logistic sigmoid of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["sigmoid"], inplace=True)

    def sign(self) -> Self:
        """The sign (-1, 0 or 1) of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["sign"])

    def sign_(self) -> Self:
        """The sign (-1, 0 or 1) of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["sign"], inplace=True)

    def sin(self) -> Self:
        """The sine of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["sin"])

    def sin_(self) -> Self:
        """The sine of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["sin"], inplace=True)

    def sinh(self) -> Self:
        """The hyperbolic sine of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["sinh"])

    def sinh_(self) -> Self:
        """The hyperbolic sine of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["sinh"], inplace=True)

    def sqrt(self) -> Self:
        """The square root of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["sqrt"])

    def sqrt_(self) -> Self:
        """The square root of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["sqrt"], inplace=True)

    def tan(self) -> Self:
        """The tangent of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["tan"])

    def tan_(self) -> Self:
        """The tangent of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["tan"], inplace=True)

    def tanh(self) -> Self:
        """The hyperbolic tangent of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["tanh"])

    def tanh_(self) -> Self:
        """The hyperbolic tangent of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["tanh"], inplace=True)

    def trunc(self) -> Self:
        """The truncation toward zero of every tensor leaf (a new TensorDict)."""
        return run(self, UNARY["trunc"])

    def trunc_(self) -> Self:
        """The truncation toward zero of every tensor leaf, in place (returns self)."""
        return run(self, UNARY["trunc"], inplace=True)

    def isfinite(self) -> Self:
        """Whether each element of every tensor leaf is finite (bool leaves)."""
        return run(self, UNARY["isfinite"])

    def isnan(self) -> Self:
        """Whether each element of every tensor leaf is NaN (bool leaves)."""
        return run(self, UNARY["isnan"])

    def isneginf(self) -> Self:
        """Whether each element of every tensor leaf is negative infinity (bool leaves)."""
        return run(self, UNARY["isneginf"])

    def isposinf(self) -> Self:
        """Whether each element of every tensor leaf is positive infinity (bool leaves)."""
        return run(self, UNARY["isposinf"])

    def isreal(self) -> Self:
        """Whether each element of every tensor leaf is real-valued (a zero imaginary part) (bool leaves)."""
        return run(self, UNARY["isreal"])

    def __neg__(self) -> Self:
        return run(self, UNARY["neg"])

    def __abs__(self) -> Self:
        return run(self, UNARY["abs"])

    def __invert__(self) -> Self:
        return run(self, UNARY["bitwise_not"])
