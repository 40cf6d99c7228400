"""Shape and layout ops (old and new, every keyword spelling) on every kind, against upstream."""

from __future__ import annotations

import pytest
import torch


def _lead(td):
    """A size-1 leading dim, so ops that need two batch dims also run on 1-d kinds."""
    return td if td.batch_dims >= 2 else td.unsqueeze(0)


CASES = {
    # keyword spellings of the older view ops
    "view_neg": lambda td: td.view(-1),
    "view_size_kw": lambda td: td.view(size=(td.numel(),)),
    "view_same": lambda td: td.view(*td.shape),
    "view_bad": lambda td: td.view(td.numel() + 1),
    "reshape_size_kw": lambda td: td.reshape(size=(-1,)),
    "reshape_tuple": lambda td: td.reshape((td.shape[0], -1)),
    "reshape_bad_kw": lambda td: td.reshape(shape=(-1,)),
    "permute_dims_kw": lambda td: td.permute(dims=list(range(td.ndim))[::-1]),
    "permute_list": lambda td: td.permute(list(range(td.ndim))[::-1]),
    "permute_out_of_range": lambda td: td.permute(0, 5),
    "unsqueeze_dim_kw": lambda td: td.unsqueeze(dim=-1),
    "unsqueeze_out_of_range": lambda td: td.unsqueeze(7),
    "squeeze_dim_kw": lambda td: td.unsqueeze(0).squeeze(dim=0),
    "squeeze_all": lambda td: td.unsqueeze(1).squeeze(),
    "squeeze_out_of_range": lambda td: td.squeeze(7),
    "expand_size_kw": lambda td: td.expand(size=(2, *td.shape)),
    "transpose_kw": lambda td: _lead(td).transpose(dim0=0, dim1=1),
    "transpose_out_of_range": lambda td: td.transpose(0, 7),
    "flatten_kw": lambda td: _lead(td).flatten(start_dim=0, end_dim=1),
    "flatten_inplace": lambda td: td.flatten(0, -1, inplace=True),
    "unflatten_kw": lambda td: td.unflatten(dim=0, unflattened_size=(1, -1)),
    "unflatten_out_of_range": lambda td: td.unflatten(7, (1, -1)),
    "roll_kw": lambda td: td.roll(shifts=1, dims=0),
    "roll_no_dims": lambda td: td.roll(1),
    "unbind_last": lambda td: td.unbind(-1),
    "split_kw": lambda td: td.split(split_size=2, dim=0),
    "split_last": lambda td: td.split(2, -1),
    "chunk_kw": lambda td: td.chunk(chunks=2, dim=-1),
    "flip_int": lambda td: td.flip(0),
    "flip_tuple": lambda td: td.flip((0, -1)),
    "flip_kw": lambda td: td.flip(dims=-1),
    "flip_out_of_range": lambda td: td.flip(7),
    # repeating
    "repeat": lambda td: td.repeat(*[2] + [1] * (td.ndim - 1)),
    "repeat_last": lambda td: td.repeat(*[1] * (td.ndim - 1) + [3]),
    "repeat_tuple": lambda td: td.repeat(tuple([1] * td.ndim)),
    "repeat_wrong_count": lambda td: td.repeat(*[2] * (td.ndim + 1)),
    "repeat_negative": lambda td: td.repeat(*[-1] * td.ndim),
    "repeat_kw_bad": lambda td: td.repeat(repeats=(2,)),
    "repeat_inplace": lambda td: td.repeat(*[2] + [1] * (td.ndim - 1), inplace=True),
    "repeat_interleave": lambda td: td.repeat_interleave(2, dim=0),
    "repeat_interleave_last": lambda td: td.repeat_interleave(2, dim=-1),
    "repeat_interleave_flat": lambda td: td.repeat_interleave(2),
    "repeat_interleave_tensor": lambda td: td.repeat_interleave(
        torch.arange(td.shape[0]) % 3, dim=0
    ),
    "repeat_interleave_bad_count": lambda td: (
        td.repeat_interleave(torch.tensor([1, 2]), dim=0)
        if td.shape[0] != 2
        else td.repeat_interleave(torch.tensor([1, 2, 3]), dim=0)
    ),
    "repeat_interleave_out_of_range": lambda td: td.repeat_interleave(2, dim=7),
    "repeat_interleave_output_size": lambda td: td.repeat_interleave(
        2, 0, output_size=2 * td.shape[0]
    ),
    "tile": lambda td: td.tile((2, 1)),
    "tile_int": lambda td: td.tile(2),
    "tile_kw": lambda td: td.tile(dims=(2,) + (1,) * td.ndim),
    "tile_empty": lambda td: td.tile(()),
    "tile_negative": lambda td: td.tile((-1, 2)),
    # selecting
    "narrow": lambda td: td.narrow(0, 1, 2),
    "narrow_kw": lambda td: td.narrow(dim=-1, start=0, length=1),
    "narrow_negative_start": lambda td: td.narrow(0, -2, 2),
    "narrow_tensor_start": lambda td: td.narrow(0, torch.tensor(1), 1),
    "narrow_too_long": lambda td: td.narrow(0, 1, 50),
    "narrow_out_of_range": lambda td: td.narrow(7, 0, 1),
    "tensor_split_sections": lambda td: td.tensor_split(2),
    "tensor_split_indices": lambda td: td.tensor_split([1, 2]),
    "tensor_split_tensor": lambda td: td.tensor_split(torch.tensor([1])),
    "tensor_split_kw": lambda td: td.tensor_split(indices_or_sections=2, dim=-1),
    "tensor_split_more_sections": lambda td: td.tensor_split(5),
    "tensor_split_unordered": lambda td: td.tensor_split([2, 1]),
    "tensor_split_zero": lambda td: td.tensor_split(0),
    "tensor_split_out_of_range": lambda td: td.tensor_split(2, 7),
    # reordering
    "movedim": lambda td: _lead(td).movedim(0, 1),
    "movedim_kw": lambda td: _lead(td).movedim(source=-1, destination=0),
    "movedim_tuple": lambda td: _lead(td).movedim((0, 1), (1, 0)),
    "movedim_out_of_range": lambda td: td.movedim(0, 7),
    "movedim_repeated": lambda td: _lead(td).movedim((0, 0), (0, 1)),
    "movedim_mismatch": lambda td: _lead(td).movedim((0, 1), (0,)),
    "moveaxis": lambda td: _lead(td).moveaxis(0, -1),
    "swapaxes": lambda td: _lead(td).swapaxes(0, 1),
    "swapaxes_kw": lambda td: _lead(td).swapaxes(axis0=-1, axis1=0),
    "swapdims": lambda td: _lead(td).swapdims(0, 1),
    "swapdims_out_of_range": lambda td: td.swapdims(0, 7),
    "fliplr": lambda td: _lead(td).fliplr(),
    "flipud": lambda td: td.flipud(),
    "rot90": lambda td: _lead(td).rot90(),
    "rot90_k": lambda td: _lead(td).rot90(2),
    "rot90_negative": lambda td: _lead(td).rot90(-1),
    "rot90_kw": lambda td: _lead(td).rot90(k=3, dims=(1, 0)),
    "rot90_same_dims": lambda td: _lead(td).rot90(1, (0, 0)),
    "rot90_one_dim": lambda td: _lead(td).rot90(1, (0,)),
    "rot90_out_of_range": lambda td: _lead(td).rot90(1, (0, 7)),
    "rot90_1d": lambda td: td[(0,) * (td.ndim - 1)].rot90(),
    # reshaping
    "atleast_1d": lambda td: td.atleast_1d(),
    "atleast_2d": lambda td: td.atleast_2d(),
    "atleast_3d": lambda td: td.atleast_3d(),
    "atleast_3d_0d": lambda td: td[(0,) * td.ndim].atleast_3d(),
    "atleast_2d_0d": lambda td: td[(0,) * td.ndim].atleast_2d(),
    "broadcast_to": lambda td: td.broadcast_to((2, *td.shape)),
    "broadcast_to_kw": lambda td: td.broadcast_to(shape=(2, *td.shape)),
    "broadcast_to_neg": lambda td: td.broadcast_to((-1,) * td.ndim),
    "broadcast_to_bad": lambda td: td.broadcast_to((5,) * td.ndim),
    "broadcast_to_fewer": lambda td: td.broadcast_to((2,)),
    "pad": lambda td: td.pad([1, 0]),
    "pad_kw": lambda td: td.pad(pad_size=[0, 2], value=1.0),
    "pad_crop": lambda td: td.pad([-1, 0]),
    "pad_all_dims": lambda td: td.pad([1, 1] * td.ndim, value=-1.0),
    "pad_odd": lambda td: td.pad([1]),
    "pad_too_long": lambda td: td.pad([1, 1] * (td.ndim + 1)),
    "pad_inplace": lambda td: td.pad([1, 0], inplace=True),
    # new TensorDicts
    "new_zeros": lambda td: td.new_zeros(2, 5),
    "new_zeros_tuple": lambda td: td.new_zeros((2,)),
    "new_zeros_dtype": lambda td: td.new_zeros(2, dtype=torch.float64),
    "new_zeros_negative": lambda td: td.new_zeros(-1),
    "new_ones": lambda td: td.new_ones(3),
    "new_empty_shape": lambda td: td.new_empty(2, 2).apply(lambda t: torch.tensor(t.shape)),
    "new_full": lambda td: td.new_full((2,), 3),
    "new_full_kw": lambda td: td.new_full(size=(2,), fill_value=1.5, dtype=torch.float32),
    "new_tensor_tensor": lambda td: td.new_tensor(torch.ones(2, 3)),
    "new_tensor_list": lambda td: td.new_tensor([1.0, 2.0], dtype=torch.float64),
    "new_tensor_td": lambda td: td.new_tensor(td[0:1]),
    "as_tensor": lambda td: td.as_tensor(),
    "densify": lambda td: td.densify().to_padded_tensor(),
    # queries
    "depth": lambda td: td.depth,
    "is_cpu": lambda td: (td.is_cpu, td.is_cuda, td.is_meta),
    "entry_class_leaf": lambda td: td.entry_class("obs").__name__,
    "entry_class_nested_leaf": lambda td: td.entry_class(("nested", "x")).__name__,
    "entry_class_missing": lambda td: td.entry_class("missing").__name__,
    "get_item_shape_nested_leaf": lambda td: td.get_item_shape(("nested", "y")),
    "data_ptr_keys": lambda td: sorted(map(str, td.data_ptr().keys(True, True))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_layout(case: str, kind: str, check) -> None:
    check(CASES[case], kind)
