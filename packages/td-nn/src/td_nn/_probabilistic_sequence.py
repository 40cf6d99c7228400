"""`ProbabilisticTensorDictSequential`: a sequence with probabilistic members.

Its distribution is the last member's (`return_composite=False`), or a
td-distributions `CompositeDistribution` over every probabilistic member,
each conditioned on the samples of the earlier ones (`return_composite=True`,
the default when the last member is not probabilistic or there are several).
td-nn finds the composite class through td-core's extension entry points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from td_core import InteractionType, NestedKey, TensorDictBase, load_extension
from td_nn._probabilistic import ProbabilisticTensorDictModule
from td_nn._sequence import TensorDictSequential

__all__ = ["ProbabilisticTensorDictSequential"]


def _is_probabilistic(module: Any) -> bool:
    return isinstance(module, (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential))


class ProbabilisticTensorDictSequential(TensorDictSequential):
    """A `TensorDictSequential` with probabilistic members, adding `get_dist` and `log_prob`.

    Args:
        *modules: the members (or one mapping of named members), as
            `TensorDictSequential`.
        partial_tolerant: skip the members whose inputs are missing.
        return_composite: `False`: `get_dist` is the last member's
            distribution (the last member must then be probabilistic). `True`:
            a `CompositeDistribution` over every probabilistic member, keyed
            by their sample keys; the members before the last are run (and
            sampled) on a copy of the input. Default: `True` when the last
            member is not probabilistic or there are several probabilistic
            members. Without any probabilistic member, the sequence is a plain
            `TensorDictSequential`.
        selected_out_keys: as `TensorDictSequential` (passed on only when given).
        inplace: as `TensorDictSequential`.

    `get_dist` and `log_prob` run the members on a shallow copy of the input
    (the input is not changed).

    Examples:
        >>> import torch
        >>> from torch.distributions import Normal
        >>> from td_core import TensorDict
        >>> from td_nn import (
        ...     ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule,
        ... )
        >>> policy = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(lambda obs: (obs, obs.exp()), in_keys=["obs"], out_keys=["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(
        ...         in_keys=["loc", "scale"], out_keys=["action"], distribution_class=Normal,
        ...     ),
        ... )
        >>> td = TensorDict(obs=torch.zeros(4), batch_size=[4])
        >>> policy.get_dist(td).scale
        tensor([1., 1., 1., 1.])
        >>> policy.log_prob(policy(td)).shape
        torch.Size([4])
    """

    def __init__(
        self,
        *modules: Any,
        partial_tolerant: bool = False,
        return_composite: bool | None = None,
        selected_out_keys: Sequence[NestedKey] | NestedKey | None = None,
        inplace: bool | str | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {"partial_tolerant": partial_tolerant, "inplace": inplace}
        if selected_out_keys is not None:  # subclasses' bases may not take it (as upstream)
            kwargs["selected_out_keys"] = selected_out_keys
        super().__init__(*modules, **kwargs)
        members = self._members()
        probabilistic = [m for m in members if _is_probabilistic(m)]
        last_is_probabilistic = bool(members) and _is_probabilistic(members[-1])
        if return_composite is False and not last_is_probabilistic:
            last = type(members[-1]).__name__ if members else "nothing"
            raise TypeError(
                "ProbabilisticTensorDictSequential(return_composite=False) must end with a "
                f"ProbabilisticTensorDictModule (or sequence), got {last}; pass "
                "return_composite=True for a composite distribution over its probabilistic members"
            )
        if return_composite is None:
            return_composite = not last_is_probabilistic or len(probabilistic) > 1
        self.return_composite = bool(return_composite) or not probabilistic

    # ---------------------------------------------------------------- structure
    def _rebuild(self, modules: list[Any], names: list[str] | None = None) -> TensorDictSequential:
        args = self._as_args(modules, names)
        if self.return_composite and any(_is_probabilistic(m) for m in modules):
            return type(self)(*args, partial_tolerant=self.partial_tolerant, return_composite=True)
        if modules and _is_probabilistic(modules[-1]):
            return type(self)(*args, partial_tolerant=self.partial_tolerant)
        return TensorDictSequential(*args, partial_tolerant=self.partial_tolerant)

    def _last(self) -> Any:
        """The last probabilistic member."""
        for module in reversed(self._members()):
            if _is_probabilistic(module):
                return module
        raise RuntimeError(
            f"{type(self).__name__} has no probabilistic member (members: "
            f"{[type(m).__name__ for m in self._members()]})"
        )

    def _before_last(self) -> list[Any]:
        members = self._members()
        last = self._last()
        return members[: next(i for i, m in enumerate(members) if m is last)]

    def _head(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, Any]:
        td = tensordict.copy()
        for module in self._before_last():
            td = module(td)
        return td, self._last()

    # ---------------------------------------------------------------- distribution
    def get_dist(self, tensordict: TensorDictBase) -> Any:
        """The last member's distribution, or the composite over every probabilistic member.

        Raises:
            RuntimeError: when the sequence has no probabilistic member.
        """
        if not self.return_composite:
            td, last = self._head(tensordict)
            return last.get_dist(td)
        td = tensordict.copy()
        dists: dict[NestedKey, Any] = {}
        members = self._members()
        for i, module in enumerate(members):
            if not _is_probabilistic(module):
                td = module(td)
                continue
            dist = module.get_dist(td)
            parts = getattr(dist, "dists", None)
            if isinstance(parts, dict) and hasattr(dist, "from_distributions"):
                dists.update(parts)  # a composite: its components, by key
            else:
                dists[module.dist_sample_keys[0]] = dist
            if i < len(members) - 1:  # later members are conditioned on its sample
                td = module(td)
        if not dists:
            raise RuntimeError(
                f"{type(self).__name__}.get_dist: no probabilistic member to build a "
                f"distribution from (members: {[type(m).__name__ for m in members]})"
            )
        # the composite's batch size: the parameters' (expanded by members drawing several
        # samples), else the input's, whichever every component's batch shape starts with
        batch_size = torch.Size()
        for candidate in (td.batch_size, tensordict.batch_size):
            if all(
                tuple(d.batch_shape[: len(candidate)]) == tuple(candidate) for d in dists.values()
            ):
                batch_size = candidate
                break
        composite = load_extension("distributions", "td-distributions").composite_distribution()
        return composite.from_distributions(batch_size, dists)

    def log_prob(self, tensordict: TensorDictBase) -> Any:
        """The log-probability of the sample stored in `tensordict` under `get_dist`.

        A TensorDict of per-sample-key log-probabilities with `return_composite=True`
        (a tensor when `composite_lp_aggregate()` is on).
        """
        if self.return_composite:
            return self.get_dist(tensordict).log_prob(tensordict)
        td, last = self._head(tensordict)
        return last.log_prob(tensordict, dist=last.get_dist(td))

    @property
    def det_part(self) -> TensorDictSequential:
        """The members before the last probabilistic one, as a `TensorDictSequential`."""
        return TensorDictSequential(*self._before_last(), partial_tolerant=self.partial_tolerant)

    def get_dist_params(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Run the members before the last probabilistic one on `tensordict` (in place)."""
        out = tensordict
        for module in self._before_last():
            out = module(out, **kwargs)
        if tensordict_out is not None:
            return tensordict_out.update(out)
        return out

    def build_dist_from_params(self, tensordict: TensorDictBase) -> Any:
        """The last probabilistic member's distribution from parameters already in `tensordict`."""
        last = self._last()
        dist = last.get_dist(tensordict)
        if not self.return_composite or len(last.dist_sample_keys) != 1:
            return dist
        composite = load_extension("distributions", "td-distributions").composite_distribution()
        if isinstance(dist, composite):
            return dist
        return composite.from_distributions(tensordict, {last.dist_sample_keys[0]: dist})

    # ---------------------------------------------------------------- keys
    @property
    def default_interaction_type(self) -> InteractionType:
        """The last probabilistic member's `default_interaction_type`."""
        return self._last().default_interaction_type

    @property
    def dist_params_keys(self) -> list[NestedKey]:
        """The last probabilistic member's distribution parameter keys."""
        return self._last().dist_params_keys

    @property
    def dist_sample_keys(self) -> list[NestedKey]:
        """The last probabilistic member's sample keys."""
        return self._last().dist_sample_keys

    @property
    def out_keys_source(self) -> list[NestedKey]:
        """Every key the members write, in order, before any `select_out_keys`."""
        keys: dict[NestedKey, None] = {}
        for module in self._members():
            keys.update(dict.fromkeys(module.out_keys))
        return list(keys)

    @property
    def log_prob_keys(self) -> list[NestedKey]:
        """The last probabilistic member's `log_prob_keys`."""
        return self._last().log_prob_keys

    @property
    def log_prob_key(self) -> NestedKey:
        """The last probabilistic member's `log_prob_key`."""
        return self._last().log_prob_key
