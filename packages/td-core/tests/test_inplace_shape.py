"""The `inplace=True` forms of the batch-shape ops: what stays, what is released, what refuses."""

import gc
import weakref

import pytest
import torch

from td_core import NonTensorStack, TensorDict, lazy_stack, pad


def nested(batch=(3, 4)):
    return TensorDict(
        {"a": torch.arange(12.0).reshape(*batch), "sub": TensorDict(c=torch.ones(*batch, 2))},
        batch_size=batch,
    )


@pytest.mark.parametrize(
    "op",
    [
        lambda t, **kw: t.reshape(12, **kw),
        lambda t, **kw: t.flatten(0, 1, **kw),
        lambda t, **kw: t.repeat(2, 1, **kw),
        lambda t, **kw: t.pad([0, 1, 0, 2], **kw),
        lambda t, **kw: t.contiguous(**kw),
    ],
)
def test_inplace_keeps_the_container_and_its_sub_tensordicts(op):
    td = nested()
    sub = td.get("sub")
    expected = op(nested())
    out = op(td, inplace=True)
    assert out is td and td.get("sub") is sub
    assert td.batch_size == expected.batch_size == sub.batch_size
    assert (td == expected).all()


def test_inplace_roll_and_contiguous_release_the_old_leaves():
    td = TensorDict(a=torch.zeros(4, 5), batch_size=[4, 5])
    ref = weakref.ref(td["a"])
    td.roll(1, 0, inplace=True)
    gc.collect()
    assert ref() is None
    big = torch.arange(20.0).view(4, 5)
    td = TensorDict(a=big[:, ::2], batch_size=[4, 3])
    assert td.contiguous(inplace=True) is td and td["a"].is_contiguous()
    assert torch.equal(td["a"], big[:, ::2])


@pytest.mark.parametrize(
    "name, call",
    [
        ("flatten", lambda t: t.flatten(0, 1, inplace=True)),
        ("unflatten", lambda t: t.unflatten(0, (1, 2), inplace=True)),
        ("repeat", lambda t: t.repeat(2, 1, inplace=True)),
        ("repeat_interleave", lambda t: t.repeat_interleave(2, dim=1, inplace=True)),
        ("reshape", lambda t: t.reshape(8, inplace=True)),
        ("contiguous", lambda t: t.contiguous(inplace=True)),
    ],
)
def test_inplace_shape_ops_refuse_lazy_stacks_by_name(name, call):
    stack = lazy_stack([TensorDict(x=torch.zeros(4), batch_size=[4]) for _ in range(2)])
    with pytest.raises(NotImplementedError, match=rf"{name}\(.*inplace=True"):
        call(stack)
    assert stack.batch_size == (2, 4) and all(m.batch_size == (4,) for m in stack.tensordicts)


def test_contiguous_canonical_copies_only_odd_strides():
    odd = torch.empty_strided((1, 4, 5), (5, 5, 1)).copy_(torch.arange(20.0).view(1, 4, 5))
    plain = torch.randn(2, 3)
    td = TensorDict(
        odd=odd, plain=plain, sub=TensorDict(odd=odd.clone().as_strided(odd.shape, (5, 5, 1)))
    )
    assert td.contiguous()["odd"].data_ptr() == odd.data_ptr()
    canon = td.contiguous(canonical=True)
    assert canon["odd"].stride() == (20, 5, 1) and torch.equal(canon["odd"], odd)
    assert canon["plain"].data_ptr() == plain.data_ptr()
    assert canon["sub", "odd"].stride() == (20, 5, 1)
    stack = NonTensorStack("a", "b")
    assert stack.contiguous(canonical=True) is stack


def test_pad_inplace_lazy_stack_fills_new_members_with_value_and_none():
    def make():
        return lazy_stack(
            [
                TensorDict(x=torch.full((4,), float(i)), s=NonTensorStack(*"abcd"), batch_size=[4])
                for i in range(2)
            ]
        )

    expected = pad(make(), [0, 1, 0, 2], value=9.0)
    stack = make()
    assert pad(stack, [0, 1, 0, 2], value=9.0, inplace=True) is stack
    assert torch.equal(stack["x"], expected["x"])
    assert stack.get("s").tolist() == expected.get("s").tolist()
    assert stack.get("s").tolist()[2] == [None] * 6 and stack["x"][2].tolist() == [9.0] * 6


def test_pad_crop_below_zero_changes_nothing():
    td = TensorDict(a=torch.ones(3, 4), batch_size=[3, 4])
    old = td["a"]
    with pytest.raises(RuntimeError, match="negative output size"):
        td.pad([-10, 0, 0, 0], inplace=True)
    with pytest.raises(RuntimeError, match="negative output size"):
        pad(td, [-10, 0])
    assert td["a"] is old and td.batch_size == (3, 4)


def test_gather_refuses_out_and_inplace_together():
    td = TensorDict(a=torch.zeros(3, 4), batch_size=[3, 4])
    with pytest.raises(ValueError, match="mutually exclusive"):
        td.gather(0, torch.zeros(3, 4, dtype=torch.long), out=td.clone(), inplace=True)
