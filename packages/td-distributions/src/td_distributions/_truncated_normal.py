"""A normal distribution restricted to an interval `[a, b]`, stable far into the tails.

Everything is computed on the standardised bounds `alpha = (a - loc) / scale`
and `beta = (b - loc) / scale`. Differences of normal CDFs lose all their
digits when both bounds sit in the upper tail (`Phi(9) - Phi(8)` is `0` in
float32), so each interval is first reflected, where needed, so that its centre
is at or below zero: `[lo, hi] = [-beta, -alpha]` when `alpha + beta > 0`.
There `Phi(lo)` and `Phi(hi)` are small numbers known to full relative
precision (`2 Phi(x) = erfc(-x / sqrt 2)`), and their difference cannot
cancel. Beyond ~12 deviations (float32; ~37 in float64) `erfc` underflows
and `log Phi` comes from its asymptotic series instead.

Sampling inverts the CDF on the reflected side: `erfinv` plus one Newton step
on `erfc` (as accurate as `ndtri` and much faster on CPU), with `ndtri`
for the few quantiles in the outer tails and a log-space inversion where
`Phi(hi)` underflows. Gradients of `rsample` are the implicit
reparameterisation gradients `dx/dalpha = (1 - U) phi(alpha) / phi(x)` and
`dx/dbeta = U phi(beta) / phi(x)`, evaluated in log space so they stay finite
where `phi` underflows. Moments and entropy are computed in float64.

On CPU, a few host-side checks (is any bound in a far tail?) skip work that no
element needs; on other devices every branch runs, so nothing syncs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import torch
from torch.distributions import Distribution, constraints
from torch.distributions.utils import broadcast_all

__all__ = ["TruncatedNormal"]

# tensors inside torch.func transforms (vmap, grad) cannot be read on the host
_is_functorch_wrapped: Callable[[torch.Tensor], bool] = getattr(
    torch._C._functorch, "is_functorch_wrapped_tensor", lambda x: False
)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_HALF_LOG_2PI_E = 0.5 * math.log(2 * math.pi * math.e)
_LN2 = math.log(2.0)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_SQRT2 = math.sqrt(2.0)
_HALF_SQRT_PI = 0.5 * math.sqrt(math.pi)


def _log1mexp(x: torch.Tensor) -> torch.Tensor:
    """`log(1 - exp(x))` for `x <= 0`, to an absolute error of a few ulps.

    Absolute accuracy is what the callers need: the result is added to other
    logarithms and exponentiated, so it becomes a relative error there.
    """
    return torch.log(-torch.expm1(x))


def _on_host(x: torch.Tensor) -> bool:
    """Whether data-dependent shortcuts are possible and free.

    Off the CPU they need a device sync; under `torch.compile` they break the
    graph, and under `torch.func` transforms (`vmap`) they are not allowed.
    """
    return (
        x.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and not _is_functorch_wrapped(x)
    )


def _tail_start(dtype: torch.dtype) -> float:
    """Below this, `erfc(-x / sqrt 2)` nears subnormals: `log Phi` switches to a series."""
    return -37.0 if dtype == torch.float64 else -12.0


def _two_phi(x: torch.Tensor) -> torch.Tensor:
    """`2 Phi(x) = erfc(-x / sqrt 2)`, with full relative precision for `x < 0`."""
    return torch.special.erfc(x * -_INV_SQRT2)


def _log_ndtr(x: torch.Tensor) -> torch.Tensor:
    """`log Phi(x)`, accurate in both tails, from vectorised kernels.

    `torch.special.log_ndtr` is exact too but an order of magnitude slower on
    CPU. Above `_tail_start` this is `log(erfc(-x / sqrt 2) / 2)`; below,
    the asymptotic series of the Mills ratio (relative error < 1e-15 there).
    Both branches are fed safe inputs so that gradients stay finite. On CPU the
    series is skipped when no element needs it.
    """
    t = _tail_start(x.dtype)
    tail = x < t
    if _on_host(x) and not bool(tail.any()):
        return torch.log(_two_phi(x)) - _LN2
    x_central = torch.where(tail, torch.zeros((), dtype=x.dtype, device=x.device), x)
    central = torch.log(_two_phi(x_central)) - _LN2
    x_tail = torch.clamp(x, max=t)
    r = torch.reciprocal(x_tail * x_tail)
    series = r * (-1.0 + r * (3.0 + r * (-15.0 + r * (105.0 - 945.0 * r))))
    asymptotic = -0.5 / r - torch.log(-x_tail) - _LOG_SQRT_2PI + torch.log1p(series)
    return torch.where(tail, asymptotic, central)


def _ndtri_exp(y: torch.Tensor) -> torch.Tensor:
    """`x` with `log Phi(x) == y`, for `y` far below 0 (`exp(y)` may underflow)."""
    y = y.clamp(max=-1.0)  # the lower tail only; other elements are discarded by the caller
    t = -2.0 * y - 2.0 * _LOG_SQRT_2PI
    x = -torch.sqrt(t - torch.log(t))
    for _ in range(3):
        lx = _log_ndtr(x)
        # d log Phi / dx = phi(x) / Phi(x), the inverse Mills ratio
        slope = torch.exp(-0.5 * x * x - _LOG_SQRT_2PI - lx)
        x = x - (lx - y) / slope
    return x


def _standardize(bound: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`(bound - loc) / scale`; when gradients are tracked, infinite bounds become huge finite ones.

    Every formula here accepts infinite standardised bounds, but their
    gradients would meet `inf * 0`; a finite stand-in far beyond any tail that
    carries probability mass keeps them finite.
    """
    if not (bound.requires_grad or loc.requires_grad or scale.requires_grad):
        return (bound - loc) / scale
    big = math.sqrt(torch.finfo(scale.dtype).max) / 16
    inf = torch.isinf(bound)
    finite = torch.where(inf, torch.zeros((), dtype=bound.dtype, device=bound.device), bound)
    return torch.where(inf, torch.sign(bound) * big, (finite - loc) / scale)


class _Consts(NamedTuple):
    """Per-parameter constants. Where `flip`, the interval is reflected: `x_std = -s`."""

    flip: torch.Tensor
    alpha: torch.Tensor  # standardised bounds, original orientation
    beta: torch.Tensor
    lo: torch.Tensor  # reflected standardised bounds: lo + hi <= 0
    hi: torch.Tensor
    two_phi_lo: torch.Tensor  # 2 Phi(lo)
    two_mass: torch.Tensor  # 2 Z, Z = Phi(hi) - Phi(lo) = Phi(beta) - Phi(alpha)
    log_z: torch.Tensor | None  # log Z; None where log(two_mass / 2) is exact
    any_tail: bool  # some lo < -4: some quantiles need the ndtri fix-up
    any_extreme: bool  # some Phi(hi) underflows: that fix-up works in log space


def _consts(loc: torch.Tensor, scale: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> _Consts:
    alpha = _standardize(a, loc, scale)
    beta = _standardize(b, loc, scale)
    flip = (alpha + beta) > 0
    lo = torch.minimum(alpha, -beta)  # -beta where flip, alpha elsewhere
    hi = torch.minimum(beta, -alpha)
    t = _tail_start(lo.dtype)
    if _on_host(lo):
        lows = torch.stack([lo.min(), hi.min()]) if lo.numel() else torch.zeros(2)
        min_lo, min_hi = lows.tolist()
        any_tail, any_extreme, any_deep = min_lo < _TAIL_LO, min_hi < t + 1.0, min_lo < t
    else:  # no sync: take every branch
        any_tail = any_extreme = any_deep = True
    if not any_deep:
        # Phi(lo) and Phi(hi) are normal numbers, known to full relative precision,
        # and lo + hi <= 0 rules out cancellation in their difference.
        two_phi_lo = _two_phi(lo)
        two_mass = _two_phi(hi) - two_phi_lo
        log_z = None
    else:
        log_phi_lo = _log_ndtr(lo)
        log_phi_hi = _log_ndtr(hi)
        log_z = log_phi_hi + _log1mexp(log_phi_lo - log_phi_hi)
        two_phi_lo = 2.0 * torch.exp(log_phi_lo)
        two_mass = 2.0 * torch.exp(log_z)
    return _Consts(flip, alpha, beta, lo, hi, two_phi_lo, two_mass, log_z, any_tail, any_extreme)


def _log_z(c: _Consts) -> torch.Tensor:
    return torch.log(c.two_mass) - _LN2 if c.log_z is None else c.log_z


def _neg_log_norm(c: _Consts, scale: torch.Tensor) -> torch.Tensor:
    """`-log(scale * Z * sqrt(2 pi))`, the log-density at the centre."""
    if c.log_z is None:
        return torch.sub(_LN2 - _LOG_SQRT_2PI, torch.log(scale * c.two_mass))
    return -(torch.log(scale) + c.log_z + _LOG_SQRT_2PI)


# Quantiles p in [_P_TAIL, 1 - _P_TAIL] come from erfinv plus one Newton step; the
# others from ndtri (or in log space). Phi(_TAIL_LO) = Phi(-4) = 3.17e-5 > _P_TAIL.
_P_TAIL = 3e-5
_TAIL_LO = -4.0


class _ImplicitReparam(torch.autograd.Function):
    """Attaches the implicit reparameterisation gradient to a standardised sample.

    Forward returns `z` (a view); backward sends
    `grad * (1 - U) phi(alpha) / phi(z)` to `alpha` and
    `grad * U phi(beta) / phi(z)` to `beta`, with `U` the CDF at `z`
    (given as `log U` and `log(1 - U)`).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(
        alpha: torch.Tensor,
        beta: torch.Tensor,
        z: torch.Tensor,
        log_cdf: torch.Tensor,
        log_sf: torch.Tensor,
    ) -> torch.Tensor:
        return z.view_as(z)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        alpha, beta, z, log_cdf, log_sf = ctx.saved_tensors
        half_z2 = 0.5 * z * z
        grad_alpha = grad_beta = None
        if ctx.needs_input_grad[0]:
            d_alpha = torch.exp(log_sf + half_z2 - 0.5 * alpha * alpha)
            grad_alpha = _sum_to(grad * d_alpha, alpha.shape)
        if ctx.needs_input_grad[1]:
            d_beta = torch.exp(log_cdf + half_z2 - 0.5 * beta * beta)
            grad_beta = _sum_to(grad * d_beta, beta.shape)
        return grad_alpha, grad_beta, None, None, None


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum `grad` over the leading (sample) dimensions it has beyond `shape`."""
    extra = grad.dim() - len(shape)
    return grad.sum(tuple(range(extra))) if extra > 0 else grad


def _as_shape(shape: torch.Size | Sequence[int] | None) -> torch.Size:
    return torch.Size(()) if shape is None else torch.Size(shape)


class TruncatedNormal(Distribution):
    """A normal distribution with mean `loc` and deviation `scale`, restricted to `[a, b]`.

    The density is `phi((x - loc) / scale) / (scale * Z)` on `[a, b]` and 0
    outside, with `Z = Phi(beta) - Phi(alpha)`, `alpha = (a - loc) / scale`
    and `beta = (b - loc) / scale`. Every quantity is computed so that it stays
    finite and accurate when the interval lies many deviations away from
    `loc` (checked against `scipy.stats.truncnorm` up to 30 deviations out).
    `a` may be `-inf` and `b` may be `inf`.

    `rsample` is reparameterised: gradients flow to `loc`, `scale`,
    `a` and `b`. Unlike upstream, `mode` (`loc` clamped to
    `[a, b]`) and `deterministic_sample` (the mode) are defined, and
    `log_prob` of a value outside `[a, b]` is `-inf` when argument
    validation is off.

    Args:
        loc: the mean of the untruncated normal.
        scale: its standard deviation (positive).
        a: the lower bound of the support.
        b: the upper bound of the support (`a < b` elementwise).
        validate_args: check the arguments (`scale > 0`, `a < b`, no NaN)
            and the values given to `log_prob` and `cdf`; `None`
            follows `torch.distributions.Distribution`'s global default.

    Raises:
        ValueError: with validation on, if `scale <= 0`, a parameter is NaN,
            or `a >= b` somewhere.

    Examples:
        >>> import torch
        >>> from td_distributions import TruncatedNormal
        >>> dist = TruncatedNormal(torch.zeros(3), torch.ones(3), -1.0, 2.0)
        >>> x = dist.rsample((5,))
        >>> x.shape, bool(((x >= -1) & (x <= 2)).all())
        (torch.Size([5, 3]), True)
        >>> dist.mode
        tensor([0., 0., 0.])
        >>> far = TruncatedNormal(0.0, 1.0, 8.0, 9.0)
        >>> round(float(far.mean), 4)
        8.1212
    """

    arg_constraints: ClassVar[dict[str, constraints.Constraint]] = {
        "loc": constraints.real,
        "scale": constraints.positive,
        "a": constraints.real,
        "b": constraints.real,
    }
    has_rsample = True

    def __init__(
        self,
        loc: float | torch.Tensor,
        scale: float | torch.Tensor,
        a: float | torch.Tensor,
        b: float | torch.Tensor,
        validate_args: bool | None = None,
    ) -> None:
        self.loc, self.scale, self.a, self.b = broadcast_all(loc, scale, a, b)
        self._cache: _Consts | None = None
        self._y_scale: torch.Tensor | None = None
        self._lp_offset: torch.Tensor | None = None
        super().__init__(batch_shape=self.loc.shape, validate_args=validate_args)
        if self._validate_args:
            ordered = self.a < self.b
            if not bool(ordered.all()):
                index = tuple(int(i) for i in (~ordered).nonzero()[0])
                raise ValueError(
                    f"TruncatedNormal needs a < b elementwise, got a={self.a[index].item()!r} "
                    f"and b={self.b[index].item()!r} at batch index {index} "
                    f"(a of shape {tuple(self.a.shape)}, b of shape {tuple(self.b.shape)})"
                )

    def expand(
        self, batch_shape: torch.Size | Sequence[int], _instance: Any = None
    ) -> TruncatedNormal:
        new = self._get_checked_instance(TruncatedNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new.a = self.a.expand(batch_shape)
        new.b = self.b.expand(batch_shape)
        new._cache = None
        new._y_scale = None
        new._lp_offset = None
        super(TruncatedNormal, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.interval(self.a, self.b)

    # -- shared constants -------------------------------------------------

    def _needs_grad(self) -> bool:
        return torch.is_grad_enabled() and (
            self.loc.requires_grad
            or self.scale.requires_grad
            or self.a.requires_grad
            or self.b.requires_grad
        )

    def _params(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`loc, scale, a, b` in the computing dtype: float32 for half-precision parameters."""
        if self.loc.dtype in (torch.float16, torch.bfloat16):
            return self.loc.float(), self.scale.float(), self.a.float(), self.b.float()
        return self.loc, self.scale, self.a, self.b

    def _detached(self) -> _Consts:
        """Constants from detached parameters, computed once per distribution."""
        if self._cache is None:
            with torch.no_grad():
                self._cache = _consts(*self._params())
        return self._cache

    def _tracked(self) -> _Consts:
        """Constants that carry gradients when the parameters need them."""
        if self._needs_grad():
            return _consts(*self._params())
        return self._detached()

    def _log_norm_offset(self) -> torch.Tensor:
        """`-log(scale * Z * sqrt(2 pi))`: cached unless it must carry gradients."""
        scale = self._params()[1]
        if self._needs_grad():
            return _neg_log_norm(self._tracked(), scale)
        if self._lp_offset is None:
            with torch.no_grad():
                self._lp_offset = _neg_log_norm(self._detached(), scale)
        return self._lp_offset

    def _neg_root2_scale(self) -> torch.Tensor:
        """`-sqrt(2) * scale`, negated again where the interval is reflected (cached)."""
        if self._y_scale is None:
            with torch.no_grad():
                flip, scale = self._detached().flip, self._params()[1]
                self._y_scale = torch.where(flip, _SQRT2 * scale, -_SQRT2 * scale)
        return self._y_scale

    # -- sampling ---------------------------------------------------------

    @torch.no_grad()
    def _quantile(self, w: torch.Tensor) -> torch.Tensor:
        """`n = -s / sqrt 2` for the reflected standardised `s` with `Phi(s) = Phi(lo) + w Z`.

        With `p = Phi(lo) + w Z` and `y = s / sqrt 2`: `erf(y) = 2p - 1`, so
        `y = erfinv(2p - 1)`, refined by one Newton step on `erfc(-y) = 2p`
        (which keeps the relative precision of small `p`). That is as accurate
        as `ndtri` and several times faster on CPU. Quantiles in the outer
        `_P_TAIL` tails, where `2p - 1` has lost the digits of `p`, are
        redone with `ndtri`, or in log space where `Phi(hi)` underflows.
        """
        c = self._detached()
        two_p = torch.addcmul(c.two_phi_lo, w, c.two_mass)
        n = torch.sub(1.0, two_p)  # -erf(y) = erf(-y)
        # In the outer tails erfinv may return inf or nan: those elements are redone below.
        tail = n.abs() > 1.0 - 2 * _P_TAIL if c.any_tail else None
        n.erfinv_()  # -y
        residual = torch.special.erfc(n).sub_(two_p)  # erfc(-y) - 2p
        n.add_(n.square().exp_().mul_(residual), alpha=_HALF_SQRT_PI)
        if tail is not None:
            n = self._tail_fixup(n, w, two_p, tail, c)
        return n

    def _tail_fixup(
        self, n: torch.Tensor, w: torch.Tensor, two_p: torch.Tensor, tail: torch.Tensor, c: _Consts
    ) -> torch.Tensor:
        """Recompute the quantiles whose `p` lies outside `[_P_TAIL, 1 - _P_TAIL]`."""
        if _on_host(n):
            # few elements: gather them, fix them, scatter them back
            index = tail.nonzero(as_tuple=True)
            lo, hi = c.lo.expand_as(w)[index], c.hi.expand_as(w)[index]
            n[index] = self._tail_quantile(two_p[index], w[index], lo, hi, c.any_extreme)
            return n
        fixed = self._tail_quantile(two_p, w, c.lo, c.hi, c.any_extreme)
        return torch.where(tail, fixed, n)

    @staticmethod
    def _tail_quantile(
        two_p: torch.Tensor, w: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, extreme: bool
    ) -> torch.Tensor:
        """`-s / sqrt 2` from `ndtri` on whichever side of 1/2 `p` is accurate.

        Near `p = 1` the complement `1 - p = (1 - w) Phi(-lo) + w Phi(-hi)`
        keeps the digits that `p` itself cannot hold; where `Phi(hi)`
        underflows, the quantile is found in log space.
        """
        finfo = torch.finfo(two_p.dtype)
        upper = two_p > 1.0
        # 2 (1 - p), from the upper tails of both bounds
        two_q = torch.lerp(_two_phi(-lo), _two_phi(-hi), w)
        half = (0.5 * torch.where(upper, two_q, two_p)).clamp(finfo.tiny, 0.5)
        s = torch.special.ndtri(half)
        s = torch.where(upper, -s, s)
        if extreme:
            log_phi_lo, log_phi_hi = _log_ndtr(lo), _log_ndtr(hi)
            log_p = torch.logaddexp(log_phi_lo + torch.log1p(-w), log_phi_hi + torch.log(w))
            deep = hi < _tail_start(hi.dtype) + 1.0
            s = torch.where(deep, _ndtri_exp(log_p), s)
        return s * -_INV_SQRT2

    def _to_value(self, n: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Map `n` (see `_quantile`, drawn at fraction `w`) back into `[a, b]`."""
        loc, scale, a, b = self._params()
        if not self._needs_grad():
            x = torch.addcmul(loc, self._neg_root2_scale(), n)
            return torch.clamp(x, a, b).to(self.loc.dtype)
        c = self._detached()
        z = torch.where(c.flip, n, -n).mul_(_SQRT2)
        z = torch.minimum(torch.maximum(z, c.alpha), c.beta)
        log_w, log_1mw = torch.log(w), torch.log1p(-w)
        # U, the CDF of z in the original orientation, is 1 - w where reflected
        log_cdf = torch.where(c.flip, log_1mw, log_w)
        log_sf = torch.where(c.flip, log_w, log_1mw)
        alpha = _standardize(a, loc, scale)
        beta = _standardize(b, loc, scale)
        z = _ImplicitReparam.apply(alpha, beta, z, log_cdf, log_sf)
        return torch.clamp(loc + scale * z, a, b).to(self.loc.dtype)

    def rsample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """Reparameterised samples of shape `sample_shape + batch_shape`.

        Gradients reach `loc`, `scale`, `a` and `b` through the implicit
        reparameterisation formula (first order).
        """
        shape = self._extended_shape(_as_shape(sample_shape))
        w = torch.rand(shape, dtype=self._params()[0].dtype, device=self.loc.device)
        return self._to_value(self._quantile(w), w)

    def sample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """Samples of shape `sample_shape + batch_shape`, without gradients."""
        with torch.no_grad():
            return self.rsample(sample_shape)

    # -- densities --------------------------------------------------------

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-density of `value`; `-inf` outside `[a, b]`."""
        if self._validate_args:
            self._validate_sample(value)
        loc, scale, a, b = self._params()
        z = (value - loc) / scale
        lp = torch.addcmul(self._log_norm_offset(), z, z, value=-0.5)
        if not self._validate_args:
            lp = lp.masked_fill((value < a) | (value > b), -math.inf)
        return lp.to(torch.promote_types(value.dtype, self.loc.dtype))

    def cdf(self, value: torch.Tensor) -> torch.Tensor:
        """`P(X <= value)`: 0 below `a`, 1 above `b`."""
        if self._validate_args:
            self._validate_sample(value)
        c = self._tracked()
        loc, scale, _, _ = self._params()
        xi = (value - loc) / scale
        # the value on the reflected side, clamped into [lo, hi]
        s = torch.where(c.flip, -xi, xi)
        s = torch.minimum(torch.maximum(s, c.lo), c.hi)
        log_phi_s, log_phi_lo, log_phi_hi = _log_ndtr(s), _log_ndtr(c.lo), _log_ndtr(c.hi)
        log_z = _log_z(c)
        below = torch.exp(log_phi_s + _log1mexp(log_phi_lo - log_phi_s) - log_z)
        above = torch.exp(log_phi_hi + _log1mexp(log_phi_s - log_phi_hi) - log_z)
        out = torch.where(c.flip, above, below).clamp(0.0, 1.0)
        return out.to(torch.promote_types(value.dtype, self.loc.dtype))

    def icdf(self, value: torch.Tensor) -> torch.Tensor:
        """The quantile function: the `x` in `[a, b]` with `cdf(x) == value`.

        Gradients reach the parameters through the same implicit formula as
        `rsample` (not through `value`).
        """
        value = torch.as_tensor(value, dtype=self._params()[0].dtype, device=self.loc.device)
        if self._validate_args and not bool(((value >= 0) & (value <= 1)).all()):
            raise ValueError(
                f"TruncatedNormal.icdf expects probabilities in [0, 1], got values "
                f"from {value.min().item()!r} to {value.max().item()!r}"
            )
        w = torch.where(self._detached().flip, 1.0 - value, value).detach()
        return self._to_value(self._quantile(w), w)

    # -- moments ----------------------------------------------------------

    def _moment_terms(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(m, v, log_z)` of the standardised, reflected distribution, in float64.

        `m = (phi(lo) - phi(hi)) / Z` is its mean and
        `v = (lo phi(lo) - hi phi(hi)) / Z` enters the variance and entropy.
        """
        wide = torch.float64 if self.loc.device.type != "mps" else self.loc.dtype
        loc, scale, a, b = (t.to(wide) for t in (self.loc, self.scale, self.a, self.b))
        if not self._needs_grad():
            loc, scale, a, b = loc.detach(), scale.detach(), a.detach(), b.detach()
        c = _consts(loc, scale, a, b)
        log_z = _log_z(c)
        # infinite bounds contribute nothing (phi(inf) = 0); keep inf * 0 out
        zero = torch.zeros((), dtype=wide, device=loc.device)
        lo = torch.where(torch.isinf(c.lo), zero, c.lo)
        hi = torch.where(torch.isinf(c.hi), zero, c.hi)
        # phi(lo) / Z and phi(hi) / Z, in log space so neither factor underflows alone
        w_lo = torch.where(
            torch.isinf(c.lo), zero, torch.exp(-0.5 * lo * lo - _LOG_SQRT_2PI - log_z)
        )
        w_hi = torch.where(
            torch.isinf(c.hi), zero, torch.exp(-0.5 * hi * hi - _LOG_SQRT_2PI - log_z)
        )
        m = w_lo - w_hi
        v = lo * w_lo - hi * w_hi
        return torch.where(c.flip, -m, m), v, log_z

    @property
    def mean(self) -> torch.Tensor:
        m, _, _ = self._moment_terms()
        return torch.clamp(self.loc + self.scale * m.to(self.loc.dtype), self.a, self.b)

    @property
    def mode(self) -> torch.Tensor:
        """`loc` clamped to `[a, b]`: the density is largest there."""
        return torch.clamp(self.loc, self.a, self.b)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The value a probabilistic module takes in deterministic mode: the `mode`."""
        return self.mode

    @property
    def variance(self) -> torch.Tensor:
        m, v, _ = self._moment_terms()
        var = (1.0 + v - m * m).clamp_min(0.0)
        return self.scale.pow(2) * var.to(self.loc.dtype)

    def entropy(self) -> torch.Tensor:
        _, v, log_z = self._moment_terms()
        h = _HALF_LOG_2PI_E + log_z + 0.5 * v
        return h.to(self.loc.dtype) + torch.log(self.scale)
