"""Categorical distributions over one-hot vectors, with a straight-through `rsample`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import distributions as D
from torch.nn import functional as F

__all__ = ["OneHotCategorical", "rand_one_hot"]


class _StraightThrough(torch.autograd.Function):
    """Returns `hard` in the forward pass and hands its gradient to `soft`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(soft: torch.Tensor, hard: torch.Tensor) -> torch.Tensor:
        return hard.view_as(hard)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def rand_one_hot(values: torch.Tensor, do_softmax: bool = True) -> torch.Tensor:
    """Draw one one-hot `torch.long` vector per row of the last dimension of `values`.

    Args:
        values: logits along the last dimension, or probabilities if
            `do_softmax=False` (then each row must sum to 1).
        do_softmax: apply a softmax to `values` first.

    Examples:
        >>> import torch
        >>> from td_distributions import rand_one_hot
        >>> out = rand_one_hot(torch.tensor([[0.0, 0.0, 50.0]]))
        >>> out, out.dtype
        (tensor([[0, 0, 1]]), torch.int64)
    """
    probs = values.softmax(-1) if do_softmax else values
    index = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1])
    return F.one_hot(index, probs.shape[-1])


class OneHotCategorical(D.OneHotCategorical):
    """A categorical distribution over one-hot vectors, that can also be reparameterised.

    Shapes follow `torch.distributions.OneHotCategorical`: the categories
    are the last dimension of `logits`/`probs` and form the event
    (`event_shape == (num_categories,)`). As upstream, `sample`,
    `mode` and `deterministic_sample` return `torch.long` one-hot
    tensors, and `log_prob` accepts a one-hot tensor of any dtype.

    `rsample` is the straight-through Gumbel-softmax estimator: its value
    is an exact one-hot sample (the Gumbel-max trick), and its gradient is that
    of the relaxed sample `softmax(logits + gumbel)` (temperature 1), as
    upstream documents. Unlike upstream, it works whether the distribution was
    built from `logits` or from `probs`.

    Args:
        logits: unnormalised log-probabilities, categories last.
        probs: probabilities, categories last (each row sums to 1). Pass
            `logits` or `probs`, not both.
        validate_args: check the parameters and the values given to
            `log_prob`; `None` follows the global default of
            `torch.distributions`.

    Raises:
        ValueError: if neither or both of `logits` and `probs` are given, or
            (with validation) if `probs` is not a distribution.

    Examples:
        >>> import torch
        >>> from td_distributions import OneHotCategorical
        >>> dist = OneHotCategorical(logits=torch.tensor([0.0, 2.0, 1.0]))
        >>> dist.mode
        tensor([0, 1, 0])
        >>> dist.batch_shape, dist.event_shape, dist.sample((4,)).shape
        (torch.Size([]), torch.Size([3]), torch.Size([4, 3]))
        >>> weights = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x = OneHotCategorical(probs=weights / weights.sum()).rsample()
        >>> (x * torch.arange(3.0)).sum().backward()
        >>> weights.grad is not None
        True
    """

    has_rsample = True

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        validate_args: bool | None = None,
    ) -> None:
        if (logits is None) == (probs is None):
            raise ValueError(
                "OneHotCategorical needs exactly one of logits= or probs=, got "
                f"logits={'None' if logits is None else 'a tensor'}, "
                f"probs={'None' if probs is None else 'a tensor'}"
            )
        super().__init__(probs=probs, logits=logits, validate_args=validate_args)

    def expand(
        self, batch_shape: torch.Size | Sequence[int], _instance: Any = None
    ) -> OneHotCategorical:
        new = self._get_checked_instance(OneHotCategorical, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def num_categories(self) -> int:
        return self._categorical._num_events

    def sample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """One-hot `torch.long` samples of shape `sample_shape + batch_shape + (K,)`."""
        shape = torch.Size(()) if sample_shape is None else torch.Size(sample_shape)
        index = self._categorical.sample(shape)
        return F.one_hot(index, self.num_categories)

    def rsample(self, sample_shape: torch.Size | Sequence[int] | None = None) -> torch.Tensor:
        """Straight-through samples: one-hot values, gradients of the relaxed sample.

        Returns a floating tensor of shape `sample_shape + batch_shape + (K,)`.
        """
        shape = torch.Size(()) if sample_shape is None else torch.Size(sample_shape)
        logits = self.logits.expand(shape + self.logits.shape)
        gumbel = -torch.empty_like(logits).exponential_().log()
        scores = logits + gumbel
        soft = scores.softmax(-1)
        hard = F.one_hot(scores.detach().argmax(-1), self.num_categories).to(soft.dtype)
        return _StraightThrough.apply(soft, hard)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """The log-probability of the category of `value`, a one-hot tensor (any dtype).

        With validation on, `value` is checked once (one-hot, shape), as
        `torch.distributions.OneHotCategorical` does; the category is then read
        with one `gather` (torch's route checks the category index a second time).
        """
        if self._validate_args:
            self._validate_sample(value)
        index = value.argmax(-1, keepdim=True)
        logits = self.logits
        if index.shape[:-1] != logits.shape[:-1]:  # sample dims in front: broadcast
            index, logits = torch.broadcast_tensors(index, logits)
            index = index[..., :1]
        return logits.gather(-1, index).squeeze(-1)

    @property
    def mode(self) -> torch.Tensor:
        """One-hot `torch.long` encoding of the most likely category (the first, on ties)."""
        return F.one_hot(self.logits.argmax(-1), self.num_categories)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The `mode`."""
        return self.mode
