"""Every in-place op on a TensorDictStore reaches the server, as it reaches a dense TensorDict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from td_core import TensorDict, assert_close
from td_memmap import TensorDictStore


def _start() -> TensorDict:
    return TensorDict(
        {"obs": torch.arange(15.0).view(5, 3), "nested": {"r": torch.ones(5)}}, batch_size=[5]
    )


def _row() -> TensorDict:
    return TensorDict({"obs": torch.full((3,), -1.0), "nested": {"r": torch.tensor(7.0)}})


OPS: dict[str, Callable[[Any], Any]] = {
    "update_": lambda td: td.update_(_start() * 2),
    "update_ of a dict": lambda td: td.update_({"obs": torch.zeros(5, 3)}),
    "update_at_ int": lambda td: td.update_at_(_row(), 0),
    "update_at_ slice": lambda td: td.update_at_(torch.stack([_row(), _row()]), slice(1, 3)),
    "copy_at_": lambda td: td.copy_at_(_row(), 4),
    "copy_": lambda td: td.copy_(_start() + 1),
    "set_": lambda td: td.set_("obs", torch.zeros(5, 3)),
    "set_at_": lambda td: td.set_at_("obs", torch.zeros(3), 2),
    "td[i] = row": lambda td: td.__setitem__(3, _row()),
    "td[i] = row with a leading 1": lambda td: td.__setitem__(
        0, TensorDict({"obs": torch.zeros(1, 3), "nested": {"r": torch.tensor([5.0])}})
    ),
    "masked_fill_": lambda td: td.masked_fill_(torch.tensor([True, False] * 2 + [True]), 9.0),
    "add_": lambda td: td.add_(1),
    "+=": lambda td: td.__iadd__(2),
    "lerp_": lambda td: td.lerp_(_start() * 0, 0.5),
    "apply_": lambda td: td.apply_(lambda x: x * 3),
    "apply(inplace=True)": lambda td: td.apply(lambda x: x - 1, inplace=True),
    "zero_": lambda td: td.zero_(),
    "fill_": lambda td: td.fill_("obs", 4.0),
}


@pytest.mark.parametrize("op", list(OPS))
def test_inplace_op_reaches_the_server_as_on_a_dense_tensordict(redis_server, op):
    store = TensorDictStore.from_tensordict(_start(), port=redis_server.port)
    try:
        expected = _start()
        OPS[op](expected)
        assert not (expected == _start()).all(), "the op must change something"
        OPS[op](store)
        # a second handle reads the server afresh: nothing is held locally
        again = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
        assert_close(again.to_tensordict(), expected)
    finally:
        store.clear_redis()
        store.close()


RESTRUCTURES: dict[str, Callable[[Any], Any]] = {
    "exclude(inplace=True)": lambda td: td.exclude("obs", inplace=True),
    "select(inplace=True)": lambda td: td.select("nested", inplace=True),
    "split_keys(inplace=True)": lambda td: td.split_keys(["obs"], inplace=True),
}


@pytest.mark.parametrize("op", list(RESTRUCTURES))
def test_an_inplace_restructure_keeps_the_sub_tensordicts_it_keeps(redis_server, op):
    # a sub-TensorDict read from the store is a view of the server: deleting its key before
    # writing the view back emptied it (the nested entries were lost)
    store = TensorDictStore.from_tensordict(_start(), port=redis_server.port)
    try:
        RESTRUCTURES[op](store)
        again = TensorDictStore.from_store(port=redis_server.port, td_id=store.td_id)
        assert_close(again.to_tensordict(), _start().exclude("obs"))
    finally:
        store.clear_redis()
        store.close()
