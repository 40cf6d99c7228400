"""A distribution over TensorDicts, made of named component distributions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import distributions as D

from td_core import (
    NestedKey,
    TensorDict,
    TensorDictBase,
    composite_lp_aggregate,
    is_tensor_collection,
    unravel_key,
)

__all__ = ["CompositeDistribution"]

Key = str | tuple[str, ...]


def _add_suffix(key: Key, suffix: str) -> Key:
    """`"a" -> "a_log_prob"`; `("n", "a") -> ("n", "a_log_prob")`."""
    if isinstance(key, str):
        return key + suffix
    return (*key[:-1], key[-1] + suffix)


def _sum_to_batch(value: torch.Tensor, ndim: int) -> torch.Tensor:
    """Sum `value` over its dimensions beyond the first `ndim` (the event dimensions)."""
    if value.dim() > ndim:
        return value.flatten(ndim).sum(-1)
    return value


def _deterministic(name: Key, dist: D.Distribution) -> torch.Tensor:
    """`deterministic_sample` if the component has one; else its mode or mean.

    Discrete supports prefer the mode (a mean is not a valid value there),
    continuous ones the mean, each falling back on the other.
    """
    if hasattr(dist, "deterministic_sample"):
        return dist.deterministic_sample
    try:
        support = dist.support
        discrete = bool(support is not None and support.is_discrete)
    except NotImplementedError:
        discrete = False
    order = ("mode", "mean") if discrete else ("mean", "mode")
    for attr in order:
        try:
            return getattr(dist, attr)
        except NotImplementedError:
            continue
    raise NotImplementedError(
        f"component {name!r} ({type(dist).__name__}) has no deterministic_sample and "
        f"implements neither mean nor mode; use a distribution that defines one, or "
        f"sample it instead"
    )


class CompositeDistribution(D.Distribution):
    """A distribution made of named distributions, which samples and scores TensorDicts.

    Each component is built from one entry of `params`:
    `distribution_map[name](**params[name], **extra_kwargs[name])`. Samples,
    `mode`, `mean` and `deterministic_sample` are TensorDicts
    with one entry per component, at its name (or at `name_map[name]`). The
    batch size of `params` is the `batch_shape`; a sample of shape
    `sample_shape` has batch size `sample_shape + batch_shape`, and each
    component's event dimensions stay inside its entry (`event_shape` is
    `()`).

    `log_prob` and `entropy` return a TensorDict with one
    `<name>_log_prob` (`<name>_entropy`) entry per component, the suffix
    on the last part of a nested key, when aggregation is off; when it is on,
    one tensor summed over components and event dimensions. Aggregation is the
    `aggregate_probabilities` argument when given, else the td-core switch
    `composite_lp_aggregate` (off by default, as upstream 0.15).

    The distribution reads like a mapping from sample keys to components:
    `dist["cont"]`, `list(dist)`, `len(dist)`, `"cont" in dist`.

    Args:
        params: a TensorDict whose entry at each name of `distribution_map` is a
            TensorDict of keyword arguments of that component.
        distribution_map: maps names (nested keys) to distribution classes, or
            to callables taking the parameters as keywords and returning a
            distribution.
        name_map: maps some names to the keys their samples are written under.
        extra_kwargs: maps some names to extra keyword arguments (constants
            not in `params`).
        aggregate_probabilities: sum the log-probabilities and entropies over
            components (`True`), keep them per component (`False`), or
            follow `composite_lp_aggregate` (`None`).
        log_prob_key: key of the summed log-probability that
            `log_prob_composite` writes with `include_sum=True`
            (default `"sample_log_prob"`).
        entropy_key: key of the summed entropy that `entropy_composite`
            writes with `include_sum=True` (default `"entropy"`).

    Raises:
        TypeError: if `params` is not a TensorDict, an entry of it is not a
            TensorDict of parameters, or a value of `distribution_map` is
            not callable.
        KeyError: if `params` has no entry for a name, or `name_map` /
            `extra_kwargs` name a component that does not exist.
        ValueError: if `distribution_map` is empty, two components would be
            written under the same key, or a component's batch shape does not
            start with the batch size of `params`.

    Examples:
        >>> import torch
        >>> from torch import distributions as d
        >>> from td_core import TensorDict, set_composite_lp_aggregate
        >>> from td_distributions import CompositeDistribution
        >>> params = TensorDict(
        ...     {
        ...         "cont": {"loc": torch.zeros(3, 4), "scale": torch.ones(3, 4)},
        ...         ("nested", "disc"): {"logits": torch.zeros(3, 10)},
        ...     },
        ...     batch_size=[3],
        ... )
        >>> dist = CompositeDistribution(
        ...     params, distribution_map={"cont": d.Normal, ("nested", "disc"): d.Categorical}
        ... )
        >>> sample = dist.sample((4,))
        >>> sample.batch_size, sample["cont"].shape, sample["nested", "disc"].shape
        (torch.Size([4, 3]), torch.Size([4, 3, 4]), torch.Size([4, 3]))
        >>> lp = dist.log_prob(sample)
        >>> lp["cont_log_prob"].shape, lp["nested", "disc_log_prob"].shape
        (torch.Size([4, 3, 4]), torch.Size([4, 3]))
        >>> with set_composite_lp_aggregate(True):
        ...     dist.log_prob(sample).shape
        torch.Size([4, 3])
    """

    arg_constraints: dict[str, D.constraints.Constraint] = {}  # noqa: RUF012

    def __init__(
        self,
        params: TensorDictBase,
        distribution_map: Mapping[NestedKey, Callable[..., D.Distribution]],
        *,
        name_map: Mapping[NestedKey, NestedKey] | None = None,
        extra_kwargs: Mapping[NestedKey, Mapping[str, Any]] | None = None,
        aggregate_probabilities: bool | None = None,
        log_prob_key: NestedKey | None = None,
        entropy_key: NestedKey | None = None,
    ) -> None:
        if not is_tensor_collection(params):
            raise TypeError(
                f"CompositeDistribution expects params to be a TensorDict, got "
                f"{type(params).__name__}"
            )
        if not distribution_map:
            raise ValueError("CompositeDistribution needs at least one entry in distribution_map")
        names = {unravel_key(name): cls for name, cls in distribution_map.items()}
        extras = {unravel_key(k): dict(v) for k, v in (extra_kwargs or {}).items()}
        _check_known(extras, names, "extra_kwargs")
        dists: dict[Key, D.Distribution] = {}
        for name, cls in names.items():
            if not callable(cls):
                raise TypeError(
                    f"distribution_map[{name!r}] must be a distribution class or callable, "
                    f"got {cls!r}"
                )
            entry = params.get(name, None)
            if entry is None:
                raise KeyError(
                    f"params has no entry {name!r} for that component; its keys are "
                    f"{sorted(map(str, params.keys(True, True)))}"
                )
            if not is_tensor_collection(entry):
                raise TypeError(
                    f"params[{name!r}] must be a TensorDict of keyword arguments of "
                    f"{getattr(cls, '__name__', cls)} (for example {{'loc': ..., 'scale': ...}}), "
                    f"got {type(entry).__name__}"
                )
            dists[name] = cls(**dict(entry.items()), **extras.get(name, {}))
        self._init_from(
            params.batch_size, dists, name_map, aggregate_probabilities, log_prob_key, entropy_key
        )

    @classmethod
    def from_distributions(
        cls,
        params: TensorDictBase | Sequence[int],
        distributions: Mapping[NestedKey, D.Distribution],
        *,
        name_map: Mapping[NestedKey, NestedKey] | None = None,
        aggregate_probabilities: bool | None = None,
        log_prob_key: NestedKey | None = None,
        entropy_key: NestedKey | None = None,
    ) -> CompositeDistribution:
        """Build a composite from distribution instances rather than classes and parameters.

        Args:
            params: only its batch size is read: the `batch_shape`.
            distributions: maps names to distributions.
            name_map: as in the constructor.
            aggregate_probabilities: as in the constructor.
            log_prob_key: as in the constructor.
            entropy_key: as in the constructor.

        Examples:
            >>> import torch
            >>> from torch import distributions as d
            >>> from td_core import TensorDict
            >>> from td_distributions import CompositeDistribution
            >>> dist = CompositeDistribution.from_distributions(
            ...     TensorDict(batch_size=[3]),
            ...     {"a": d.Normal(torch.zeros(3), 1.0), "b": d.Bernoulli(torch.full((3,), 0.5))},
            ... )
            >>> sorted(dist.sample().keys())
            ['a', 'b']
        """
        if not distributions:
            raise ValueError("from_distributions needs at least one distribution")
        dists = {}
        for name, dist in distributions.items():
            if not isinstance(dist, D.Distribution):
                raise TypeError(
                    f"distributions[{name!r}] must be a torch Distribution, got "
                    f"{type(dist).__name__}"
                )
            dists[unravel_key(name)] = dist
        self = cls.__new__(cls)
        batch_size = params.batch_size if isinstance(params, TensorDictBase) else torch.Size(params)
        self._init_from(
            batch_size, dists, name_map, aggregate_probabilities, log_prob_key, entropy_key
        )
        return self

    def _init_from(
        self,
        batch_shape: torch.Size,
        dists: dict[Key, D.Distribution],
        name_map: Mapping[NestedKey, NestedKey] | None,
        aggregate_probabilities: bool | None,
        log_prob_key: NestedKey | None,
        entropy_key: NestedKey | None,
    ) -> None:
        renames = {unravel_key(k): unravel_key(v) for k, v in (name_map or {}).items()}
        _check_known(renames, dists, "name_map")
        out: dict[Key, D.Distribution] = {}
        for name, dist in dists.items():
            key = renames.get(name, name)
            if key in out:
                raise ValueError(f"two components would be written under the same key {key!r}")
            n = len(batch_shape)
            if tuple(dist.batch_shape[:n]) != tuple(batch_shape):
                raise ValueError(
                    f"component {name!r} has batch shape {list(dist.batch_shape)}, which does "
                    f"not start with the batch size {list(batch_shape)} of params"
                )
            out[key] = dist
        if aggregate_probabilities is not None and not isinstance(aggregate_probabilities, bool):
            raise TypeError(
                f"aggregate_probabilities must be a bool or None, got {aggregate_probabilities!r}"
            )
        self.dists = out
        self.aggregate_probabilities = aggregate_probabilities
        self._log_prob_key = None if log_prob_key is None else unravel_key(log_prob_key)
        self._entropy_key = None if entropy_key is None else unravel_key(entropy_key)
        super().__init__(batch_shape, torch.Size(()), validate_args=False)

    # -- mapping-like access to the components ------------------------------

    def __getitem__(self, key: NestedKey) -> D.Distribution:
        return self.dists[unravel_key(key)]

    def __iter__(self) -> Iterator[Key]:
        return iter(self.dists)

    def __len__(self) -> int:
        return len(self.dists)

    def __contains__(self, key: object) -> bool:
        try:
            return unravel_key(key) in self.dists  # type: ignore[arg-type]
        except (TypeError, KeyError):
            return False

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self.dists.items())
        return f"{type(self).__name__}({{{inner}}})"

    @property
    def log_prob_key(self) -> Key:
        """Key of the summed log-probability in `log_prob_composite` (`"sample_log_prob"`)."""
        return "sample_log_prob" if self._log_prob_key is None else self._log_prob_key

    @log_prob_key.setter
    def log_prob_key(self, value: NestedKey | None) -> None:
        self._log_prob_key = None if value is None else unravel_key(value)

    @property
    def entropy_key(self) -> Key:
        """Key of the summed entropy in `entropy_composite` (`"entropy"`)."""
        return "entropy" if self._entropy_key is None else self._entropy_key

    @entropy_key.setter
    def entropy_key(self, value: NestedKey | None) -> None:
        self._entropy_key = None if value is None else unravel_key(value)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return all(d.has_rsample for d in self.dists.values())

    def _aggregate(self, override: bool | None) -> bool:
        if override is not None:
            return override
        if self.aggregate_probabilities is not None:
            return self.aggregate_probabilities
        return composite_lp_aggregate()

    def _td(self, entries: dict[Key, torch.Tensor], batch_size: torch.Size) -> TensorDict:
        return TensorDict(entries, batch_size=batch_size)

    # -- sampling and summaries -------------------------------------------

    # The sampling, density and statistics methods return TensorDicts keyed like the
    # parameters where torch.distributions returns tensors: upstream's API, so their
    # overrides are not Liskov-substitutable and say so with [override] ignores.
    def sample(self, sample_shape: torch.Size | tuple[int, ...] | None = None) -> TensorDict:  # type: ignore[override]
        """One sample per component, in a TensorDict of batch size `sample_shape + batch_shape`."""
        shape = torch.Size(()) if sample_shape is None else torch.Size(sample_shape)
        out = {name: dist.sample(shape) for name, dist in self.dists.items()}
        return self._td(out, shape + self.batch_shape)

    def rsample(self, sample_shape: torch.Size | tuple[int, ...] | None = None) -> TensorDict:  # type: ignore[override]
        """Reparameterised samples (every component must support `rsample`)."""
        shape = torch.Size(()) if sample_shape is None else torch.Size(sample_shape)
        for name, dist in self.dists.items():
            if not dist.has_rsample:
                raise NotImplementedError(
                    f"component {name!r} ({type(dist).__name__}) cannot be reparameterised; "
                    f"use sample()"
                )
        out = {name: dist.rsample(shape) for name, dist in self.dists.items()}
        return self._td(out, shape + self.batch_shape)

    @property
    def mode(self) -> TensorDict:  # type: ignore[override]
        return self._td({n: d.mode for n, d in self.dists.items()}, self.batch_shape)

    @property
    def mean(self) -> TensorDict:  # type: ignore[override]
        return self._td({n: d.mean for n, d in self.dists.items()}, self.batch_shape)

    @property
    def deterministic_sample(self) -> TensorDict:
        """Each component's `deterministic_sample`, else its mode (discrete) or mean."""
        out = {n: _deterministic(n, d) for n, d in self.dists.items()}
        return self._td(out, self.batch_shape)

    def sample_and_log_prob(
        self, sample_shape: torch.Size | tuple[int, ...] | None = None
    ) -> tuple[TensorDict, torch.Tensor | TensorDict]:
        """A sample and its log-probability, in the layout `log_prob` returns."""
        sample = self.sample(sample_shape)
        return sample, self.log_prob(sample)

    def rsample_and_log_prob(
        self, sample_shape: torch.Size | tuple[int, ...] | None = None
    ) -> tuple[TensorDict, torch.Tensor | TensorDict]:
        """A reparameterised sample and its log-probability."""
        sample = self.rsample(sample_shape)
        return sample, self.log_prob(sample)

    # -- scores -----------------------------------------------------------

    def _component_values(self, sample: TensorDictBase, what: str) -> dict[Key, torch.Tensor]:
        if not is_tensor_collection(sample):
            raise TypeError(
                f"CompositeDistribution.{what} expects a TensorDict sample, got "
                f"{type(sample).__name__}"
            )
        values = {}
        for name in self.dists:
            value = sample.get(name, None)
            if value is None:
                raise _no_entry(sample, f"the sample has no entry {name!r}, needed by {what}")
            values[name] = value
        return values

    def log_prob(  # type: ignore[override]
        self,
        sample: TensorDictBase,
        *,
        aggregate_probabilities: bool | None = None,
        include_sum: bool | None = None,
    ) -> torch.Tensor | TensorDict:
        """Log-probability of a sample: per component (a TensorDict) or summed (a tensor).

        Args:
            sample: a TensorDict holding each component's value at its key.
            aggregate_probabilities: overrides the instance's and the global
                setting for this call.
            include_sum: without aggregation, also write the sum at
                `log_prob_key` (see `log_prob_composite`).

        Returns:
            With aggregation, a tensor of the sample's batch size: the sum over
            components and their event dimensions. Without, a new TensorDict of
            `<name>_log_prob` entries; `sample` is never modified.
        """
        if self._aggregate(aggregate_probabilities):
            values = self._component_values(sample, "log_prob")
            ndim = sample.batch_dims
            total: torch.Tensor | None = None
            for name, dist in self.dists.items():
                lp = _sum_to_batch(dist.log_prob(values[name]), ndim)
                total = lp if total is None else total + lp
            assert total is not None
            return total
        return self.log_prob_composite(sample, include_sum=bool(include_sum))

    def log_prob_composite(
        self, sample: TensorDictBase, *, include_sum: bool = False
    ) -> TensorDict:
        """A TensorDict of `<name>_log_prob` entries (and their sum at `log_prob_key`)."""
        values = self._component_values(sample, "log_prob_composite")
        ndim = sample.batch_dims
        out: dict[Key, torch.Tensor] = {}
        total: torch.Tensor | None = None
        for name, dist in self.dists.items():
            lp = dist.log_prob(values[name])
            out[_add_suffix(name, "_log_prob")] = lp
            if include_sum:
                summed = _sum_to_batch(lp, ndim)
                total = summed if total is None else total + summed
        if include_sum:
            assert total is not None
            out[self.log_prob_key] = total
        return self._td(out, sample.batch_size)

    def entropy(  # type: ignore[override]
        self,
        samples_mc: int = 1,
        *,
        aggregate_probabilities: bool | None = None,
        include_sum: bool | None = None,
    ) -> torch.Tensor | TensorDict:
        """Entropy per component (a TensorDict) or summed (a tensor), as `log_prob`.

        A component without a closed-form entropy gets a Monte Carlo estimate
        from `samples_mc` samples (reparameterised where possible).
        """
        if samples_mc < 1:
            raise ValueError(f"samples_mc must be >= 1, got {samples_mc!r}")
        if self._aggregate(aggregate_probabilities):
            total: torch.Tensor | None = None
            for dist in self.dists.values():
                e = _sum_to_batch(self._entropy_of(dist, samples_mc), len(self.batch_shape))
                total = e if total is None else total + e
            assert total is not None
            return total
        return self.entropy_composite(samples_mc, include_sum=bool(include_sum))

    def entropy_composite(self, samples_mc: int = 1, *, include_sum: bool = False) -> TensorDict:
        """A TensorDict of `<name>_entropy` entries (and their sum at `entropy_key`)."""
        out: dict[Key, torch.Tensor] = {}
        total: torch.Tensor | None = None
        for name, dist in self.dists.items():
            e = self._entropy_of(dist, samples_mc)
            out[_add_suffix(name, "_entropy")] = e
            if include_sum:
                summed = _sum_to_batch(e, len(self.batch_shape))
                total = summed if total is None else total + summed
        if include_sum:
            assert total is not None
            out[self.entropy_key] = total
        return self._td(out, self.batch_shape)

    @staticmethod
    def _entropy_of(dist: D.Distribution, samples_mc: int) -> torch.Tensor:
        try:
            return dist.entropy()
        except NotImplementedError:
            x = dist.rsample((samples_mc,)) if dist.has_rsample else dist.sample((samples_mc,))
            return -dist.log_prob(x).mean(0)

    def cdf(self, sample: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """A shallow copy of `sample` with `<name>_cdf` entries added.

        Upstream writes them into `sample` and returns it; td leaves `sample`
        untouched, so `sample = dist.cdf(sample)` reads the same.
        """
        values = self._component_values(sample, "cdf")
        out = {_add_suffix(n, "_cdf"): d.cdf(values[n]) for n, d in self.dists.items()}
        return sample.copy().update(out)

    def icdf(self, sample: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """A shallow copy of `sample` with `<name>_icdf` entries added (as `cdf`).

        Reads each component's probability at `<name>_cdf` (as `cdf`
        writes it), or else takes the CDF of the value at `name`.
        """
        if not is_tensor_collection(sample):
            raise TypeError(f"icdf expects a TensorDict, got {type(sample).__name__}")
        out = {}
        for name, dist in self.dists.items():
            prob = sample.get(_add_suffix(name, "_cdf"), None)
            if prob is None:
                value = sample.get(name, None)
                if value is None:
                    needed = (
                        f"icdf needs {_add_suffix(name, '_cdf')!r} or {name!r} in the TensorDict"
                    )
                    raise _no_entry(sample, needed)
                prob = dist.cdf(value)
            out[_add_suffix(name, "_icdf")] = dist.icdf(prob)
        return sample.copy().update(out)


def _no_entry(sample: TensorDictBase, needed: str) -> KeyError:
    """The `KeyError` for an entry `sample` lacks: `needed` (what was looked for), then its keys."""
    return KeyError(f"{needed}; its keys are {sorted(map(str, sample.keys(True, True)))}")


def _check_known(mapping: Mapping[Key, Any], names: Mapping[Key, Any], what: str) -> None:
    unknown = [k for k in mapping if k not in names]
    if unknown:
        raise KeyError(
            f"{what} names components that are not in distribution_map: {unknown}; "
            f"the components are {list(names)}"
        )
