import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from td_distributions import TruncatedNormal

LOC, SCALE = 0.7, 1.3

# standardised (alpha, beta): central, one-sided, far tails on both sides, infinite bounds
GRID = [
    (-1.0, 2.0),
    (0.5, 1.0),
    (-0.001, 0.001),
    (5.0, 10.0),
    (-10.0, -5.0),
    (8.0, 9.0),
    (-9.0, -8.0),
    (12.0, 15.0),
    (-15.0, -12.0),
    (29.0, 30.0),
    (-30.0, -29.0),
    (-math.inf, 1.0),
    (2.0, math.inf),
    (-math.inf, math.inf),
    (-40.0, 40.0),
]
DTYPES = [torch.float32, torch.float64]


def _dist(alpha, beta, dtype, **kwargs):
    a = LOC + SCALE * alpha
    b = LOC + SCALE * beta
    t = lambda v: torch.tensor(v, dtype=dtype)  # noqa: E731
    return TruncatedNormal(t(LOC), t(SCALE), t(a), t(b), **kwargs), stats.truncnorm(
        alpha, beta, loc=LOC, scale=SCALE
    )


def _entropy_reference(alpha, beta):
    """Entropy by quadrature (scipy's closed form loses all digits in the upper tail)."""
    ref = stats.truncnorm(alpha, beta, loc=LOC, scale=SCALE)
    lo, hi = ref.ppf(1e-12), ref.ppf(1 - 1e-12)

    def integrand(x):
        lp = ref.logpdf(x)
        return -np.exp(lp) * lp

    return integrate.quad(integrand, lo, hi, epsabs=1e-13, epsrel=1e-11, limit=200)[0]


def _tol(dtype):
    return 1e-4 if dtype == torch.float32 else 1e-10


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("alpha", "beta"), GRID)
def test_matches_scipy_log_prob_cdf_icdf(alpha, beta, dtype):
    dist, ref = _dist(alpha, beta, dtype)
    qs = np.array([1e-3, 0.01, 0.3, 0.5, 0.7, 0.99, 0.999])
    xs = ref.ppf(qs)
    x = torch.tensor(xs, dtype=dtype)
    tol = _tol(dtype)

    lp = dist.log_prob(x).double().numpy()
    assert np.all(np.isfinite(lp))
    np.testing.assert_allclose(lp, ref.logpdf(xs), rtol=tol, atol=tol * 10)

    cdf = dist.cdf(x).double().numpy()
    np.testing.assert_allclose(cdf, ref.cdf(xs), rtol=0, atol=tol * 10)

    icdf = dist.icdf(torch.tensor(qs, dtype=dtype)).double().numpy()
    assert np.all(np.isfinite(icdf))
    # the quantile's own conditioning: an error of one ulp in q moves x by ulp / pdf
    ulp = float(torch.finfo(dtype).eps)
    allowed = tol * (1 + np.abs(xs)) + 4 * ulp / ref.pdf(xs)
    assert np.all(np.abs(icdf - xs) <= allowed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("alpha", "beta"), [g for g in GRID if g != (-0.001, 0.001)])
def test_matches_scipy_moments(alpha, beta, dtype):
    dist, ref = _dist(alpha, beta, dtype)
    tol = _tol(dtype)
    for ours in (dist.mean, dist.variance, dist.entropy(), dist.stddev):
        assert torch.isfinite(ours).all()
    np.testing.assert_allclose(float(dist.mean), ref.mean(), rtol=tol)
    # the variance of a far tail is a difference of numbers ~alpha^2 times larger
    np.testing.assert_allclose(float(dist.variance), ref.var(), rtol=max(tol, 1e-6))
    np.testing.assert_allclose(float(dist.entropy()), _entropy_reference(alpha, beta), atol=1e-5)


def test_narrow_interval_moments_are_close():
    dist, ref = _dist(-0.001, 0.001, torch.float64)
    np.testing.assert_allclose(float(dist.mean), ref.mean(), atol=1e-12)
    np.testing.assert_allclose(float(dist.variance), ref.var(), rtol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("alpha", "beta"),
    [(-1.0, 2.0), (0.5, 1.0), (5.0, 10.0), (-10.0, -5.0), (8.0, 9.0), (12.0, 15.0), (-30.0, -29.0)]
    + [(-math.inf, 1.0), (-math.inf, math.inf), (-4.5, 7.0)],
)
def test_samples_follow_scipy(alpha, beta, dtype):
    dist, ref = _dist(alpha, beta, dtype)
    torch.manual_seed(0)
    x = dist.rsample((20_000,))
    assert x.dtype == dtype and x.shape == (20_000,)
    assert torch.isfinite(x).all()
    assert bool((x >= dist.a).all()) and bool((x <= dist.b).all())
    assert stats.kstest(x.double().numpy(), ref.cdf).pvalue > 1e-3


def test_batched_parameters_mix_central_tail_and_extreme_intervals():
    alpha = torch.tensor([-1.0, -6.0, 8.0, -30.0, 11.5, -math.inf, 0.0], dtype=torch.float64)
    beta = torch.tensor([2.0, -5.0, 9.0, -29.0, 40.0, 0.5, math.inf], dtype=torch.float64)
    dist = TruncatedNormal(
        torch.full_like(alpha, LOC),
        torch.full_like(alpha, SCALE),
        LOC + SCALE * alpha,
        LOC + SCALE * beta,
    )
    torch.manual_seed(1)
    x = dist.sample((4000,))
    assert x.shape == (4000, 7)
    for i in range(7):
        ref = stats.truncnorm(alpha[i].item(), beta[i].item(), loc=LOC, scale=SCALE)
        assert stats.kstest(x[:, i].numpy(), ref.cdf).pvalue > 1e-3, i
        np.testing.assert_allclose(dist.mean[i].item(), ref.mean(), rtol=1e-9)


def test_float32_quantiles_match_float64():
    # the erfinv + Newton quantile and the ndtri tail fix-up agree with float64
    alpha = torch.tensor([-1.0, -6.0, 3.0, -4.2])
    beta = torch.tensor([2.0, -5.0, 9.0, 4.1])
    q = torch.linspace(0, 1, 2001)[:, None].expand(-1, 4)
    lo32 = TruncatedNormal(torch.zeros(4), torch.ones(4), alpha, beta).icdf(q)
    lo64 = TruncatedNormal(
        torch.zeros(4, dtype=torch.float64),
        torch.ones(4, dtype=torch.float64),
        alpha.double(),
        beta.double(),
    ).icdf(q.double())
    d64 = TruncatedNormal(
        torch.zeros(4, dtype=torch.float64),
        torch.ones(4, dtype=torch.float64),
        alpha.double(),
        beta.double(),
    )
    # within a few ulps of x, or of q (mapped through the density) where x is ill-conditioned
    eps = torch.finfo(torch.float32).eps
    pdf = d64.log_prob(lo64).exp()
    allowed = 4 * eps * lo64.abs() + 4 * eps / pdf + 1e-12
    assert bool(((lo32.double() - lo64).abs() <= allowed).all())


def test_icdf_inverts_cdf():
    dist = TruncatedNormal(torch.tensor([0.0, 1.0, -2.0]), torch.tensor([1.0, 0.5, 2.0]), -1.0, 3.0)
    x = dist.sample((100,)).double()
    d64 = TruncatedNormal(dist.loc.double(), dist.scale.double(), dist.a.double(), dist.b.double())
    torch.testing.assert_close(d64.icdf(d64.cdf(x)), x, rtol=1e-9, atol=1e-9)


# -- gradients --------------------------------------------------------------


def _params64(alpha, beta):
    loc = torch.tensor([LOC], dtype=torch.float64, requires_grad=True)
    scale = torch.tensor([SCALE], dtype=torch.float64, requires_grad=True)
    a = torch.tensor([LOC + SCALE * alpha], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([LOC + SCALE * beta], dtype=torch.float64, requires_grad=True)
    return loc, scale, a, b


@pytest.mark.parametrize(
    ("alpha", "beta"), [(-1.0, 2.0), (0.5, 1.0), (8.0, 9.0), (-10.0, -5.0), (-6.0, 7.0)]
)
def test_rsample_gradient_matches_finite_differences(alpha, beta):
    params = _params64(alpha, beta)

    def draw(*p):
        torch.manual_seed(123)
        return TruncatedNormal(*p).rsample((64,))

    x = draw(*params)
    weights = torch.linspace(-1, 1, 64, dtype=torch.float64)[:, None]
    (x * weights).sum().backward()
    for i, p in enumerate(params):
        eps = 1e-6
        up = [q.detach().clone() for q in params]
        down = [q.detach().clone() for q in params]
        up[i] += eps
        down[i] -= eps
        fd = ((draw(*up) - draw(*down)) * weights).sum() / (2 * eps)
        assert p.grad is not None and torch.isfinite(p.grad).all()
        torch.testing.assert_close(p.grad.sum(), fd, rtol=1e-5, atol=1e-7)


def test_rsample_gradient_finite_in_extreme_tail():
    loc = torch.tensor([0.0, 0.0], requires_grad=True)
    scale = torch.tensor([1.0, 1.0], requires_grad=True)
    dist = TruncatedNormal(loc, scale, torch.tensor([20.0, -math.inf]), torch.tensor([21.0, -25.0]))
    x = dist.rsample((100,))
    assert torch.isfinite(x).all()
    x.sum().backward()
    assert torch.isfinite(loc.grad).all() and torch.isfinite(scale.grad).all()
    # a sample pinned near the bound nearest to loc moves with loc almost one to one
    assert loc.grad[0] > 0


@pytest.mark.parametrize(
    ("alpha", "beta"), [(-1.0, 2.0), (8.0, 9.0), (-12.5, -11.0), (-math.inf, 0.5)]
)
def test_log_prob_moments_and_cdf_gradcheck(alpha, beta):
    loc, scale, a, b = _params64(alpha, beta)
    ref = stats.truncnorm(alpha, beta, loc=LOC, scale=SCALE)
    x = torch.tensor(ref.ppf([0.2, 0.6]), dtype=torch.float64)
    finite = [t for t in (a, b) if torch.isfinite(t).all()]

    def fns(loc, scale, *bounds):
        full = list(bounds)
        lo = full.pop(0) if torch.isfinite(a).all() else a.detach()
        hi = full.pop(0) if torch.isfinite(b).all() else b.detach()
        d = TruncatedNormal(loc, scale, lo, hi)
        return d.log_prob(x), d.mean, d.variance, d.entropy(), d.cdf(x)

    assert torch.autograd.gradcheck(fns, (loc, scale, *finite))


def test_infinite_bounds_give_finite_gradients():
    loc = torch.zeros(3, requires_grad=True)
    dist = TruncatedNormal(
        loc, 1.3, torch.tensor([-math.inf, -math.inf, 2.0]), torch.tensor([math.inf, 1.0, math.inf])
    )
    value = torch.tensor([0.0, 0.0, 3.0])
    total = dist.entropy() + dist.mean + dist.variance + dist.log_prob(value) + dist.cdf(value)
    (total.sum() + dist.rsample((10,)).sum()).backward()
    assert torch.isfinite(loc.grad).all()
    torch.testing.assert_close(
        dist.entropy()[0], torch.tensor(0.5 * math.log(2 * math.pi * math.e) + math.log(1.3))
    )


# -- API ----------------------------------------------------------------------


def test_shapes_broadcast_and_sample_shape():
    dist = TruncatedNormal(torch.zeros(3, 1), torch.ones(4), -1.0, torch.full((3, 4), 2.0))
    assert dist.batch_shape == (3, 4) and dist.event_shape == ()
    assert dist.sample().shape == (3, 4)
    assert dist.rsample((2, 5)).shape == (2, 5, 3, 4)
    assert dist.log_prob(torch.zeros(7, 3, 4)).shape == (7, 3, 4)
    assert dist.has_rsample
    assert dist.expand((6, 3, 4)).sample().shape == (6, 3, 4)
    assert dist.expand((6, 3, 4)).mean.shape == (6, 3, 4)


def test_mode_and_deterministic_sample_clamp_loc():
    dist = TruncatedNormal(torch.tensor([-3.0, 0.5, 3.0]), 1.0, -1.0, 2.0)
    torch.testing.assert_close(dist.mode, torch.tensor([-1.0, 0.5, 2.0]))
    torch.testing.assert_close(dist.deterministic_sample, dist.mode)


def test_support_is_the_interval():
    dist = TruncatedNormal(0.0, 1.0, -1.0, 2.0)
    assert bool(dist.support.check(torch.tensor(1.5)))
    assert not bool(dist.support.check(torch.tensor(2.5)))


def test_sample_has_no_gradient_rsample_does():
    loc = torch.zeros(2, requires_grad=True)
    dist = TruncatedNormal(loc, 1.0, -1.0, 1.0)
    assert not dist.sample().requires_grad
    assert dist.rsample().requires_grad


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scale": -1.0}, "scale"),
        ({"scale": 0.0}, "scale"),
        ({"a": 2.0, "b": 1.0}, "a < b"),
        ({"a": 1.0, "b": 1.0}, "a < b"),
        ({"loc": math.nan}, "loc"),
    ],
)
def test_validation_errors(kwargs, match):
    args = {"loc": 0.0, "scale": 1.0, "a": -1.0, "b": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        TruncatedNormal(**{k: torch.tensor(v) for k, v in args.items()})
    # without validation, no error
    TruncatedNormal(**{k: torch.tensor(v) for k, v in args.items()}, validate_args=False)


def test_a_not_below_b_error_names_values_and_index():
    with pytest.raises(ValueError, match=r"a=3\.0 and b=2\.0 at batch index \(1,\)"):
        TruncatedNormal(torch.zeros(2), 1.0, torch.tensor([0.0, 3.0]), 2.0)


def test_log_prob_outside_support():
    with pytest.raises(ValueError, match="support"):
        TruncatedNormal(0.0, 1.0, -1.0, 1.0).log_prob(torch.tensor(2.0))
    lp = TruncatedNormal(0.0, 1.0, -1.0, 1.0, validate_args=False).log_prob(
        torch.tensor([2.0, -3.0, 0.0])
    )
    assert lp[0] == -math.inf and lp[1] == -math.inf and torch.isfinite(lp[2])


def test_icdf_rejects_probabilities_outside_unit_interval():
    with pytest.raises(ValueError, match="probabilities in"):
        TruncatedNormal(0.0, 1.0, -1.0, 1.0).icdf(torch.tensor([0.5, 1.5]))


def test_matches_upstream_where_upstream_is_accurate():
    upstream = pytest.importorskip("tensordict.nn.distributions")
    loc = torch.randn(50, dtype=torch.float64)
    scale = torch.rand(50, dtype=torch.float64) + 0.5
    a, b = loc - 1.0, loc + 1.5
    ours = TruncatedNormal(loc, scale, a, b)
    theirs = upstream.TruncatedNormal(loc, scale, a, b)
    x = ours.sample()
    torch.testing.assert_close(ours.log_prob(x), theirs.log_prob(x))
    torch.testing.assert_close(ours.mean, theirs.mean)
    torch.testing.assert_close(ours.variance, theirs.variance)
    torch.testing.assert_close(ours.entropy(), theirs.entropy())
    torch.testing.assert_close(ours.cdf(x), theirs.cdf(x))


def test_works_under_vmap():
    locs = torch.randn(5, 3)
    x = torch.zeros(3)

    def build(loc):
        return TruncatedNormal(
            loc, torch.ones(3), torch.full((3,), -1.0), torch.full((3,), 25.0), validate_args=False
        )

    lp = torch.func.vmap(lambda loc: build(loc).log_prob(x))(locs)
    torch.testing.assert_close(lp, TruncatedNormal(locs, 1.0, -1.0, 25.0).log_prob(x.expand(5, 3)))
    mean = torch.func.vmap(lambda loc: build(loc).mean)(locs)
    torch.testing.assert_close(mean, TruncatedNormal(locs, 1.0, -1.0, 25.0).mean)
    samples = torch.func.vmap(lambda loc: build(loc).rsample((100,)), randomness="different")(locs)
    assert samples.shape == (5, 100, 3) and bool(((samples >= -1) & (samples <= 25)).all())


def test_branchless_path_under_vmap_matches_host_path_in_far_tails():
    # under vmap no host checks run: every branch, including log-space sampling, is taken
    loc = torch.zeros(4, dtype=torch.float64)
    a = torch.tensor([20.0, -6.0, -1.0, -math.inf], dtype=torch.float64)
    b = torch.tensor([21.0, -5.0, 9.0, -40.0], dtype=torch.float64)

    def draw(loc):
        return TruncatedNormal(loc, 1.0, a, b, validate_args=False).rsample((4000,))

    torch.manual_seed(0)
    x = torch.func.vmap(draw, randomness="different")(loc[None].expand(2, 4))
    assert x.shape == (2, 4000, 4) and torch.isfinite(x).all()
    for i in range(4):
        ref = stats.truncnorm(a[i].item(), b[i].item())
        assert stats.kstest(x[:, :, i].flatten().numpy(), ref.cdf).pvalue > 1e-3, i


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computes_in_float32(dtype):
    lo = torch.tensor([-1.0, 3.0, -8.0, -2.0])
    hi = torch.tensor([2.0, 5.0, -7.0, 9.0])
    half = TruncatedNormal(
        torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype), lo.to(dtype), hi.to(dtype)
    )
    full = TruncatedNormal(torch.zeros(4), torch.ones(4), lo, hi)
    x = half.rsample((500,))
    assert x.dtype == dtype and torch.isfinite(x).all()
    assert bool(((x >= half.a) & (x <= half.b)).all())
    torch.testing.assert_close(half.mean.float(), full.mean, rtol=1e-2, atol=1e-2)
    value = full.mode.to(dtype)
    torch.testing.assert_close(
        half.log_prob(value).float(), full.log_prob(value.float()), rtol=1e-2, atol=1e-2
    )
    assert (
        half.cdf(value).dtype == dtype
        and half.icdf(torch.full((4,), 0.5, dtype=dtype)).dtype == dtype
    )
