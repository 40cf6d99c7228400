"""parse_tensor_dict_string on td's detailed repr and on upstream's compact repr."""

import warnings

import pytest
import torch

import td_core as td

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up


def make(m):
    return m.TensorDict(
        a=torch.ones(3, 4),
        b=m.TensorDict(
            c=torch.ones(3, 2, dtype=torch.long),
            d=m.TensorDict(e=torch.ones(3, 5, 1, dtype=torch.bool), batch_size=[3, 5]),
            batch_size=[3],
        ),
        batch_size=[3],
    )


def layout(x):
    return (
        tuple(x.batch_size),
        {k: (tuple(x.get(k).shape), x.get(k).dtype) for k in x.keys(True, True)},
        tuple(x["b", "d"].batch_size),
    )


@pytest.mark.parametrize("printed_by", [td, up], ids=["td-repr", "upstream-compact-repr"])
def test_matches_upstream_parse(printed_by):
    ours = td.parse_tensor_dict_string(repr(make(printed_by)))
    theirs = up.parse_tensor_dict_string(repr(make(up)))
    assert layout(ours) == layout(theirs)
    assert ours["a"].sum() == 0


def test_tensorclass_repr():
    @td.tensorclass
    class Data:
        x: torch.Tensor

    out = td.parse_tensor_dict_string(repr(Data(x=torch.ones(2, 3), batch_size=[2])))
    assert out["x"].shape == (2, 3) and out.batch_size == (2,)


def test_errors():
    x = td.TensorDict(a=torch.zeros(2), batch_size=[2])
    x["s"] = "hello"
    with pytest.raises(ValueError, match="'s'"):
        td.parse_tensor_dict_string(repr(x))
    for m in (td, up):
        with pytest.raises(ValueError):
            m.parse_tensor_dict_string("TensorDict(batch_size=[3], fields={a: f32[4], s: str})")
