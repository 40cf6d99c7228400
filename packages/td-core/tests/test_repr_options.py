"""The detailed repr under every print option, against upstream's text for the same data."""

import pytest
import torch

import td_core as td

up = pytest.importorskip("tensordict", reason="upstream tensordict (a dev dependency) is missing")

OPTIONS = [
    {},
    {"show_is_view": True},
    {"show_storage_size": True},
    {"plain": True},
    {"sort_keys": "insertion"},
    {"sort_keys": lambda line: line[::-1]},
    {"show_grad": True, "show_is_contiguous": True},
    {"show_device": False, "show_is_shared": False},
    {"show_field_device": False, "show_dtype": False, "show_batch_size": False},
]
IDS = [
    "default",
    "is_view",
    "storage",
    "plain",
    "insertion",
    "callable",
    "grad",
    "header",
    "fields",
]


def _dense(m):
    base = torch.arange(12.0).view(3, 4)
    return m.TensorDict(
        {
            "z": base[::2],
            "b": torch.ones(2, 10),
            "one": torch.full((2, 1), 3.0),
            "n": {"i": torch.arange(6).view(2, 3), "e": torch.zeros(2, 0)},
            "c": torch.ones(2, dtype=torch.complex64),
        },
        [2],
    )


def _lazy(m):
    x = m.TensorDict({"a": torch.arange(6.0).view(2, 3), "c": torch.zeros(2, 5)}, [2])
    y = m.TensorDict({"a": torch.arange(8.0).view(2, 4), "b": {"x": torch.ones(2, 3)}}, [2])
    return m.LazyStackedTensorDict.lazy_stack([x, y], 1)


def _tensorclass(m):
    @m.tensorclass
    class Pair:
        x: torch.Tensor
        y: torch.Tensor

    return Pair(x=torch.arange(12.0).view(3, 4), y=torch.arange(3), batch_size=[3])


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
@pytest.mark.parametrize("make", [_dense, _lazy, _tensorclass], ids=["dense", "lazy", "class"])
def test_detailed_repr_is_upstreams_under_each_option(make, options):
    with up.set_printoptions(compact=False, **options):
        theirs = repr(make(up))
    with td.set_printoptions(**options):
        ours = repr(make(td))
    assert ours == theirs


def test_set_then_exit_restores_the_options():
    before = td.get_printoptions()
    options = td.set_printoptions(show_is_shared=False)
    options.set()
    try:
        assert "\n    is_shared=" not in repr(td.TensorDict(a=torch.zeros(2)))
    finally:
        options.__exit__(None, None, None)
    assert td.get_printoptions() == before
    assert "\n    is_shared=" in repr(td.TensorDict(a=torch.zeros(2)))


def test_plain_summary_of_edge_values():
    one = td.TensorDict(a=torch.tensor([2.5]), e=torch.zeros(0), b=torch.tensor([True, False]))
    with td.set_printoptions(plain=True):
        text = repr(one)
    assert "mean=2.5, std=nan" in text  # one value has no spread
    assert (
        "e: Tensor(shape=torch.Size([0]), device=cpu, dtype=torch.float32, is_shared=False, [])"
        in text
    )
    assert "min=False, max=True" in text
