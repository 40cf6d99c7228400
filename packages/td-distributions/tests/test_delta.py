import math

import pytest
import torch

from td_distributions import Delta


def test_default_shapes_split_off_the_last_dimension():
    dist = Delta(torch.randn(3, 4))
    assert dist.batch_shape == (3,) and dist.event_shape == (4,)
    scalar = Delta(torch.tensor(2.0))
    assert scalar.batch_shape == () and scalar.event_shape == ()


@pytest.mark.parametrize(
    ("kwargs", "batch", "event"),
    [
        ({"batch_shape": [3]}, (3,), (4, 5)),
        ({"event_shape": [5]}, (3, 4), (5,)),
        ({"batch_shape": [3, 4], "event_shape": [5]}, (3, 4), (5,)),
        ({"batch_shape": [3, 4, 5], "event_shape": []}, (3, 4, 5), ()),
        ({"batch_shape": [], "event_shape": []}, (3, 4), (5,)),
    ],
)
def test_explicit_shapes(kwargs, batch, event):
    dist = Delta(torch.zeros(3, 4, 5), **kwargs)
    assert dist.batch_shape == batch and dist.event_shape == event
    assert dist.log_prob(torch.zeros(3, 4, 5)).shape == batch


def test_sample_and_rsample_return_param():
    param = torch.randn(3, 4, requires_grad=True)
    dist = Delta(param)
    torch.testing.assert_close(dist.sample(), param.detach())
    assert not dist.sample().requires_grad
    assert dist.sample((2, 5)).shape == (2, 5, 3, 4)
    out = dist.rsample((2,))
    assert out.shape == (2, 3, 4)
    out.sum().backward()
    torch.testing.assert_close(param.grad, torch.full((3, 4), 2.0))


def test_summaries_are_param_itself():
    param = torch.randn(3, 4)
    dist = Delta(param)
    assert dist.mode is param and dist.mean is param and dist.deterministic_sample is param
    torch.testing.assert_close(dist.variance, torch.zeros(3, 4))


def test_log_prob_inf_on_match_and_minus_inf_elsewhere():
    param = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    dist = Delta(param)
    value = torch.tensor([[1.0, 2.0], [3.0, 4.5]])
    lp = dist.log_prob(value)
    assert lp.tolist() == [math.inf, -math.inf]
    # every element of the event must match
    assert dist.log_prob(torch.tensor([[1.0, 2.1], [3.0, 4.0]])).tolist() == [-math.inf, math.inf]
    # sample dimensions broadcast
    assert dist.log_prob(param.expand(7, 2, 2)).shape == (7, 2)


def test_log_prob_tolerances():
    dist = Delta(torch.tensor([1000.0]), atol=0.0, rtol=1e-3)
    assert dist.log_prob(torch.tensor([1000.9])).item() == math.inf
    assert dist.log_prob(torch.tensor([1001.1])).item() == -math.inf
    exact = Delta(torch.tensor([1.0]), atol=0.0, rtol=0.0)
    assert exact.log_prob(torch.tensor([1.0])).item() == math.inf
    loose = Delta(torch.tensor([1.0]), atol=0.5, rtol=0.0)
    assert loose.log_prob(torch.tensor([1.4])).item() == math.inf


def test_log_prob_of_integer_param_is_floating():
    dist = Delta(torch.tensor([1, 2]))
    lp = dist.log_prob(torch.tensor([1, 2]))
    assert lp.dtype == torch.get_default_dtype() and lp.item() == math.inf


def test_entropy_is_not_implemented():
    with pytest.raises(NotImplementedError, match="entropy"):
        Delta(torch.zeros(3)).entropy()


def test_expand():
    dist = Delta(torch.zeros(1, 4)).expand((5,))
    assert dist.batch_shape == (5,) and dist.sample().shape == (5, 4)


def test_update_replaces_param():
    dist = Delta(torch.zeros(2))
    dist.update(torch.ones(2))
    torch.testing.assert_close(dist.sample(), torch.ones(2))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((torch.zeros(3, 4),), {"batch_shape": [5], "event_shape": [4]}, ValueError, r"\[3, 4\]"),
        ((torch.zeros(3),), {"atol": -1.0}, ValueError, "atol"),
        (([1.0, 2.0],), {}, TypeError, "list"),
    ],
)
def test_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        Delta(*args, **kwargs)


def test_log_prob_validates_event_shape():
    with pytest.raises(ValueError):
        Delta(torch.zeros(3, 4)).log_prob(torch.zeros(3, 5))


def test_matches_upstream():
    upstream = pytest.importorskip("tensordict.nn.distributions")
    param = torch.randn(3, 4)
    ours, theirs = Delta(param), upstream.Delta(param)
    assert ours.batch_shape == theirs.batch_shape and ours.event_shape == theirs.event_shape
    for value in (param, param + 1, torch.where(torch.arange(4) < 2, param, param + 1)):
        torch.testing.assert_close(ours.log_prob(value), theirs.log_prob(value))
    torch.testing.assert_close(ours.sample((2,)), theirs.sample((2,)))


def test_log_prob_follows_param_changed_in_place_or_replaced() -> None:
    param = torch.zeros(4, 2)
    dist = Delta(param, rtol=0.5)
    assert (dist.log_prob(torch.zeros(4, 2)) == math.inf).all()
    param.add_(10.0)  # the cached tolerance follows the tensor's version
    assert (dist.log_prob(torch.full((4, 2), 14.0)) == math.inf).all()  # |4| <= 1e-6 + 0.5 * 10
    assert (dist.log_prob(torch.zeros(4, 2)) == -math.inf).all()
    dist.update(torch.ones(4, 2))
    assert (dist.log_prob(torch.ones(4, 2)) == math.inf).all()
    assert (dist.log_prob(torch.full((4, 2), 2.0)) == -math.inf).all()


@pytest.mark.parametrize("sample_shape", [None, (), (3,), torch.Size([2, 1])])
@pytest.mark.parametrize("shape", [(), (4,), (4, 2)])
def test_rsample_shape(shape: tuple[int, ...], sample_shape: object) -> None:
    param = torch.randn(shape, requires_grad=True)
    out = Delta(param).rsample(sample_shape)  # type: ignore[arg-type]
    assert out.shape == torch.Size(sample_shape or ()) + param.shape
    assert out.requires_grad and torch.equal(out.detach(), param.detach().expand(out.shape))
