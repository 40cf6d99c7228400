"""Reductions (``sum``, ``mean``, ``std``, ``max``, ...) on every kind, against upstream.

Ops that need floating-point leaves run on ``_floats(td)`` (the int and bool leaves
dropped); on the raw kinds they must raise the same error class as upstream.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def _floats(td):
    return td.exclude("count", "done")


def _suffix(key: str) -> str:
    return key + "_r"


CASES = {
    # sum and its dim / keepdim / reduce / dtype forms
    "sum": lambda td: td.sum(),
    "sum_0": lambda td: td.sum(0),
    "sum_neg": lambda td: td.sum(-1),
    "sum_keepdim": lambda td: td.sum(1, keepdim=True),
    "sum_tuple": lambda td: td.sum((0, 1)),
    "sum_tuple_keepdim": lambda td: td.sum((0, -1), keepdim=True),
    "sum_none": lambda td: td.sum(None),
    "sum_all_keepdim": lambda td: td.sum(keepdim=True),
    "sum_feature": lambda td: td.sum("feature"),
    "sum_reduce": lambda td: td.sum(reduce=True),
    "sum_feature_reduce": lambda td: td.sum("feature", reduce=True),
    "sum_dtype": lambda td: td.sum(dtype=torch.float64),
    "sum_0_dtype": lambda td: td.sum(0, dtype=torch.float64),
    "sum_key_transform": lambda td: td.sum(0, key_transform=_suffix),
    "sum_dim_reduce": lambda td: td.select("reward").sum(0, reduce=True),
    "sum_dim_reduce_ragged": lambda td: td.sum(0, reduce=True),
    "sum_bad_dim": lambda td: td.sum(5),
    "sum_bad_neg_dim": lambda td: td.sum(-5),
    "sum_bad_tuple": lambda td: td.sum((0, 7)),
    "sum_feature_keepdim": lambda td: td.sum("feature", keepdim=True),
    "nansum": lambda td: td.nansum(),
    "nansum_0": lambda td: td.nansum(0, keepdim=True),
    "nansum_reduce": lambda td: td.nansum(reduce=True),
    # mean / nanmean: int leaves raise as in torch
    "mean_ints": lambda td: td.mean(0),
    "mean": lambda td: _floats(td).mean(),
    "mean_0": lambda td: _floats(td).mean(0),
    "mean_tuple": lambda td: _floats(td).mean((0, 1), keepdim=True),
    "mean_feature": lambda td: _floats(td).mean("feature"),
    "mean_reduce": lambda td: td.mean(reduce=True),
    "mean_dtype": lambda td: td.mean(1, dtype=torch.float64),
    "mean_key_transform": lambda td: _floats(td).mean(key_transform=_suffix),
    "nanmean": lambda td: _floats(td).nanmean(1),
    "nanmean_reduce": lambda td: td.nanmean(reduce=True),
    # prod
    "prod": lambda td: td.prod(),
    "prod_0": lambda td: td.prod(0),
    "prod_dtype": lambda td: td.prod(1, dtype=torch.float64),
    "prod_feature": lambda td: td.prod("feature"),
    "prod_reduce": lambda td: td.prod(reduce=True),
    # std / var with correction
    "std_ints": lambda td: td.std(),
    "std": lambda td: _floats(td).std(),
    "std_0": lambda td: _floats(td).std(0),
    "std_correction": lambda td: _floats(td).std(0, correction=0),
    "std_tuple": lambda td: _floats(td).std((0, 1)),
    "std_keepdim": lambda td: _floats(td).std(-1, keepdim=True),
    "std_feature": lambda td: _floats(td).std("feature"),
    "std_reduce": lambda td: td.std(reduce=True),
    "std_key_transform": lambda td: _floats(td).std(key_transform=_suffix),
    "var": lambda td: _floats(td).var(),
    "var_0": lambda td: _floats(td).var(0, correction=2),
    "var_reduce": lambda td: td.var(reduce=True, correction=0),
    "var_bad_dim": lambda td: _floats(td).var(9),
    # amax / amin
    "amax": lambda td: td.amax(),
    "amax_0": lambda td: td.amax(0),
    "amax_keepdim": lambda td: td.amax(1, keepdim=True),
    "amax_reduce": lambda td: td.amax(reduce=True),
    "amin": lambda td: td.amin(),
    "amin_neg": lambda td: td.amin(-1),
    "amin_reduce": lambda td: td.amin(reduce=True),
    # max / min: (values, indices) with a dim
    "max": lambda td: td.max(),
    "max_0": lambda td: td.max(0),
    "max_type": lambda td: type(td.max(0)).__name__,
    "max_keepdim": lambda td: td.max(-1, keepdim=True),
    "max_no_indices": lambda td: td.max(0, return_indices=False),
    "max_reduce": lambda td: td.max(reduce=True),
    "max_bad_dim": lambda td: td.max(3),
    "min": lambda td: td.min(),
    "min_1": lambda td: td.min(1),
    "min_values": lambda td: td.min(0).values,
    "min_reduce": lambda td: td.min(reduce=True),
    # logsumexp: no dim means every batch dim
    "logsumexp": lambda td: _floats(td).logsumexp(),
    "logsumexp_0": lambda td: _floats(td).logsumexp(0),
    "logsumexp_keepdim": lambda td: _floats(td).logsumexp(-1, True),
    "logsumexp_tuple": lambda td: _floats(td).logsumexp((0, 1)),
    "logsumexp_bad_dim": lambda td: _floats(td).logsumexp(4),
    # out= an empty TensorDict: the result's entries are added to it
    "logsumexp_out_empty": lambda td: _floats(td).logsumexp(
        0, out=_floats(td).logsumexp(0).empty()
    ),
    "norm_out_empty": lambda td: _floats(td).norm(out=_floats(td).norm().empty()),
    # quantile
    "quantile": lambda td: _floats(td).quantile(0.3),
    "quantile_0": lambda td: _floats(td).quantile(0.3, 0),
    "quantile_keepdim": lambda td: _floats(td).quantile(0.7, 1, keepdim=True),
    "quantile_nearest": lambda td: _floats(td).quantile(0.5, 0, interpolation="nearest"),
    "quantile_tensor_q": lambda td: _floats(td).quantile(torch.tensor([0.2, 0.8]), 0),
    "quantile_reduce": lambda td: td.quantile(0.4, reduce=True),
    "quantile_ints": lambda td: td.quantile(0.4, 0),
    # cummax / cummin
    "cummax_0": lambda td: td.cummax(0),
    "cummax_neg": lambda td: td.cummax(-1),
    "cummax_no_indices": lambda td: td.cummax(1, return_indices=False),
    "cummax_bad_dim": lambda td: td.cummax(3),
    "cummin_1": lambda td: td.cummin(1),
    "cummin_no_indices": lambda td: td.cummin(0, return_indices=False),
    # softmax
    "softmax_0": lambda td: _floats(td).softmax(0),
    "softmax_neg": lambda td: _floats(td).softmax(-1),
    "softmax_dtype": lambda td: _floats(td).softmax(1, torch.float64),
    "softmax_bad_dim": lambda td: _floats(td).softmax(3),
    # norm
    "norm": lambda td: _floats(td).norm(),
    "norm_dtype": lambda td: _floats(td).norm(dtype=torch.float64),
    "norm_ints": lambda td: td.norm(),
    # all / any
    "all": lambda td: td.all(),
    "any": lambda td: td.any(),
    "all_0": lambda td: td.all(0),
    "any_neg": lambda td: td.any(-1),
    "all_bad_dim": lambda td: td.all(4),
    "any_bad_dim": lambda td: td.any(-4),
    # every argument by keyword
    "sum_kw": lambda td: td.sum(dim=0, keepdim=True, dtype=torch.float64, reduce=False),
    "nansum_kw": lambda td: td.nansum(dim=(0, 1), keepdim=False),
    "mean_kw": lambda td: _floats(td).mean(dim=-1, keepdim=True),
    "prod_kw": lambda td: td.prod(dim=1, keepdim=True),
    "std_kw": lambda td: _floats(td).std(dim=(0, 1), keepdim=False, correction=0),
    "var_kw": lambda td: _floats(td).var(dim=None, correction=0),
    "max_kw": lambda td: td.max(dim=1, keepdim=True, return_indices=True),
    "amin_kw": lambda td: td.amin(dim=0, keepdim=True),
    "logsumexp_kw": lambda td: _floats(td).logsumexp(dim=0, keepdim=True),
    "quantile_kw": lambda td: _floats(td).quantile(q=0.25, dim=1, keepdim=False),
    "cummin_kw": lambda td: td.cummin(dim=0, return_indices=False),
    "softmax_kw": lambda td: _floats(td).softmax(dim=0, dtype=torch.float64),
    "all_kw": lambda td: td.all(dim=0),
    "any_kw": lambda td: td.any(dim=None),
    # through __torch_function__
    "torch_sum": lambda td: torch.sum(td),
    "torch_sum_0": lambda td: torch.sum(td, 0),
    "torch_sum_kw": lambda td: torch.sum(td, dim=1, keepdim=True),
    "torch_sum_dtype": lambda td: torch.sum(td, dtype=torch.float64),
    "torch_mean": lambda td: torch.mean(_floats(td)),
    "torch_mean_0": lambda td: torch.mean(_floats(td), 0),
    "torch_std": lambda td: torch.std(_floats(td)),
    "torch_std_correction": lambda td: torch.std(_floats(td), 0, correction=0),
    "torch_var": lambda td: torch.var(_floats(td), 1),
    "torch_var_keepdim": lambda td: torch.var(_floats(td), 0, keepdim=True, correction=0),
    # torch.nn.functional losses
    "mse_loss": lambda td: F.mse_loss(_floats(td), _floats(td).apply(lambda t: t * 2)),
    "mse_loss_none": lambda td: F.mse_loss(
        _floats(td), _floats(td).apply(lambda t: t + 1), reduction="none"
    ),
    "mse_loss_sum": lambda td: F.mse_loss(_floats(td), _floats(td) * 0, reduction="sum"),
    "l1_loss": lambda td: F.l1_loss(_floats(td), _floats(td).apply(lambda t: t * 3)),
    "l1_loss_sum": lambda td: F.l1_loss(_floats(td), _floats(td) * 0, reduction="sum"),
    "smooth_l1_loss": lambda td: F.smooth_l1_loss(_floats(td), _floats(td) * 0),
    "smooth_l1_loss_none": lambda td: F.smooth_l1_loss(
        _floats(td), _floats(td) * 0, reduction="none"
    ),
    "mse_loss_bad_reduction": lambda td: F.mse_loss(td, td, reduction="bogus"),
}


# Upstream raises where td returns a result, and its dense copy raises too, so there is
# nothing to compare with: td's results for these are checked in tests/test_reductions.py.
_TORCH_FUNCTIONS = [c for c in CASES if c.startswith("torch_") or "_loss" in c]
UPSTREAM_UNSUPPORTED: dict[tuple[str, str], str] = {
    **{
        (case, "tensorclass"): "upstream tensorclasses do not dispatch torch functions"
        for case in _TORCH_FUNCTIONS
    },
    **{
        (case, "lazy_hetero"): "td reduces a ragged stack per member over dims other than the "
        "stack dim; upstream raises (checked in tests/test_reductions.py)"
        for case in (
            "amax_keepdim amin_neg any_neg cummax_neg cummax_no_indices cummin_1 max_keepdim "
            "max_kw mean_dtype min_1 prod_dtype prod_kw sum_keepdim sum_neg torch_sum_kw"
        ).split()
    },
    ("sum_feature_keepdim", "lazy_hetero"): (
        "upstream raises RuntimeError for any reduction of a ragged stack before it reads the "
        "arguments; td first rejects dim='feature' with keepdim=True (TypeError, as upstream "
        "does on every other kind)"
    ),
}


_HETERO = ("tensorclass", "lazy_hetero")


@pytest.mark.parametrize("case", sorted(CASES))
def test_reductions(case: str, kind: str, check, check_td) -> None:
    if (
        kind in ("tensorclass_lazy", "tensorclass_view", "tensorclass_h5", "tensorclass_store")
        and (case, "tensorclass") in UPSTREAM_UNSUPPORTED
    ):
        check_td(CASES[case], kind, "tensorclass")  # the same fields, held densely
        return
    if kind == "tensorclass_hetero" and any((case, k) in UPSTREAM_UNSUPPORTED for k in _HETERO):
        check_td(CASES[case], kind, "lazy_hetero")  # the same ragged stack, unwrapped
        return
    if (case, kind) in UPSTREAM_UNSUPPORTED:
        pytest.skip(UPSTREAM_UNSUPPORTED[case, kind])
    check(CASES[case], kind)
