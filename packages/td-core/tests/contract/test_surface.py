"""The remaining upstream surface (pack, attrs, from_schema, UnbatchedTensor, ...) on every kind, against upstream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

import td_core


def _float(td: Any) -> Any:
    """The floating-point leaves only (pack needs one dtype)."""
    return td.select("obs", "reward", ("nested", "x"), ("nested", "y"), strict=False)


def _ns(td: Any) -> Any:
    """The namespace (`td_core` or upstream `tensordict`) that built `td`."""
    if td_core.is_tensor_collection(td):
        return td_core
    import tensordict

    return tensordict


def _attrs_rows(td: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    attrs = td.attrs(**kwargs)
    keys = sorted(td.keys(True, True), key=str)
    return [(a.tgt_dtype, a.tgt_shape, a.tgt_device) for a in (attrs.get(k) for k in keys)]


def _unbatched(td: Any) -> Any:
    """`td` with an `UnbatchedTensor` entry `table` (a tensorclass has no such field: its dict form)."""
    out = td.to_tensordict() if _ns(td).is_tensorclass(td) else td.clone()
    out.set("table", _ns(td).UnbatchedTensor(torch.arange(6.0).view(2, 3)))
    return out


def _plain(t: Any) -> Any:
    """An UnbatchedTensor entry as (its class name, a plain tensor of its values)."""
    return type(t).__name__, torch.tensor(t.tolist(), dtype=t.dtype)


def _read_with_hook_out(td: Any) -> Any:
    """On a lazy stack, `obs` read through a `hook_out` that zeroes it; elsewhere, no hooks."""
    if not isinstance(td, _ns(td).LazyStackedTensorDict):
        return "not a lazy stack"
    td.hook_out = lambda t: t * 0
    return td.get("obs")


def _first_class_dims(n: int) -> Any:
    """`n` new first-class dims (`functorch.dim`): an index that binds batch dims."""
    from functorch import dim as ftdim

    dims = ftdim.dims(n)
    return dims if n > 1 else (dims,)


def _fcd_leaf(td: Any) -> Any:
    """The shape of a leaf read from `td` indexed by a first-class dim, and the dims it binds."""
    leaf = td[_first_class_dims(1)].get("reward")
    return tuple(leaf.shape), len(leaf.dims)


CASES = {
    # pack / PackLayout.unpack
    "pack": lambda td: _float(td).pack()[0],
    "pack_dim0": lambda td: _float(td).pack(0)[0],
    "pack_layout_keys": lambda td: (_float(td).pack()[1].keys, _float(td).pack()[1].numel),
    "pack_layout_offsets": lambda td: _float(td).pack()[1].offsets,
    "pack_roundtrip": lambda td: (lambda f, lay: lay.unpack(f))(*_float(td).pack()),
    "pack_unpack_rows": lambda td: (lambda f, lay: lay.unpack(f[:1]))(*_float(td).pack()),
    "pack_with_layout": lambda td: _float(td).pack(layout=_float(td).pack()[1])[0],
    "pack_layout_equal": lambda td: _float(td).pack(-1)[1] == _float(td).pack()[1],
    "pack_layout_hash": lambda td: hash(_float(td).pack(-1)[1]) == hash(_float(td).pack()[1]),
    "pack_dim_out_of_range": lambda td: td.pack(7),
    "pack_mixed_dtypes": lambda td: td.pack()[0],
    "pack_wrong_layout": lambda td: _float(td).pack(layout=_float(td).exclude("obs").pack()[1])[0],
    # attrs / to(attrs)
    "attrs": _attrs_rows,
    "attrs_dtype_only": lambda td: _attrs_rows(td, fields=("dtype",)),
    "attrs_batch_size": lambda td: td.attrs().batch_size,
    "to_attrs": lambda td: td.to(td.double().attrs()),
    "to_attrs_dtype_only": lambda td: td.to(td.double().attrs(fields=("dtype",))),
    "to_attrs_extra_arg": lambda td: td.to(td.attrs(), torch.float64),
    # clear_refs_for_compile_, record_stream, pin_memory_
    "clear_refs_for_compile_": lambda td: td.clear_refs_for_compile_().batch_size,
    "record_stream_cpu": lambda td: td.record_stream(None),
    "pin_memory_": lambda td: td.pin_memory_(),
    "pin_memory_inplace": lambda td: td.pin_memory(inplace=True),
    # the deprecated hooks of lazy stacks (AttributeError on the other kinds)
    "hook_out": lambda td: td.hook_out,
    "hook_in": lambda td: td.hook_in,
    "hook_out_applied": _read_with_hook_out,
    # asend / arecv need a pipe object
    "asend_not_a_pipe": lambda td: asyncio.run(td.asend(3)),
    "arecv_not_a_pipe": lambda td: asyncio.run(td.arecv(3)),
    # from_schema
    "from_schema": lambda td: _ns(td).TensorDict.from_schema(
        {"a": ([2], torch.float32), ("b", "c"): ([], torch.int64)}, batch_size=[3]
    ),
    "from_schema_bad_storage": lambda td: _ns(td).TensorDict.from_schema(
        {"a": ([2], torch.float32)}, storage="x"
    ),
    # UnbatchedTensor through batch ops
    "unbatched_index": lambda td: _plain(_unbatched(td)[0]["table"]),
    "unbatched_reshape": lambda td: _plain(_unbatched(td).reshape(-1)["table"]),
    "unbatched_unsqueeze": lambda td: _plain(_unbatched(td).unsqueeze(0)["table"]),
    "unbatched_unbind": lambda td: _plain(_unbatched(td).unbind(0)[1]["table"]),
    "unbatched_stack": lambda td: _plain(torch.stack([_unbatched(td), _unbatched(td)])["table"]),
    "unbatched_clone_mul": lambda td: _plain((_unbatched(td).clone() * 2)["table"]),
    "unbatched_batch_size": lambda td: _unbatched(td).unsqueeze(0)["table"].batch_size,
    # first-class dims (functorch.dim) as indices: they bind batch dims
    "fcd_index": lambda td: td[_first_class_dims(1)].batch_size,
    "fcd_index_two": lambda td: td[_first_class_dims(2)].batch_size,
    "fcd_index_second_dim": lambda td: td[(slice(None), *_first_class_dims(1))].batch_size,
    "fcd_leaf": _fcd_leaf,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_surface(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
