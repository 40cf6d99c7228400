"""Construction of a dense TensorDict: sources, batch sizes, devices, bad leaves."""

import re
import warnings

import numpy as np
import pytest
import torch

from td_core import TensorDict


def test_from_dict_keeps_entries():
    a = torch.randn(3, 4)
    b = torch.zeros(3, dtype=torch.int64)
    td = TensorDict({"a": a, "b": b}, batch_size=[3])
    assert set(td.keys()) == {"a", "b"}
    assert torch.equal(td["a"], a)
    assert torch.equal(td["b"], b)
    assert td["b"].dtype == torch.int64
    assert td.batch_size == torch.Size([3])


def test_from_dict_does_not_copy_tensors():
    a = torch.randn(3, 4)
    td = TensorDict({"a": a}, batch_size=[3])
    assert td["a"] is a


def test_nested_dict_becomes_nested_tensordict():
    td = TensorDict(
        {"a": torch.zeros(2, 3), "b": {"c": torch.ones(2, 3, 5), "d": {"e": torch.ones(2)}}},
        batch_size=[2],
    )
    assert isinstance(td["b"], TensorDict)
    assert isinstance(td["b", "d"], TensorDict)
    assert td["b"].batch_size == torch.Size([2])
    assert td["b", "d"].batch_size == torch.Size([2])
    assert torch.equal(td["b", "c"], torch.ones(2, 3, 5))
    assert torch.equal(td["b", "d", "e"], torch.ones(2))


def test_nested_tensordict_may_have_longer_batch_size():
    sub = TensorDict({"x": torch.zeros(3, 4, 2)}, batch_size=[3, 4])
    td = TensorDict({"sub": sub}, batch_size=[3])
    assert td["sub"].batch_size == torch.Size([3, 4])
    assert td["sub", "x"].shape == torch.Size([3, 4, 2])


def test_keyword_arguments():
    td = TensorDict(a=torch.zeros(4), b=torch.ones(4, 2), batch_size=[4])
    assert set(td.keys()) == {"a", "b"}
    assert td.batch_size == torch.Size([4])
    assert torch.equal(td["b"], torch.ones(4, 2))


def test_keyword_argument_nested_dict():
    td = TensorDict(a={"b": torch.zeros(4, 1)}, batch_size=[4])
    assert isinstance(td["a"], TensorDict)
    assert td["a", "b"].shape == torch.Size([4, 1])


@pytest.mark.parametrize(
    "make",
    [
        lambda: TensorDict(),
        lambda: TensorDict({}),
        lambda: TensorDict({}, []),
        lambda: TensorDict({}, batch_size=()),
    ],
    ids=["no-args", "empty-dict", "empty-list", "empty-tuple"],
)
def test_empty(make):
    td = make()
    assert td.batch_size == torch.Size([])
    assert list(td.keys()) == []
    assert td.device is None


@pytest.mark.parametrize(
    ("batch_size", "expected"),
    [
        (3, [3]),
        ([3], [3]),
        ((3,), [3]),
        (torch.Size([3]), [3]),
        ([3, 4], [3, 4]),
        ((3, 4), [3, 4]),
        (torch.Size([3, 4]), [3, 4]),
        ([], []),
        ((), []),
        (torch.Size([]), []),
    ],
)
def test_batch_size_forms(batch_size, expected):
    td = TensorDict({"a": torch.zeros(3, 4, 2)}, batch_size=batch_size)
    assert isinstance(td.batch_size, torch.Size)
    assert td.batch_size == torch.Size(expected)
    assert td.shape == torch.Size(expected)
    assert td.batch_dims == len(expected)
    assert td.ndim == len(expected)


def test_batch_size_positional_and_keyword_agree():
    t = torch.zeros(2, 5)
    assert (
        TensorDict({"a": t}, [2, 5]).batch_size
        == TensorDict({"a": t}, batch_size=[2, 5]).batch_size
    )


def test_numel_and_dim():
    td = TensorDict({"a": torch.zeros(2, 3, 4)}, batch_size=[2, 3])
    assert td.numel() == 6
    assert td.dim() == 2
    assert len(td) == 2


def test_len_of_scalar_batch_is_zero():
    assert len(TensorDict({"a": torch.zeros(3)}, [])) == 0


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_device_moves_entries(device):
    td = TensorDict({"a": torch.zeros(3, 2), "b": {"c": torch.ones(3)}}, [3], device=device)
    assert td.device == torch.device(device)
    assert isinstance(td.device, torch.device)
    assert td["a"].device.type == device
    assert td["b", "c"].device.type == device
    assert td["b"].device == torch.device(device)


def test_device_moves_entries_written_later():
    td = TensorDict({}, [3], device="meta")
    td["x"] = torch.zeros(3)
    td.set("y", torch.ones(3, 2))
    td["n", "z"] = torch.zeros(3, 4)
    assert td["x"].device.type == "meta"
    assert td["y"].device.type == "meta"
    assert td["n", "z"].device.type == "meta"
    assert td["n"].device == torch.device("meta")


def test_no_device_keeps_entry_devices():
    td = TensorDict({"a": torch.zeros(3), "m": torch.zeros(3, device="meta")}, [3])
    assert td.device is None
    assert td["a"].device.type == "cpu"
    assert td["m"].device.type == "meta"


def test_numpy_values_become_tensors():
    arr = np.arange(6, dtype=np.float64).reshape(3, 2)
    td = TensorDict({"n": arr, "nested": {"i": np.zeros(3, dtype=np.int32)}}, [3])
    assert isinstance(td["n"], torch.Tensor)
    assert td["n"].dtype == torch.float64
    assert torch.equal(td["n"], torch.as_tensor(arr))
    assert td["nested", "i"].dtype == torch.int32


def test_python_scalar_becomes_tensor_for_empty_batch():
    td = TensorDict({"x": 1.5, "i": 3}, [])
    assert isinstance(td["x"], torch.Tensor)
    assert td["x"].item() == 1.5
    assert td["i"].item() == 3


def test_non_tensor_value_in_source():
    td = TensorDict({"a": torch.zeros(2), "s": "hello"}, [2])
    assert td["s"] == "hello"
    assert torch.equal(td["a"], torch.zeros(2))


@pytest.mark.parametrize(
    ("source", "batch_size", "key", "bad_shape"),
    [
        ({"obs": torch.zeros(3, 5)}, [3, 4], "obs", [3, 5]),
        ({"obs": torch.zeros(2)}, [3], "obs", [2]),
        ({"ok": torch.zeros(3), "reward": torch.zeros(4, 1)}, [3], "reward", [4, 1]),
        ({"scalar": torch.zeros(())}, [3], "scalar", []),
    ],
)
def test_bad_leaf_shape_names_key_and_shapes(source, batch_size, key, bad_shape):
    with pytest.raises(RuntimeError) as info:
        TensorDict(source, batch_size=batch_size)
    msg = str(info.value)
    assert key in msg
    assert str(list(batch_size)) in msg
    if bad_shape:
        assert str(bad_shape) in msg


def test_bad_nested_leaf_shape_names_key():
    with pytest.raises(RuntimeError, match="obs"):
        TensorDict({"a": {"obs": torch.zeros(3, 5)}}, batch_size=[3, 4])


def test_bad_batch_size_error_is_a_value_error_too():
    # td's BatchSizeError subclasses both ValueError and RuntimeError
    with pytest.raises(ValueError, match=re.escape("[3, 5]")):
        TensorDict({"obs": torch.zeros(3, 5)}, batch_size=[3, 4])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"a": torch.zeros(2, 3), "b": torch.zeros(2, 4)}, [2]),
        ({"a": torch.zeros(2, 3, 4), "b": torch.zeros(2, 3)}, [2, 3]),
        ({"a": torch.zeros(2, 3), "b": torch.zeros(4)}, []),
        ({"a": torch.zeros(2, 3), "b": {"c": torch.zeros(2, 3, 5)}}, [2, 3]),
        ({"a": torch.zeros(5, 6)}, [5, 6]),
    ],
)
def test_auto_batch_size(source, expected):
    td = TensorDict(source)
    out = td.auto_batch_size_()
    assert out is td
    assert td.batch_size == torch.Size(expected)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"a": torch.zeros(2, 3), "b": {"c": torch.zeros(2, 3, 5)}}, [2, 3]),
        ({"a": torch.zeros(2, 3), "b": torch.zeros(2, 4)}, [2]),
        ({"a": torch.zeros(2), "b": torch.zeros(3)}, []),
    ],
)
def test_batch_size_none_infers(source, expected):
    # td: batch_size=None asks for the largest common leading shape (upstream 0.15 gives [])
    td = TensorDict(source, batch_size=None)
    assert td.batch_size == torch.Size(expected)


def test_auto_batch_size_limited_dims():
    td = TensorDict({"a": torch.zeros(2, 3), "b": {"c": torch.zeros(2, 3, 5)}})
    td.auto_batch_size_(batch_dims=1)
    assert td.batch_size == torch.Size([2])


def test_auto_batch_size_nested_is_at_least_parent():
    td = TensorDict({"a": torch.zeros(2, 3), "b": {"c": torch.zeros(2, 3, 5)}}).auto_batch_size_()
    assert td["b"].batch_size[:2] == torch.Size([2, 3])


def test_from_dict_infers_or_takes_batch_size():
    source = {"a": torch.zeros(3, 2), "b": {"c": torch.zeros(3)}}
    td = TensorDict.from_dict(source, batch_size=[3])
    assert td.batch_size == torch.Size([3])
    assert isinstance(td["b"], TensorDict)
    assert torch.equal(td["b", "c"], torch.zeros(3))


def test_source_and_keyword_entries_are_exclusive():
    with pytest.raises(ValueError, match="not both"):
        TensorDict({"b": 2}, a=1)
    assert set(TensorDict(a=1, b=1, batch_size=[]).keys()) == {"a", "b"}


def test_from_dict_refuses_batch_size_with_batch_dims():
    data = {"a": torch.zeros(3, 4, 5)}
    with pytest.raises(ValueError, match="both"):
        TensorDict.from_dict(data, batch_size=[3], batch_dims=1)
    assert TensorDict.from_dict(data, batch_dims=1).batch_size == (3,)


def test_batch_size_setter_error_says_which_tensor_is_incompatible():
    td = TensorDict({"a": torch.zeros(3, 4, 5, 6), "b": torch.zeros(3, 4, 5)}, [3, 4])
    message = (
        "the Tensor a has shape torch.Size([3, 4, 5, 6]) which is incompatible with the "
        "batch-size torch.Size([3, 5])."
    )
    with pytest.raises(RuntimeError, match=re.escape(message)):
        td.batch_size = [3, 5]
    assert td.batch_size == (3, 4)


def test_read_only_numpy_array_is_copied_not_aliased():
    array = np.arange(3.0)
    array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        td = TensorDict({"a": array}, batch_size=[3])
    td["a"] += 1
    assert array.tolist() == [0.0, 1.0, 2.0]
    assert td["a"].tolist() == [1.0, 2.0, 3.0]


def test_a_strided_nested_tensor_is_a_leaf_checked_against_the_batch_size():
    # torch's strided nested tensors have no `shape`: their components' count, then the dims the
    # components share, are checked against the batch size (a ragged dim cannot be a batch dim)
    import warnings

    with warnings.catch_warnings():  # torch: "nested tensors are in prototype stage"
        warnings.simplefilter("ignore", UserWarning)
        nt = torch.nested.nested_tensor([torch.zeros(3, 4), torch.ones(3, 5)])
    for bs in ([], [2], [2, 3]):
        td = TensorDict({"a": nt}, bs)
        assert td["a"] is nt and "shape=torch.Size([2, 3, -1])" in repr(td)
        later = TensorDict(batch_size=bs)
        later["a"] = nt
        assert later["a"] is nt
    assert (TensorDict({"a": nt}, [2, 3])[1, 2]["a"] == 1).all()
    for bs in ([3], [2, 3, 4], [2, 4]):
        with pytest.raises(RuntimeError, match=r"\[2, 3, -1\] must start with the batch_size"):
            TensorDict({"a": nt}, bs)
        empty = TensorDict(batch_size=bs)
        with pytest.raises(RuntimeError, match=r"\[2, 3, -1\]"):
            empty["a"] = nt
        assert "a" not in empty.keys()


def test_a_strided_nested_tensor_sizes_the_batch_up_to_its_ragged_dim():
    # auto_batch_size_, batch_size=None and the batch_size setter read a strided nested tensor's
    # dims (it has no `shape`); the batch ends before the ragged dim, as upstream's auto size
    with warnings.catch_warnings():  # torch: "nested tensors are in prototype stage"
        warnings.simplefilter("ignore", UserWarning)
        nt = torch.nested.nested_tensor([torch.ones(3, 4, 5), torch.ones(3, 6, 5)])
    assert TensorDict({"a": nt}).auto_batch_size_().batch_size == (2, 3)
    assert TensorDict({"a": nt, "b": torch.zeros(2, 7)}, batch_size=None).batch_size == (2,)
    td = TensorDict({"a": nt}, [])
    td.batch_size = [2, 3]
    assert td.batch_size == (2, 3)
    with pytest.raises(RuntimeError, match=r"shape torch.Size\(\[2, 3, -1, 5\]\)"):
        td.batch_size = [2, 4]
    # td's batch dims are never ragged (upstream accepts batch_size=[2, 3, -1] here)
    with pytest.raises(ValueError, match="never ragged"):
        TensorDict({"a": nt}, [2, 3, -1])
    padded = TensorDict({"a": nt}, [2, 3]).to_padded_tensor(padding=0)
    assert padded["a"].shape == (2, 3, 6, 5) and padded.batch_size == (2, 3)


@pytest.mark.parametrize(
    ("batch_size", "expected"),
    [([3, 4], [3, 4]), ((2, np.int64(3)), [2, 3]), ([2, torch.tensor(3)], [2, 3]), ([], [])],
)
def test_batch_size_spellings(batch_size, expected):
    assert TensorDict({}, batch_size).batch_size == torch.Size(expected)


@pytest.mark.parametrize(
    ("batch_size", "error", "words"),
    [([3, -1], ValueError, "non-negative"), ([3, 1.5], TypeError, "sequence of ints")],
)
def test_bad_batch_size_names_it(batch_size, error, words):
    with pytest.raises(error, match=words):
        TensorDict({}, batch_size)
