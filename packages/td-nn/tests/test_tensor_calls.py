"""Modules called with tensors return tensors, as upstream's `dispatch` (issue 22)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from td_nn import TensorDictModule, TensorDictSequential, dispatch


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.lin(x).chunk(2, -1)


def test_keyword_call_returns_only_the_selected_output() -> None:
    module = TensorDictModule(_Net(), in_keys=["x"], out_keys=["loc", "scale"])
    x = torch.randn(2, 3)
    loc, scale = module(x=x)
    expected = module.module(x)
    torch.testing.assert_close((loc, scale), expected)
    module.select_out_keys("loc")
    torch.testing.assert_close(module(x=x), expected[0])


def test_torch_export_of_a_keyword_call_returns_the_outputs_only() -> None:
    module = TensorDictModule(_Net(), in_keys=["x"], out_keys=["loc", "scale"])
    module.select_out_keys("loc")
    x = torch.randn(2, 3)
    program = torch.export.export(module, args=(), kwargs={"x": x})
    assert len(program.graph_signature.user_outputs) == 1  # (loc,), not (x, loc)
    torch.testing.assert_close(program.module()(x=x), module.module(x)[0])


def test_sequence_keyword_call_returns_a_tuple_in_out_keys_order() -> None:
    seq = TensorDictSequential(
        TensorDictModule(lambda x: x + 1, in_keys=[("a", "c")], out_keys=[("b", "d")]),
        TensorDictModule(lambda x: x * 2, in_keys=[("a", "c")], out_keys=["e"]),
    )
    d, e = seq(a_c=torch.ones(1))
    assert d.item() == 2 and e.item() == 2


def test_dispatch_passes_leftover_positional_arguments_on() -> None:
    class Nested(nn.Module):
        in_keys = (("a", "c"), "d")
        out_keys = ("b",)

        @dispatch
        def forward(self, tensordict, other):
            return tensordict.set("b", tensordict["a", "c"] + tensordict["d"] + other)

    assert (Nested()(torch.zeros(2), torch.ones(2), 1) == 2).all()
    with pytest.raises(RuntimeError, match="Duplicated argument"):
        Nested()(torch.zeros(2), a_c=torch.ones(2), other=1)
