"""Drawing a value from a distribution for an interaction type, with an optional generator.

`draw` is what `ProbabilisticTensorDictModule` writes: a sample (`RANDOM`,
reparametrised when possible, `num_samples` of them) or a statistic. A
generator (`torch.Generator`, an int seed, or the key of one in the input
TensorDict) makes sampling reproducible without touching the global RNG:
`torch.distributions` samples from the global RNG only, so the generator's
state is swapped in for the draw and read back after it (`use_generator`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import distributions as D

from td_core import (
    InteractionType,
    NestedKey,
    NonTensorData,
    TensorDictBase,
    is_non_tensor,
    unravel_key,
)

__all__ = ["draw", "use_generator", "check_generator", "generator_for_call"]


def _empirical(dist: Any, what: str, n: int, generator: torch.Generator | None) -> torch.Tensor:
    with use_generator(generator):
        samples = dist.sample((n,))
    if what == "mean":
        return samples.float().mean(0) if not samples.is_floating_point() else samples.mean(0)
    if what == "median":
        return samples.median(0).values
    # mode: the sample with the highest log-probability, per batch element
    lp = dist.log_prob(samples)
    idx = lp.argmax(0, keepdim=True)
    idx = idx.reshape(idx.shape + (1,) * (samples.ndim - idx.ndim)).expand(1, *samples.shape[1:])
    return samples.gather(0, idx).squeeze(0)


def _statistic(dist: Any, what: str, n: int, generator: torch.Generator | None) -> Any:
    try:
        return getattr(dist, what)
    except (NotImplementedError, AttributeError):
        return _empirical(dist, what, n, generator)


def _relaxed_one_hot_mode(dist: Any) -> torch.Tensor:
    probs = dist.base_dist.probs
    return torch.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs)


def _logistic_normal_location(dist: Any) -> torch.Tensor:
    value = dist.loc
    for transform in dist.transforms:
        value = transform(value)
    return value


# `DETERMINISTIC` values of torch distributions without `deterministic_sample`, mean or
# mode (upstream patches these onto the classes; td leaves torch untouched)
DETERMINISTIC_FALLBACKS: dict[type, Callable[[Any], torch.Tensor]] = {
    D.RelaxedBernoulli: lambda dist: D.Bernoulli.mode.fget(dist),  # type: ignore[attr-defined]
    D.RelaxedOneHotCategorical: _relaxed_one_hot_mode,
    D.LogisticNormal: _logistic_normal_location,
}


def draw(
    dist: Any,
    kind: InteractionType,
    n_empirical_estimate: int = 1000,
    *,
    num_samples: torch.Size | None = None,
    generator: torch.Generator | None = None,
) -> Any:
    """A value of `dist` for `kind`: a sample (reparametrised when possible) or a statistic.

    `MODE`, `MEAN` and `MEDIAN` fall back to an estimate from
    `n_empirical_estimate` samples when the distribution does not define
    them. `DETERMINISTIC` uses `dist.deterministic_sample` when it exists,
    then `DETERMINISTIC_FALLBACKS` (relaxed Bernoulli and one-hot: the mode of
    the underlying discrete distribution; logistic normal: its transformed
    location), else the mean of a continuous distribution and the mode of a
    discrete one.
    `RANDOM` draws `num_samples` samples (one when `None`). Sampling draws
    from `generator` when it is given, leaving the global RNG untouched.

    Raises:
        RuntimeError: for a statistic of `LKJCholesky`, which has none.
    """
    if isinstance(dist, D.LKJCholesky) and kind in (
        InteractionType.DETERMINISTIC,
        InteractionType.MEAN,
        InteractionType.MODE,
    ):
        raise RuntimeError(
            f"DETERMINISTIC, MEAN and MODE are not implemented for {type(dist).__name__}: "
            "it defines no statistic; use InteractionType.RANDOM"
        )
    if kind is InteractionType.RANDOM:
        args = () if num_samples is None else (num_samples,)
        with use_generator(generator):
            if getattr(dist, "has_rsample", False):
                return dist.rsample(*args)
            return dist.sample(*args)
    if kind is InteractionType.DETERMINISTIC:
        try:
            return dist.deterministic_sample
        except AttributeError:
            pass
        fallback = DETERMINISTIC_FALLBACKS.get(type(dist))
        if fallback is not None:
            return fallback(dist)
        try:
            discrete = bool(getattr(dist.support, "is_discrete", False))
        except (NotImplementedError, AttributeError):
            discrete = False
        if discrete:
            return _statistic(dist, "mode", n_empirical_estimate, generator)
        try:
            return dist.mean
        except NotImplementedError:
            return _statistic(dist, "mode", n_empirical_estimate, generator)
    return _statistic(dist, kind.value, n_empirical_estimate, generator)


@contextlib.contextmanager
def use_generator(generator: torch.Generator | None) -> Iterator[None]:
    """Draw from `generator` inside the block instead of the global RNG.

    The global RNG state (of the generator's device) is saved, replaced by
    the generator's, and restored on exit; the generator's state advances by
    what the block drew. A no-op for `None` and under `torch.compile`.
    """
    if generator is None or torch.compiler.is_compiling():
        yield
        return
    device = generator.device
    if device.type == "cuda":
        with torch.random.fork_rng(devices=[device]):
            torch.cuda.set_rng_state(generator.get_state(), device)
            try:
                yield
            finally:
                generator.set_state(torch.cuda.get_rng_state(device))
        return
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(generator.get_state())
        try:
            yield
        finally:
            generator.set_state(torch.get_rng_state())


def check_generator(generator: Any, owner: str) -> tuple[torch.Generator | None, NestedKey | None]:
    """`(generator, key)` from a module's `generator` argument.

    A `torch.Generator` is used as is, an int seeds a new one, a key names
    where the input TensorDict holds a generator or a seed.

    Raises:
        TypeError: for anything else, naming what was given.
    """
    if generator is None:
        return None, None
    if isinstance(generator, torch.Generator):
        return generator, None
    if isinstance(generator, int) and not isinstance(generator, bool):
        return torch.Generator().manual_seed(generator), None
    if isinstance(generator, (str, tuple)):
        return None, unravel_key(generator)
    raise TypeError(
        f"{owner}: generator must be a torch.Generator, an int seed, a key of the input "
        f"TensorDict or None; got {generator!r} of type {type(generator).__name__}"
    )


def generator_for_call(
    key: NestedKey, tensordict: TensorDictBase, device: torch.device
) -> tuple[torch.Generator | None, Callable[[torch.Generator], None] | None]:
    """The generator stored at `key` of `tensordict`, and what to do after sampling.

    A stored `torch.Generator` is used (and advances in place). A stored seed
    (an int, or a one-element integer tensor) seeds a fresh generator on
    `device`; after sampling, the returned callback writes the next seed
    (drawn from that generator) back at `key`, in the seed's own form, so
    repeated calls follow one reproducible stream. Nothing stored: `(None, None)`.

    Raises:
        ValueError: for a tensor seed with more than one element.
        TypeError: for a value that is neither a generator nor a seed.
    """
    value = tensordict.get(key, None)
    if value is None:
        return None, None
    if is_non_tensor(value):
        value = value.data
    if isinstance(value, torch.Generator):
        return value, None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"generator key {key!r} holds a tensor of shape {list(value.shape)}; "
                "a seed is a one-element tensor"
            )
        seed, device, as_tensor = int(value.item()), value.device, True
    elif isinstance(value, int) and not isinstance(value, bool):
        seed, as_tensor = value, False
    else:
        raise TypeError(
            f"generator key {key!r} holds a {type(value).__name__}; expected a "
            "torch.Generator, an int seed or a one-element tensor seed"
        )
    generator = torch.Generator(device=device).manual_seed(seed)

    def write_next_seed(used: torch.Generator) -> None:
        nxt = torch.randint(0, 2**62, (), generator=used, dtype=torch.int64, device=device)
        tensordict.set(key, nxt if as_tensor else NonTensorData(int(nxt.item())))

    return generator, write_next_seed
