"""assert_close / assert_allclose_td, against upstream's on the same data."""

import warnings

import pytest
import torch

import td_core as td

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up


def pair(m):
    a = m.TensorDict(x=torch.zeros(3), y=torch.ones(3), n=m.TensorDict(z=torch.ones(2)))
    b = a.clone()
    b["x"] = torch.full((3,), 0.01)
    return a, b


@pytest.mark.parametrize("m", [td, up], ids=["td", "upstream"])
def test_passes_and_fails_like_upstream(m):
    a, b = pair(m)
    assert m.assert_close(a, a.clone()) is True
    assert m.assert_allclose_td(a, b, atol=0.1, rtol=0) is True
    with pytest.raises(AssertionError, match=r"key \('x',\) does not match, got mse = 0.0100"):
        m.assert_close(a, b)
    with pytest.raises(KeyError):
        m.assert_close(a, b.exclude("y"))
    assert m.assert_close(a, b.exclude("y"), intersection=True, atol=1, rtol=0)
    with pytest.raises(TypeError):
        m.assert_close(a, 1)


def test_nested_key_and_message_in_error():
    a, b = pair(td)
    b["n", "z"] = torch.zeros(2)
    with pytest.raises(AssertionError, match=r"\('n', 'z'\).*extra"):
        td.assert_close(a.exclude("x"), b.exclude("x"), msg="extra")


def test_dtype_mismatch_and_nan():
    a = td.TensorDict(x=torch.tensor([float("nan"), 1.0]))
    assert td.assert_close(a, a.clone())
    with pytest.raises(AssertionError):
        td.assert_close(a, a.clone(), equal_nan=False)
    with pytest.raises(AssertionError):
        td.assert_close(a, td.TensorDict(x=torch.tensor([0, 1])))


def test_lazy_stacks_and_tensorclasses():
    ragged = td.lazy_stack([td.TensorDict(a=torch.zeros(2)), td.TensorDict(a=torch.zeros(3))])
    other = td.lazy_stack([td.TensorDict(a=torch.zeros(2)), td.TensorDict(a=torch.zeros(3))])
    assert td.assert_close(ragged, other)
    other.tensordicts[1]["a"] += 1
    with pytest.raises(AssertionError):
        td.assert_close(ragged, other)

    @td.tensorclass
    class Data:
        x: torch.Tensor

    assert td.assert_close(Data(x=torch.ones(2)), Data(x=torch.ones(2)))
    assert td.assert_close(Data(x=torch.ones(2)), td.TensorDict(x=torch.ones(2)))
