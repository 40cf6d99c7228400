"""Shape ops of a locked TensorDict give locked results (as upstream); of an unlocked one, unlocked."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from td_core import TensorDict, TensorDictParams, lazy_stack, tensorclass
from td_core.errors import LockedError

OPS = {
    "view": lambda t: t.view(-1),
    "reshape": lambda t: t.reshape(12),
    "reshape_size": lambda t: t.reshape(size=(-1,)),
    "permute": lambda t: t.permute(1, 0),
    "transpose": lambda t: t.transpose(0, 1),
    "squeeze": lambda t: t.unsqueeze(0).squeeze(0),
    "unsqueeze": lambda t: t.unsqueeze(-1),
    "expand": lambda t: t.expand(2, 3, 4),
    "flatten": lambda t: t.flatten(0, 1),
    "unflatten": lambda t: t.unflatten(0, (3, 1)),
    "movedim": lambda t: t.movedim(0, 1),
    "flip": lambda t: t.flip(0),
    "roll": lambda t: t.roll(1, 0),
    "rot90": lambda t: t.rot90(),
    "narrow": lambda t: t.narrow(0, 0, 2),
    "tile": lambda t: t.tile((2, 1)),
    "broadcast_to": lambda t: t.broadcast_to((2, 3, 4)),
    "repeat": lambda t: t.repeat(2, 1),
    "repeat_interleave": lambda t: t.repeat_interleave(2, dim=0),
    "split": lambda t: t.split(1, 0)[-1],
    "chunk": lambda t: t.chunk(3, 0)[0],
    "tensor_split": lambda t: t.tensor_split(2, 1)[1],
}


def _td() -> TensorDict:
    return TensorDict({"a": torch.zeros(3, 4, 2), "n": {"b": torch.zeros(3, 4)}}, [3, 4])


def _lazy() -> Any:
    td = _td()
    return lazy_stack([td[0], td[1], td[2]])


@tensorclass
class _Data:
    a: torch.Tensor


@pytest.mark.parametrize("make", [_td, _lazy], ids=["dense", "lazy"])
@pytest.mark.parametrize("op", list(OPS.values()), ids=list(OPS))
def test_the_result_of_a_locked_source_is_locked_and_refuses_new_keys(op: Any, make: Any) -> None:
    src = make().lock_()
    out = op(src)
    assert out is not src
    assert out.is_locked
    assert out["n"].is_locked
    with pytest.raises(LockedError, match="'new'"):
        out["new"] = torch.zeros(out.batch_size)
    assert "new" not in out.keys()


@pytest.mark.parametrize("op", list(OPS.values()), ids=list(OPS))
def test_the_result_of_an_unlocked_source_is_unlocked(op: Any) -> None:
    out = op(_td())
    assert not out.is_locked
    out["new"] = torch.zeros(out.batch_size)


def test_every_piece_of_a_split_is_locked() -> None:
    pieces = _td().lock_().split([1, 2], 0)
    assert [p.is_locked for p in pieces] == [True, True]


def test_a_view_of_a_locked_source_shares_its_leaves_for_in_place_writes() -> None:
    td = _td().lock_()
    out = td.view(-1)
    out["a"].add_(1)
    out.set_(("n", "b"), torch.ones(12))
    assert (td["a"] == 1).all()
    assert (td["n", "b"] == 1).all()


def test_a_locked_view_unlocks_without_touching_its_source() -> None:
    td = _td().lock_()
    out = td.reshape(-1).unlock_()
    out["new"] = torch.zeros(12)
    assert td.is_locked
    assert "new" not in td.keys()


def test_an_identity_op_gives_the_source_itself_with_its_lock() -> None:
    td = _td().lock_()
    assert td.view(3, 4) is td
    assert td.reshape(td.shape) is td


def test_parameters_and_tensorclasses_give_locked_results() -> None:
    params = TensorDictParams(_td()).lock_()
    assert params.reshape(-1).is_locked
    data = _Data(a=torch.zeros(3, 4), batch_size=[3, 4]).lock_()
    viewed = data.view(-1)
    assert isinstance(viewed, _Data)
    assert viewed.is_locked


@pytest.mark.parametrize(
    "op",
    [
        lambda t, o: t + o,
        lambda t, o: t * 2,
        lambda t, o: t.pow(2),
        lambda t, o: t.abs(),
        lambda t, o: t.clamp(0, 1),
    ],
)
def test_pointwise_math_of_a_locked_td_gives_a_locked_result(op: Any) -> None:
    td = TensorDict(a=torch.ones(3), b={"c": torch.ones(3)}, batch_size=[3]).lock_()
    other = TensorDict(a=torch.ones(3), b={"c": torch.ones(3)}, batch_size=[3])
    out = op(td, other)
    assert out.is_locked and out["b"].is_locked
    with pytest.raises(LockedError):
        out["new"] = torch.zeros(3)
    assert not op(other, other).is_locked  # an unlocked source gives an unlocked result
    assert td.add_(1) is td  # in place: the source itself
