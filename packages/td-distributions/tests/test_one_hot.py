import pytest
import torch
from torch import distributions as D

from td_distributions import OneHotCategorical, rand_one_hot


def _is_one_hot(x, k):
    return x.shape[-1] == k and bool(((x == 0) | (x == 1)).all()) and bool((x.sum(-1) == 1).all())


@pytest.mark.parametrize("param", ["logits", "probs"])
def test_sample_shapes_and_dtype(param):
    logits = torch.randn(3, 5)
    dist = OneHotCategorical(**{param: logits if param == "logits" else logits.softmax(-1)})
    assert dist.batch_shape == (3,) and dist.event_shape == (5,)
    x = dist.sample((2, 4))
    assert x.shape == (2, 4, 3, 5) and x.dtype == torch.long and _is_one_hot(x, 5)
    assert dist.log_prob(x).shape == (2, 4, 3)


def test_mode_is_first_maximum():
    dist = OneHotCategorical(logits=torch.tensor([[0.0, 2.0, 2.0], [3.0, 1.0, 0.0]]))
    assert dist.mode.tolist() == [[0, 1, 0], [1, 0, 0]]
    assert dist.mode.dtype == torch.long
    assert dist.deterministic_sample.tolist() == dist.mode.tolist()


def test_log_prob_and_entropy_match_categorical():
    logits = torch.randn(4, 6)
    dist, cat = OneHotCategorical(logits=logits), D.Categorical(logits=logits)
    index = torch.randint(6, (10, 4))
    value = torch.nn.functional.one_hot(index, 6)
    torch.testing.assert_close(dist.log_prob(value), cat.log_prob(index))
    torch.testing.assert_close(dist.log_prob(value.float()), cat.log_prob(index))
    torch.testing.assert_close(dist.entropy(), cat.entropy())
    torch.testing.assert_close(dist.mean, cat.probs)


@pytest.mark.parametrize("param", ["logits", "probs"])
def test_rsample_is_one_hot_with_gradient(param):
    raw = torch.randn(3, 4, requires_grad=True)
    arg = raw if param == "logits" else raw.softmax(-1)
    dist = OneHotCategorical(**{param: arg})
    x = dist.rsample((5,))
    assert x.shape == (5, 3, 4) and x.is_floating_point() and _is_one_hot(x, 4)
    (x * torch.arange(4.0)).sum().backward()
    assert raw.grad is not None and raw.grad.abs().sum() > 0


def test_rsample_gradient_is_the_relaxed_sample_gradient():
    logits = torch.randn(2, 3, requires_grad=True)
    weights = torch.randn(2, 3)
    torch.manual_seed(7)
    x = OneHotCategorical(logits=logits).rsample()
    (x * weights).sum().backward()
    # same Gumbel noise, drawn the same way
    torch.manual_seed(7)
    gumbel = -torch.empty(2, 3).exponential_().log()
    logits2 = logits.detach().clone().requires_grad_(True)
    soft = (logits2 + gumbel).softmax(-1)
    (soft * weights).sum().backward()
    torch.testing.assert_close(logits.grad, logits2.grad)
    # and the value is the Gumbel-max sample
    assert x.argmax(-1).tolist() == soft.argmax(-1).tolist()


def test_rsample_frequencies_follow_probs():
    probs = torch.tensor([0.1, 0.6, 0.3])
    torch.manual_seed(0)
    x = OneHotCategorical(probs=probs).rsample((20000,))
    torch.testing.assert_close(x.mean(0), probs, atol=0.015, rtol=0)
    y = OneHotCategorical(probs=probs).sample((20000,))
    torch.testing.assert_close(y.float().mean(0), probs, atol=0.015, rtol=0)


def test_needs_exactly_one_parameter():
    with pytest.raises(ValueError, match="exactly one"):
        OneHotCategorical()
    with pytest.raises(ValueError, match="exactly one"):
        OneHotCategorical(logits=torch.zeros(3), probs=torch.full((3,), 1 / 3))


def test_validation():
    with pytest.raises(ValueError, match="probs"):
        OneHotCategorical(probs=torch.tensor([-0.5, 1.5]))
    with pytest.raises(ValueError):
        OneHotCategorical(logits=torch.zeros(3)).log_prob(torch.tensor([1, 1, 0]))


def test_expand():
    dist = OneHotCategorical(logits=torch.zeros(3)).expand((4,))
    assert isinstance(dist, OneHotCategorical)
    assert dist.batch_shape == (4,) and dist.sample().shape == (4, 3)
    assert dist.rsample().shape == (4, 3)


def test_rand_one_hot():
    torch.manual_seed(0)
    out = rand_one_hot(torch.randn(5, 7))
    assert out.dtype == torch.long and _is_one_hot(out, 7)
    assert rand_one_hot(torch.tensor([0.0, 1.0, 0.0]), do_softmax=False).tolist() == [0, 1, 0]


def test_matches_upstream():
    upstream = pytest.importorskip("tensordict.nn.distributions")
    logits = torch.randn(4, 5)
    ours, theirs = OneHotCategorical(logits=logits), upstream.OneHotCategorical(logits=logits)
    assert ours.mode.tolist() == theirs.mode.tolist()
    x = theirs.sample((3,))
    assert x.dtype == ours.sample().dtype
    torch.testing.assert_close(ours.log_prob(x), theirs.log_prob(x))
    torch.testing.assert_close(ours.entropy(), theirs.entropy())


@pytest.mark.parametrize("build", ["logits", "probs"])
def test_log_prob_matches_torch_with_sample_dims(build: str) -> None:
    logits = torch.randn(6, 5)
    kwargs = {"logits": logits} if build == "logits" else {"probs": logits.softmax(-1)}
    ours, theirs = OneHotCategorical(**kwargs), D.OneHotCategorical(**kwargs)
    value = theirs.sample((3,))
    torch.testing.assert_close(ours.log_prob(value), theirs.log_prob(value))
    torch.testing.assert_close(ours.log_prob(value.float()), theirs.log_prob(value))
    torch.testing.assert_close(ours.log_prob(value[0, 0]), theirs.log_prob(value[0, 0]))


def test_log_prob_validates_the_value_as_torch() -> None:
    dist = OneHotCategorical(logits=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="support"):
        dist.log_prob(torch.tensor([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0]]))
    lax = OneHotCategorical(logits=torch.zeros(2, 3), validate_args=False)
    assert lax.log_prob(torch.tensor([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0]])).shape == (2,)
