import io
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from torch import nn

from td_core import LazyStackedTensorDict, TensorDict, lazy_stack
from td_core._io import pickle_pack


def sample():
    return TensorDict(
        {"a": torch.arange(6.0).view(3, 2), "n": {"b": torch.ones(3, dtype=torch.long)}, "s": "hi"},
        [3],
    )


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.parametrize("weights_only", [True, False])
def test_torch_save_load(weights_only):
    td = sample()
    td.lock_()
    back = roundtrip(td, weights_only=weights_only)
    assert type(back) is TensorDict and back.batch_size == td.batch_size and back.is_locked
    assert (back == td).all() and back["s"] == "hi"


def test_weights_only_lazy_stack_and_non_tensor_stack():
    lazy = lazy_stack([sample(), sample()])
    back = roundtrip(lazy, weights_only=True)
    assert isinstance(back, LazyStackedTensorDict) and back.batch_size == torch.Size([2, 3])
    dense = torch.stack([sample(), sample()])
    back = roundtrip(dense, weights_only=True)
    assert back["s"] == [["hi"] * 3] * 2


def test_weights_only_refuses_arbitrary_objects():
    td = TensorDict({"obj": object()}, [])
    buf = io.BytesIO()
    torch.save(td, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(buf, weights_only=True)


def test_pickle_keeps_device_and_values():
    td = TensorDict({"a": torch.zeros(2)}, [2], device="cpu")
    back = pickle.loads(pickle.dumps(td))
    assert back.device == torch.device("cpu") and torch.equal(back["a"], td["a"])


# ------------------------------------------- small trees pickle as one buffer
def test_a_small_plain_tree_pickles_as_one_buffer_and_keeps_its_state():
    td = TensorDict(
        {"a": torch.arange(6.0).view(2, 3), "n": {"b": torch.ones(2, 4, dtype=torch.long)}},
        [2],
        names=["x"],
    ).set("s", "text")
    td.lock_()
    back = pickle.loads(pickle.dumps(td))
    assert back.is_consolidated()
    assert (back == td).all() and back["s"] == "text"
    assert back.names == ["x"] and back["n"].names == ["x"]
    assert back.is_locked and back["n"].is_locked
    assert not td.is_consolidated()  # the sender's leaves are untouched


def test_an_unlocked_one_buffer_pickle_takes_new_keys():
    back = pickle.loads(pickle.dumps(sample()))
    assert back.is_consolidated() and not back.is_locked
    back["c"] = torch.zeros(3)
    back["a"] += 1
    assert torch.equal(back["a"], sample()["a"] + 1)


def _aliased():
    base = torch.arange(8.0)
    return TensorDict({"a": base[:4], "b": base[4:]}, [4])


@pytest.mark.parametrize(
    "make",
    [
        _aliased,
        lambda: TensorDict({"p": nn.Parameter(torch.ones(3)), "b": torch.zeros(3)}, [3]),
        lambda: TensorDict({"g": torch.ones(3, requires_grad=True), "b": torch.zeros(3)}, [3]),
        lambda: TensorDict({"t": torch.ones(3, 2).t(), "b": torch.zeros(2)}, [2]),
        lambda: TensorDict({"s": torch.ones(3).share_memory_(), "b": torch.zeros(3)}, [3]),
        lambda: TensorDict({"a": torch.ones(3)}, [3]),
        lambda: TensorDict({"a": torch.zeros(pickle_pack.MAX_BYTES // 4), "b": torch.ones(1)}),
        lambda: lazy_stack([lazy_stack([sample(), sample()]), lazy_stack([sample(), sample()])]),
    ],
    ids=[
        "aliased",
        "parameter",
        "grad",
        "transposed",
        "shared",
        "one-leaf",
        "large",
        "nested-lazy",
    ],
)
def test_other_trees_pickle_leaf_by_leaf(make):
    td = make()
    back = pickle.loads(pickle.dumps(td))
    assert not back.is_consolidated()
    for key in td.keys(True, True):
        want, got = td.get(key), back.get(key)
        if isinstance(want, torch.Tensor):
            assert type(got) is type(want) and got.stride() == want.stride(), key
            assert torch.equal(got, want) and got.requires_grad == want.requires_grad, key


def test_aliasing_survives_torch_save():
    back = roundtrip(_aliased(), weights_only=True)
    assert back["b"].untyped_storage().data_ptr() == back["a"].untyped_storage().data_ptr()


@pytest.mark.parametrize("stack_dim", [0, 1])
def test_a_small_lazy_stack_pickles_as_one_buffer(stack_dim):
    members = [sample(), sample().apply(lambda t: t * 2)]
    members[1]["ragged"] = torch.zeros(3, 5)
    members[0]["ragged"] = torch.zeros(3, 2)
    td = lazy_stack(members, stack_dim)
    td.lock_()
    back = pickle.loads(pickle.dumps(td))
    assert back.is_consolidated() and back.stack_dim == stack_dim
    assert back.is_locked and all(m.is_locked and m["n"].is_locked for m in back.tensordicts)
    for got, want in zip(back.tensordicts, td.tensordicts):
        assert (got == want).all() and got["s"] == "hi"


@pytest.mark.parametrize("make", [sample, lambda: lazy_stack([sample(), sample()])])
def test_processes_exchange_leaves_through_shared_memory(make):
    # multiprocessing's pickler moves each leaf to shared memory, as upstream does
    td = make()
    back = pickle.loads(ForkingPickler.dumps(td))
    for node in getattr(td, "tensordicts", [td]) + getattr(back, "tensordicts", [back]):
        assert node["a"].is_shared() and node["n", "b"].is_shared()
    assert not back.is_consolidated()
    assert (back == td).all()


def test_torch_save_of_a_small_tree_writes_one_storage():
    back = roundtrip(sample(), weights_only=True)
    assert back.is_consolidated() and (back == sample()).all()


def test_tensors_shared_with_other_objects_stay_shared_through_a_pickle():
    td = sample()
    pair = pickle.loads(pickle.dumps((td, td.select("a"))))  # both hold td["a"]
    assert pair[0]["a"] is pair[1]["a"] and not pair[0].is_consolidated()
    held = td["n", "b"]  # a variable holds a leaf: it could be pickled beside td
    assert not pickle.loads(pickle.dumps(td)).is_consolidated()
    del held, pair
    assert pickle.loads(pickle.dumps(td)).is_consolidated()
    base = torch.arange(6.0)  # a leaf is a view of a tensor a variable holds
    viewed = TensorDict({"a": base.view(2, 3), "b": torch.zeros(2)}, [2])
    assert not pickle.loads(pickle.dumps(viewed)).is_consolidated()
    del base
    assert pickle.loads(pickle.dumps(viewed)).is_consolidated()


def test_a_lazy_stack_of_members_sharing_tensors_pickles_them_once():
    shared = {"obs": torch.randn(5), "n": {"r": torch.zeros(4)}}
    stack = lazy_stack([TensorDict(shared) for _ in range(4)])
    back = pickle.loads(pickle.dumps(stack))
    assert not back.is_consolidated()
    assert all(m["obs"] is back.tensordicts[0]["obs"] for m in back.tensordicts)
