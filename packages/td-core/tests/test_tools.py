"""expand_right, expand_as_right, timeit, and the tensordict.utils aliases, against upstream."""

import logging
import typing

import pytest
import torch

import td_core as td

up_utils = pytest.importorskip("tensordict.utils", reason="upstream tensordict (dev dependency)")


@pytest.mark.parametrize(
    "shape, target",
    [((3,), (3, 2)), ((3, 1), (3, 4, 5)), ((1,), (4, 2)), ((2, 3), (2, 3))],
)
def test_expand_right_is_upstreams(shape, target):
    x = torch.arange(torch.Size(shape).numel()).view(shape)
    ours, theirs = td.expand_right(x, target), up_utils.expand_right(x, target)
    assert ours.shape == theirs.shape and (ours == theirs).all()
    assert ours.data_ptr() == x.data_ptr()  # a view


def test_expand_as_right_on_tensors_and_tensordicts():
    x = torch.arange(3)
    assert td.expand_as_right(x, torch.zeros(3, 2, 4)).shape == (3, 2, 4)
    assert td.expand_as_right(x, td.TensorDict(batch_size=[3, 5])).shape == (3, 5)
    with pytest.raises(RuntimeError, match="at least as many dimensions"):
        td.expand_as_right(torch.zeros(2, 3), torch.zeros(3))
    with pytest.raises(RuntimeError, match="incompatible"):
        td.expand_as_right(torch.zeros(2), torch.zeros(3, 2))


def test_timeit_accumulates_logs_and_erases(caplog):
    td.timeit.erase()

    @td.timeit("step")
    def step():
        return 7

    assert step() == 7 and step() == 7
    with td.timeit("block"):
        pass
    mean, total, count = td.timeit._REG["step"]
    assert count == 2 and total >= mean >= 0
    with caplog.at_level(logging.INFO, logger="td_core"):
        td.timeit.print(prefix="run")
    assert [r.getMessage().split(" took")[0] for r in caplog.records] == [
        "run -- block",
        "run -- step",
    ]
    td.timeit.erase()
    assert td.timeit._REG["step"] == [0.0, 0.0, 0]


def test_aliases_are_upstreams():
    assert td.Buffer is up_utils.Buffer is torch.nn.Buffer
    # the same members (`list[Any]` here, `typing.List[Any]` upstream)
    for ours, theirs in [(td.IndexType, up_utils.IndexType), (td.DeviceType, up_utils.DeviceType)]:
        members = [typing.get_origin(a) or a for a in typing.get_args(ours)]
        assert members == [typing.get_origin(a) or a for a in typing.get_args(theirs)]


@pytest.mark.parametrize("name", ["NUMPY_TO_TORCH_DTYPE_DICT", "TORCH_TO_NUMPY_DTYPE_DICT"])
def test_deprecated_dtype_tables_warn_and_equal_upstreams(name):
    with pytest.warns(DeprecationWarning, match=name):
        ours = getattr(td, name)
    with pytest.warns(DeprecationWarning):
        theirs = getattr(up_utils, name)
    assert ours == theirs and len(ours) >= 11
    assert name not in td.__all__


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="'td_core' has no attribute 'not_a_name'"):
        td.not_a_name  # noqa: B018
    assert not hasattr(td, "NUMPY_TO_TORCH")
