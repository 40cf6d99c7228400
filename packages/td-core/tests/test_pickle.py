import io
import pickle

import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, lazy_stack


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
