"""Dtype casts, ``type()``, ``dtype`` and ``is_floating_point`` on every kind, against upstream."""

from __future__ import annotations

import operator

import pytest
import torch

CASTS = (
    "float16 float32 float64 bfloat16 half float double int int8 int16 int32 int64 uint8 "
    "uint16 uint32 uint64 bool complex32 complex64 complex128 qint8 qint32 quint8 quint4x2"
).split()

CASES = {
    **{name: operator.methodcaller(name) for name in CASTS},
    "float64_filter": lambda td: td.float64(cast_filter=lambda key, t: t.dtype == torch.float32),
    "int32_filter_key": lambda td: td.int32(cast_filter=lambda key, t: key[-1] != "obs"),
    "type": lambda td: td.type(torch.float64),
    "to_other_one_dtype": lambda td: td.to(other=td.clone().half().to_tensordict()),
    "to_other_many_dtypes": lambda td: td.to(other=td.to_tensordict()),
    "to_batch_size": lambda td: td.to(torch.float64, batch_size=td.batch_size[:1]),
    "type_int": lambda td: td.type(torch.int16),
    "type_filter": lambda td: td.type(torch.bfloat16, cast_filter=lambda key, t: len(key) > 1),
    "type_str_raises": lambda td: td.type("torch.float64"),
    "dtype": lambda td: td.dtype,
    "dtype_uniform": lambda td: td.float64().dtype,
    "dtype_nested": lambda td: td.get("nested").dtype if "nested" in td.keys() else None,
    "is_floating_point": lambda td: td.is_floating_point(),
    "is_floating_point_ints": lambda td: td.int().is_floating_point(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_casts(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
