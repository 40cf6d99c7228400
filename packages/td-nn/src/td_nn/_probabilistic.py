"""Probabilistic modules: build a distribution from entries, write a sample or a statistic.

td-nn never imports td-distributions: the default `distribution_class` is
found through td-core's extension entry points, and distributions whose
samples and log-probabilities are TensorDicts (td-distributions'
`CompositeDistribution`) are recognised by what they return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from td_core import (
    InteractionType,
    NestedKey,
    TensorDictBase,
    composite_lp_aggregate,
    interaction_type,
    is_tensor_collection,
    load_extension,
    set_composite_lp_aggregate,
)
from td_core.errors import KeyNotFoundError
from td_nn._base import TensorDictModuleBase, format_keys
from td_nn._common import as_key_list
from td_nn._dispatch import resolve_or_skip
from td_nn._errors import KeySpecError
from td_nn._sampling import check_generator, draw, generator_for_call

__all__ = ["ProbabilisticTensorDictModule"]

_MISSING: Any = object()


def default_distribution_class() -> type:
    """td-distributions' default class (`Delta`), or a `TypeError` naming the package."""
    try:
        return load_extension("distributions", "td-distributions").DEFAULT_DISTRIBUTION_CLASS
    except ImportError as err:
        raise TypeError(
            "ProbabilisticTensorDictModule needs a distribution_class: none was given, and the "
            "default (td-distributions' Delta) is unavailable because td-distributions is not "
            "installed. Pass distribution_class=... or `pip install td-distributions`."
        ) from err


def _composite_keys(distribution_kwargs: Mapping[str, Any]) -> list[NestedKey] | None:
    """The sample keys of a composite distribution built with `distribution_kwargs`, if any."""
    distribution_map = distribution_kwargs.get("distribution_map")
    if not isinstance(distribution_map, Mapping):
        return None
    name_map = distribution_kwargs.get("name_map")
    if isinstance(name_map, Mapping):
        return list(name_map.values())
    return list(distribution_map)


def _sum_leaves(log_prob: TensorDictBase, ndim: int) -> torch.Tensor:
    """The sum of every leaf of `log_prob`, each summed over its dims past the first `ndim`."""
    leaves = [
        v.sum(tuple(range(ndim, v.ndim))) if v.ndim > ndim else v
        for v in log_prob.values(include_nested=True, leaves_only=True)
    ]
    return sum(leaves[1:], leaves[0])


def log_prob_key_for(key: NestedKey) -> NestedKey:
    """`"sample"` -> `"sample_log_prob"`; `("a", "b")` -> `("a", "b_log_prob")`."""
    if type(key) is str:
        return f"{key}_log_prob"
    return (*key[:-1], f"{key[-1]}_log_prob")


class ProbabilisticTensorDictModule(TensorDictModuleBase):
    """Build a distribution from the entries at `in_keys`; write a sample at `out_keys`.

    What is written depends on the interaction type: the innermost
    `set_interaction_type` block, else `default_interaction_type`.
    `RANDOM` samples (with `rsample` when the distribution has it);
    `MODE`, `MEAN`, `MEDIAN` write that statistic; `DETERMINISTIC`
    (the default) the distribution's `deterministic_sample`, else its mean
    (continuous) or mode (discrete).

    Any `torch.distributions` class works. A distribution whose sample is a
    TensorDict (like td-distributions' `CompositeDistribution`) has its
    leaves written at `out_keys`, and a TensorDict log-probability is merged
    into the output.

    Args:
        in_keys: a key or list of keys, passed to the distribution as keyword
            arguments named after the last part of each key; or a dict
            `{argument: key}`.
        out_keys: where the sample goes. Default: the keys of a composite
            distribution (the values of `distribution_kwargs["name_map"]`, else
            the keys of its `"distribution_map"`), else `["sample"]`.
        default_interaction_type: used outside any `set_interaction_type` block.
        distribution_class: the distribution class (or any callable building
            one). Default: td-distributions' `Delta`; without td-distributions
            omitting it raises `TypeError`.
        distribution_kwargs: more keyword arguments for the distribution.
        return_log_prob: also write the log-probability of the sample.
        log_prob_keys: where per-sample-key log-probabilities go (one per out
            key; only while `composite_lp_aggregate()` is off). Default: each
            out key with a `_log_prob` suffix (`("a", "b")` -> `("a", "b_log_prob")`).
        log_prob_key: where one (aggregated) log-probability goes: for a single
            out key, or for several while `composite_lp_aggregate()` is on.
            Default: the out key with a `_log_prob` suffix, or
            `"sample_log_prob"` when aggregating.
        cache_dist: keep the last distribution built by `forward` in `self.dist`.
        n_empirical_estimate: samples used to estimate a statistic the
            distribution does not define.
        num_samples: `RANDOM` draws this many samples (an int or a shape); the
            output TensorDict is expanded to `num_samples + batch_size`.
        generator: sample from this `torch.Generator` (an int seeds a new one),
            leaving the global RNG untouched; or a key of the input where a
            generator or a seed is stored (a seed is replaced by the next one
            after each call, so calls follow one reproducible stream).

    The log-probability keys depend on `composite_lp_aggregate()`, which is
    read once at construction: reading `log_prob_key(s)` or `out_keys` (with
    `return_log_prob`) or calling the module under another setting raises
    `RuntimeError`.

    Examples:
        >>> import torch
        >>> from torch.distributions import Normal
        >>> from td_core import TensorDict
        >>> from td_nn import InteractionType, ProbabilisticTensorDictModule, set_interaction_type
        >>> module = ProbabilisticTensorDictModule(
        ...     in_keys=["loc", "scale"], out_keys=["action"], distribution_class=Normal,
        ...     return_log_prob=True,
        ... )
        >>> td = TensorDict(loc=torch.zeros(3, 2), scale=torch.ones(3, 2), batch_size=[3])
        >>> sorted(module(td).keys())
        ['action', 'action_log_prob', 'loc', 'scale']
        >>> td["action"]  # deterministic by default: the mean
        tensor([[0., 0.],
                [0., 0.],
                [0., 0.]])
        >>> with set_interaction_type(InteractionType.RANDOM):
        ...     module(td)["action"].shape
        torch.Size([3, 2])
    """

    _native_call = True

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping[str, NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        default_interaction_type: InteractionType | str = InteractionType.DETERMINISTIC,
        distribution_class: Any = _MISSING,
        distribution_kwargs: dict[str, Any] | None = None,
        return_log_prob: bool = False,
        log_prob_keys: Sequence[NestedKey] | None = None,
        log_prob_key: NestedKey | None = None,
        cache_dist: bool = False,
        n_empirical_estimate: int = 1000,
        num_samples: int | Sequence[int] | None = None,
        generator: torch.Generator | int | NestedKey | None = None,
    ) -> None:
        super().__init__()
        owner = "ProbabilisticTensorDictModule"
        if isinstance(in_keys, Mapping):
            for name in in_keys:
                if not isinstance(name, str):
                    raise KeySpecError(f"{owner} in_keys: argument names must be str, got {name!r}")
            names = list(in_keys)
            keys = as_key_list(list(in_keys.values()), "in_keys", owner)
        else:
            keys = as_key_list(in_keys, "in_keys", owner)
            names = [k if type(k) is str else k[-1] for k in keys]
        self._dist_keys = list(zip(names, keys))
        self.in_keys = list(dict.fromkeys(keys))
        # a TensorDict of keyword arguments is kept as it is: a TensorDictParams is then a
        # submodule, so its tensors are the module's buffers (moved by .to(), in state_dict)
        kwargs: Any = (
            {}
            if distribution_kwargs is None
            else distribution_kwargs
            if is_tensor_collection(distribution_kwargs)
            else dict(distribution_kwargs)
        )
        if out_keys is None:
            out_keys = _composite_keys(kwargs) or ["sample"]
        self._sample_keys = as_key_list(out_keys, "out_keys", owner)
        if distribution_class is _MISSING:
            distribution_class = default_distribution_class()
        if not callable(distribution_class):
            raise TypeError(
                f"{owner}: distribution_class must be callable, got {distribution_class!r}"
            )
        self.distribution_class = distribution_class
        self.distribution_kwargs = kwargs
        self.default_interaction_type = InteractionType.from_str(default_interaction_type)
        self.return_log_prob = return_log_prob
        self._set_log_prob_keys(log_prob_keys, log_prob_key)
        self.cache_dist = cache_dist
        self.n_empirical_estimate = n_empirical_estimate
        self.dist: Any = None
        if isinstance(num_samples, int):
            num_samples = (num_samples,)
        self.num_samples = None if num_samples is None else torch.Size(num_samples)
        self._generator, self._generator_key = check_generator(generator, owner)

    # ---------------------------------------------------------------- keys
    def _set_log_prob_keys(
        self, log_prob_keys: Sequence[NestedKey] | None, log_prob_key: NestedKey | None
    ) -> None:
        owner = type(self).__name__
        samples = self._sample_keys
        aggregate = composite_lp_aggregate()
        self._aggregate_at_init = aggregate
        key = None if log_prob_key is None else as_key_list(log_prob_key, "log_prob_key", owner)[0]
        if log_prob_keys is not None:
            if aggregate:
                raise RuntimeError(
                    f"{owner}: composite_lp_aggregate() is True but log_prob_keys="
                    f"{list(log_prob_keys)!r} were passed; one aggregated log-probability is "
                    "written, so pass log_prob_key instead"
                )
            given = [log_prob_keys] if isinstance(log_prob_keys, str) else list(log_prob_keys)
            keys = as_key_list(given, "log_prob_keys", owner)
            if len(keys) != len(samples):
                raise ValueError(
                    f"{owner}: log_prob_keys {keys!r} must give one key per out key {samples!r}"
                )
        elif key is not None and len(samples) == 1:
            keys = [key]
        elif aggregate:
            keys = []  # unused: the aggregated key is the only one
        else:
            keys = [log_prob_key_for(k) for k in samples]
        if key is None:
            if aggregate:
                key = "sample_log_prob"
            elif len(samples) == 1:
                key = keys[0]
        elif len(samples) > 1 and not aggregate:
            raise RuntimeError(
                f"{owner}: composite_lp_aggregate() is False but log_prob_key={key!r} was passed "
                f"for the out keys {samples!r}; each gets its own log-probability, so pass "
                "log_prob_keys instead"
            )
        self._log_prob_key = key
        self._log_prob_keys = keys

    def _check_aggregate(self, what: str) -> bool:
        """`composite_lp_aggregate()`, which must be what it was at construction."""
        aggregate = composite_lp_aggregate()
        if aggregate is not self._aggregate_at_init:
            raise RuntimeError(
                f"{type(self).__name__}.{what}: composite_lp_aggregate is set to {aggregate}, "
                f"but the module was built with {self._aggregate_at_init}, which decided its "
                "log-prob keys; build it under the setting it runs in"
            )
        return aggregate

    @property
    def log_prob_keys(self) -> list[NestedKey]:
        """Where log-probabilities are written: one per out key, or the aggregated one."""
        if self._check_aggregate("log_prob_keys"):
            return [self.log_prob_key]
        return list(self._log_prob_keys)

    @property
    def log_prob_key(self) -> NestedKey:
        """The key of the single log-probability (one out key, or aggregating).

        Raises:
            RuntimeError: when there are several log-probability keys.
        """
        if not self._check_aggregate("log_prob_key"):
            if len(self._log_prob_keys) == 1:
                return self._log_prob_keys[0]
            raise RuntimeError(
                f"{type(self).__name__}.log_prob_key: composite_lp_aggregate is False and "
                f"there is one log-prob key per out key ({self._log_prob_keys!r}); "
                "read log_prob_keys instead"
            )
        assert self._log_prob_key is not None
        return self._log_prob_key

    @property
    def dist_keys(self) -> list[str]:
        """The keyword names the distribution is built with (one per `in_keys` entry)."""
        return [name for name, _ in self._dist_keys]

    @property
    def dist_params_keys(self) -> list[NestedKey]:
        """The keys of the distribution's parameters in the input."""
        return [key for _, key in self._dist_keys]

    @property
    def dist_sample_keys(self) -> list[NestedKey]:
        """The keys the sample is written under (`out_keys` without log-probabilities)."""
        return list(self._sample_keys)

    @property
    def out_keys_source(self) -> list[NestedKey]:
        """The sample keys, before any `select_out_keys` (as upstream)."""
        return list(self._sample_keys)

    def build_dist_from_params(self, tensordict: TensorDictBase) -> Any:
        """The distribution built from the parameters in `tensordict` (`get_dist`)."""
        return self.get_dist(tensordict)

    @property
    def out_keys(self) -> list[NestedKey]:
        keys = list(self._sample_keys)
        return keys + self.log_prob_keys if self.return_log_prob else keys

    @out_keys.setter
    def out_keys(self, value: Sequence[NestedKey]) -> None:
        value = as_key_list(value, "out_keys", type(self).__name__)
        lp = set(self.log_prob_keys) if hasattr(self, "_aggregate_at_init") else set()
        self._sample_keys = [k for k in value if k not in lp]

    # ---------------------------------------------------------------- distribution
    def get_dist(self, tensordict: TensorDictBase) -> Any:
        """The distribution built from the entries of `tensordict`.

        Raises:
            KeyError: naming the missing key and the module.
        """
        given = self.distribution_kwargs
        # a TensorDict's entries as values (a non-tensor one as its data), as `td[key]` reads
        # them; `dict(td)` would give the same eagerly, but torch.compile builds it from items()
        kwargs = {k: given[k] for k in given.keys()} if type(given) is not dict else dict(given)
        get = tensordict.get
        for name, key in self._dist_keys:
            value = get(key, None)
            if value is None:
                raise KeyNotFoundError(
                    f"{type(self).__name__}({self._dist_name()}) could not read its input key {key!r} "
                    f"(argument {name!r}): the input has keys "
                    f"{sorted(map(str, tensordict.keys(include_nested=True)))}"
                )
            kwargs[name] = value
        return self.distribution_class(**kwargs)

    def _dist_name(self) -> str:
        return getattr(self.distribution_class, "__name__", repr(self.distribution_class))

    def log_prob(self, tensordict: TensorDictBase, *, dist: Any = None) -> Any:
        """The log-probability of the sample stored in `tensordict` (a tensor or a TensorDict)."""
        if dist is None:
            dist = self.get_dist(tensordict)
        if len(self._sample_keys) == 1:
            value = tensordict.get(self._sample_keys[0], None)
            if value is not None and not is_tensor_collection(value):
                return dist.log_prob(value)
        if not self._check_aggregate("log_prob"):
            log_prob = dist.log_prob(tensordict)
            return self._renamed(log_prob) if is_tensor_collection(log_prob) else log_prob
        with set_composite_lp_aggregate(False):  # per-leaf values, summed here
            log_prob = dist.log_prob(tensordict)
        if not is_tensor_collection(log_prob):
            return log_prob
        tensordict.update(log_prob)  # as upstream: the per-leaf values are written too
        return _sum_leaves(log_prob, tensordict.batch_dims)

    def _renamed(self, log_prob: TensorDictBase) -> TensorDictBase:
        """`log_prob` (per-leaf `<key>_log_prob` entries) with the entries at `log_prob_keys`."""
        for key, lp_key in zip(self._sample_keys, self._log_prob_keys):
            default = log_prob_key_for(key)
            if lp_key != default and default in log_prob.keys(include_nested=True):
                log_prob.rename_key_(default, lp_key)
        return log_prob

    # ---------------------------------------------------------------- call
    def forward(
        self,
        tensordict: TensorDictBase | Any = None,
        *args: Any,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> Any:
        """Build the distribution, write a value (and its log-probability)."""
        tensordict, tensordict_out, result = resolve_or_skip(
            self, tensordict, args, tensordict_out, kwargs
        )
        if tensordict is None:
            return result
        dist = self.get_dist(tensordict)
        if self.cache_dist:
            self.dist = dist
        kind = interaction_type() or self.default_interaction_type
        generator, write_next_seed = self._generator, None
        if self._generator_key is not None:
            generator, write_next_seed = generator_for_call(
                self._generator_key, tensordict, self._param_device(tensordict)
            )
        num_samples = self.num_samples if kind is InteractionType.RANDOM else None
        sample = draw(
            dist,
            kind,
            self.n_empirical_estimate,
            num_samples=num_samples,
            generator=generator,
        )
        if write_next_seed is not None and generator is not None:
            write_next_seed(generator)
        dest = tensordict if tensordict_out is None else tensordict_out
        if num_samples is not None:
            dest = dest.expand(*num_samples, *dest.batch_size)
        self._write_sample(dest, sample)
        if self.return_log_prob:
            self._write_log_prob(dest, dist, sample)
        return dest

    def _param_device(self, tensordict: TensorDictBase) -> torch.device:
        """Where a generator seeded from the input should live: the parameters' device."""
        for key in self.in_keys:
            value = tensordict.get(key, None)
            if isinstance(value, torch.Tensor):
                return value.device
        return torch.device("cpu")

    def _write_sample(self, dest: TensorDictBase, sample: Any) -> None:
        keys = self._sample_keys
        if is_tensor_collection(sample):
            present = sample.keys(include_nested=True)
            if all(k in present for k in keys):
                for key in keys:
                    dest.set(key, sample.get(key))
            else:
                dest.update(sample)
            return
        if len(keys) != 1:
            raise ValueError(
                f"{type(self).__name__}: {self._dist_name()} returned one tensor but out_keys "
                f"has {len(keys)} sample keys {keys!r}"
            )
        dest.set(keys[0], sample)

    def _write_log_prob(self, dest: TensorDictBase, dist: Any, sample: Any) -> None:
        aggregate = self._check_aggregate("forward")
        if not is_tensor_collection(sample):
            dest.set(self.log_prob_key, dist.log_prob(sample))
            return
        if not aggregate:
            log_prob = dist.log_prob(sample)
            if is_tensor_collection(log_prob):
                dest.update(self._renamed(log_prob))
            else:
                dest.set(self.log_prob_key, log_prob)
            return
        with set_composite_lp_aggregate(False):  # per-leaf values, summed here
            log_prob = dist.log_prob(sample)
        if not is_tensor_collection(log_prob):
            dest.set(self.log_prob_key, log_prob)
            return
        dest.update(log_prob)
        dest.set(self.log_prob_key, _sum_leaves(log_prob, sample.batch_dims))

    def __repr__(self) -> str:
        fields = [
            f"in_keys={format_keys(self.in_keys)}",
            f"out_keys={format_keys(self.out_keys)}",
            f"distribution_class={self._dist_name()}",
        ]
        if list(self.distribution_kwargs.keys()):
            fields.append(f"distribution_kwargs={self.distribution_kwargs!r}")
        fields.append(f"default_interaction_type={self.default_interaction_type.value}")
        return f"{type(self).__name__}(\n    " + ",\n    ".join(fields) + ")"
