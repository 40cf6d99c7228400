"""Shape operations over the batch dims, and the torch functions that dispatch to them."""

import pytest
import torch

from td_core import TensorDict


def make_td(batch=(3, 4)):
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "a": torch.randn(*batch, 5, generator=g),
            "i": torch.arange(torch.Size(batch).numel()).reshape(batch),
            "nested": {"b": torch.randn(*batch, 2, 2, generator=g)},
        },
        batch_size=batch,
    )


# (name, td method call, the same op on a leaf with `f` trailing feature dims, expected batch)
SHAPE_OPS = [
    ("view-flat", lambda td: td.view(-1), lambda t, f: t.reshape(12, *t.shape[2:]), [12]),
    ("view-2d", lambda td: td.view(2, 6), lambda t, f: t.view(2, 6, *t.shape[2:]), [2, 6]),
    (
        "view-size",
        lambda td: td.view(torch.Size([6, 2])),
        lambda t, f: t.view(6, 2, *t.shape[2:]),
        [6, 2],
    ),
    ("reshape-flat", lambda td: td.reshape(-1), lambda t, f: t.reshape(12, *t.shape[2:]), [12]),
    (
        "reshape-3d",
        lambda td: td.reshape(2, 3, 2),
        lambda t, f: t.reshape(2, 3, 2, *t.shape[2:]),
        [2, 3, 2],
    ),
    (
        "reshape-tuple",
        lambda td: td.reshape((4, 3)),
        lambda t, f: t.reshape(4, 3, *t.shape[2:]),
        [4, 3],
    ),
    ("unsqueeze-0", lambda td: td.unsqueeze(0), lambda t, f: t.unsqueeze(0), [1, 3, 4]),
    ("unsqueeze-1", lambda td: td.unsqueeze(1), lambda t, f: t.unsqueeze(1), [3, 1, 4]),
    ("unsqueeze-neg", lambda td: td.unsqueeze(-1), lambda t, f: t.unsqueeze(2), [3, 4, 1]),
    ("permute", lambda td: td.permute(1, 0), lambda t, f: t.transpose(0, 1), [4, 3]),
    ("permute-list", lambda td: td.permute([1, 0]), lambda t, f: t.transpose(0, 1), [4, 3]),
    ("permute-neg", lambda td: td.permute(-1, -2), lambda t, f: t.transpose(0, 1), [4, 3]),
    ("transpose", lambda td: td.transpose(0, 1), lambda t, f: t.transpose(0, 1), [4, 3]),
    ("transpose-neg", lambda td: td.transpose(-1, 0), lambda t, f: t.transpose(0, 1), [4, 3]),
    ("expand", lambda td: td.expand(2, 3, 4), lambda t, f: t.expand(2, *t.shape), [2, 3, 4]),
    (
        "expand-size",
        lambda td: td.expand(torch.Size([2, 3, 4])),
        lambda t, f: t.expand(2, *t.shape),
        [2, 3, 4],
    ),
    ("flatten", lambda td: td.flatten(0, 1), lambda t, f: t.flatten(0, 1), [12]),
    ("flatten-neg", lambda td: td.flatten(0, -1), lambda t, f: t.flatten(0, 1), [12]),
]


@pytest.mark.parametrize(
    ("op", "tensor_op", "batch"), [c[1:] for c in SHAPE_OPS], ids=[c[0] for c in SHAPE_OPS]
)
def test_shape_op_matches_tensor_op(op, tensor_op, batch):
    td = make_td()
    out = op(td)
    assert isinstance(out, TensorDict)
    assert out.batch_size == torch.Size(batch)
    assert out["nested"].batch_size == torch.Size(batch)
    for key in ["a", "i", ("nested", "b")]:
        leaf = td[key]
        assert torch.equal(out[key], tensor_op(leaf, leaf.ndim - 2)), key
    # the source is unchanged
    assert td.batch_size == torch.Size([3, 4])


def test_squeeze_all_and_dim():
    td = TensorDict({"a": torch.randn(1, 3, 1, 2), "n": {"b": torch.zeros(1, 3, 1)}}, [1, 3, 1])
    assert td.squeeze().batch_size == torch.Size([3])
    assert td.squeeze()["a"].shape == torch.Size([3, 2])
    assert td.squeeze()["n", "b"].shape == torch.Size([3])
    assert td.squeeze(0).batch_size == torch.Size([3, 1])
    assert td.squeeze(-1).batch_size == torch.Size([1, 3])
    assert td.squeeze(-1)["a"].shape == torch.Size([1, 3, 2])
    # squeezing a dim that is not 1 is a no-op, like for tensors
    assert td.squeeze(1).batch_size == torch.Size([1, 3, 1])


def test_squeeze_never_touches_feature_dims():
    td = TensorDict({"a": torch.zeros(3, 1)}, [3])
    assert td.squeeze()["a"].shape == torch.Size([3, 1])


def test_view_shares_storage():
    td = make_td()
    v = td.view(-1)
    v["a"].zero_()
    assert (td["a"] == 0).all()


def test_unflatten():
    td = make_td((6, 2))
    out = td.unflatten(0, (2, 3))
    assert out.batch_size == torch.Size([2, 3, 2])
    assert torch.equal(out["a"], td["a"].unflatten(0, (2, 3)))
    assert out["nested"].batch_size == torch.Size([2, 3, 2])
    back = out.flatten(0, 1)
    assert back.batch_size == td.batch_size
    assert torch.equal(back["nested", "b"], td["nested", "b"])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unbind(dim):
    td = make_td()
    parts = td.unbind(dim)
    assert isinstance(parts, tuple)
    assert len(parts) == td.batch_size[dim]
    for j, part in enumerate(parts):
        assert part.batch_size == torch.Size([4] if dim == 0 else [3])
        assert torch.equal(part["a"], td["a"].select(dim % 2, j))
        assert torch.equal(part["nested", "b"], td["nested", "b"].select(dim % 2, j))


@pytest.mark.parametrize(
    ("split", "dim", "sizes"),
    [(2, 0, [2, 1]), ([1, 2], 0, [1, 2]), (3, 1, [3, 1]), ([2, 2], -1, [2, 2]), (4, 0, [3])],
)
def test_split(split, dim, sizes):
    td = make_td()
    parts = td.split(split, dim)
    assert [p.batch_size[dim] for p in parts] == sizes
    expected = td["a"].split(split, dim % 2)
    for part, leaf in zip(parts, expected):
        assert torch.equal(part["a"], leaf)


@pytest.mark.parametrize(
    ("chunks", "dim", "sizes"), [(2, 0, [2, 1]), (2, 1, [2, 2]), (4, 1, [1, 1, 1, 1])]
)
def test_chunk(chunks, dim, sizes):
    td = make_td()
    parts = td.chunk(chunks, dim)
    assert [p.batch_size[dim] for p in parts] == sizes
    for part, leaf in zip(parts, td["i"].chunk(chunks, dim)):
        assert torch.equal(part["i"], leaf)


def test_chunk_and_split_of_a_jagged_leaf():
    # torch cuts a jagged nested tensor along its batch dim with chunk only
    seqs = [torch.arange(3), torch.arange(4), torch.arange(2)]
    td = TensorDict(
        {"ids": torch.nested.as_nested_tensor(seqs, layout=torch.jagged), "x": torch.ones(3, 2)},
        batch_size=[3],
    )
    for parts in (td.chunk(2), td.split([2, 1]), td.split(2)):
        assert [p.batch_size for p in parts] == [torch.Size([2]), torch.Size([1])]
        assert [list(map(len, p["ids"].unbind())) for p in parts] == [[3, 4], [2]]
        assert torch.equal(parts[1]["ids"].unbind()[0], seqs[2])
    with pytest.raises(RuntimeError, match="NestedTensor"):  # pieces chunk does not cut
        td.split([1, 2])


def test_batch_size_setter_shrink_and_grow():
    td = TensorDict({"a": torch.zeros(3, 4, 2), "n": {"b": torch.zeros(3, 4)}}, [3, 4])
    td.batch_size = [3]
    assert td.batch_size == torch.Size([3])
    assert td["n"].batch_size[:1] == torch.Size([3])
    td.batch_size = torch.Size([3, 4])
    assert td.batch_size == torch.Size([3, 4])
    td.batch_size = []
    assert td.batch_size == torch.Size([])
    assert td["a"].shape == torch.Size([3, 4, 2])


def test_nested_longer_batch_is_reshaped_with_parent():
    sub = TensorDict({"x": torch.zeros(2, 3, 4)}, [2, 3, 4])
    td = TensorDict({"s": sub}, [2, 3])
    assert td.reshape(-1)["s"].batch_size == torch.Size([6, 4])
    assert td.view(-1)["s", "x"].shape == torch.Size([6, 4])
    assert td.permute(1, 0)["s"].batch_size == torch.Size([3, 2, 4])
    assert td.unsqueeze(0)["s"].batch_size == torch.Size([1, 2, 3, 4])


# ---------------------------------------------------------------- torch functions


def test_torch_stack_is_dense():
    tds = [make_td() for _ in range(3)]
    out = torch.stack(tds, 0)
    assert type(out) is TensorDict
    assert out.batch_size == torch.Size([3, 3, 4])
    assert torch.equal(out["a"], torch.stack([t["a"] for t in tds], 0))
    assert type(out["nested"]) is TensorDict
    # dense: writes to the stack do not reach the originals
    out["a"].zero_()
    assert not (tds[0]["a"] == 0).all()


@pytest.mark.parametrize(
    ("dim", "batch"), [(0, [2, 3, 4]), (1, [3, 2, 4]), (2, [3, 4, 2]), (-1, [3, 4, 2])]
)
def test_torch_stack_dims(dim, batch):
    tds = [make_td(), make_td() + 1]
    out = torch.stack(tds, dim)
    assert out.batch_size == torch.Size(batch)
    # for leaves, stacking at batch dim `dim` (counted among batch dims) is the tensor stack
    tensor_dim = dim if dim >= 0 else len(batch) + dim
    assert torch.equal(out["nested", "b"], torch.stack([t["nested", "b"] for t in tds], tensor_dim))
    assert torch.equal(out["i"], torch.stack([t["i"] for t in tds], tensor_dim))


def test_torch_stack_keeps_non_tensor():
    tds = [TensorDict({"x": torch.zeros(2), "s": "same"}, [2]) for _ in range(3)]
    out = torch.stack(tds)
    assert out.batch_size == torch.Size([3, 2])
    # stacking gives one value per element, equal or not; a stacked leaf read back whole
    # (its row along the stack dim) is that leaf, as upstream
    assert out[0]["s"] == "same"
    assert out[:, 0]["s"] == ["same", "same", "same"]
    assert out[0, 1]["s"] == "same"
    assert out["s"] == [["same", "same"]] * 3


@pytest.mark.parametrize(("dim", "batch"), [(0, [6, 4]), (1, [3, 8]), (-1, [3, 8])])
def test_torch_cat(dim, batch):
    tds = [make_td(), make_td() * 2]
    out = torch.cat(tds, dim)
    assert type(out) is TensorDict
    assert out.batch_size == torch.Size(batch)
    tensor_dim = dim % 2
    assert torch.equal(out["a"], torch.cat([t["a"] for t in tds], tensor_dim))
    assert torch.equal(out["nested", "b"], torch.cat([t["nested", "b"] for t in tds], tensor_dim))
    assert out["nested"].batch_size == torch.Size(batch)


def test_torch_unbind_and_split_and_chunk():
    td = make_td()
    parts = torch.unbind(td, 1)
    assert len(parts) == 4
    assert torch.equal(parts[2]["a"], td["a"][:, 2])
    splits = torch.split(td, 2, 0)
    assert [s.batch_size for s in splits] == [torch.Size([2, 4]), torch.Size([1, 4])]
    chunks = torch.chunk(td, 2, 1)
    assert [c.batch_size for c in chunks] == [torch.Size([3, 2]), torch.Size([3, 2])]


@pytest.mark.parametrize(
    ("fn", "batch"),
    [
        (lambda td: torch.unsqueeze(td, 0), [1, 3, 4]),
        (lambda td: torch.permute(td, (1, 0)), [4, 3]),
        (lambda td: torch.squeeze(td.unsqueeze(0)), [3, 4]),
        (lambda td: torch.clone(td), [3, 4]),
        (lambda td: torch.flatten(td, 0, 1), [12]),
        (lambda td: torch.reshape(td, (12,)), [12]),
    ],
    ids=["unsqueeze", "permute", "squeeze", "clone", "flatten", "reshape"],
)
def test_torch_functions_dispatch(fn, batch):
    out = fn(make_td())
    assert isinstance(out, TensorDict)
    assert out.batch_size == torch.Size(batch)


@pytest.mark.parametrize(
    ("fn", "value"),
    [(torch.zeros_like, 0), (torch.ones_like, 1), (lambda td: torch.full_like(td, 3), 3)],
    ids=["zeros_like", "ones_like", "full_like"],
)
def test_torch_like_functions(fn, value):
    td = make_td()
    out = fn(td)
    assert out.batch_size == td.batch_size
    assert (out["a"] == value).all()
    assert (out["nested", "b"] == value).all()
    assert out["i"].dtype == torch.int64
    assert not (td["a"] == value).all()


def test_torch_where():
    td = make_td()
    cond = torch.tensor([[True, False, True, False]] * 3)
    other = td.apply(torch.zeros_like)
    out = torch.where(cond, td, other)
    assert out.batch_size == td.batch_size
    assert torch.equal(out["a"], torch.where(cond.unsqueeze(-1), td["a"], 0.0))
    assert torch.equal(out["i"], torch.where(cond, td["i"], 0))
    assert torch.equal(
        out["nested", "b"], torch.where(cond[..., None, None], td["nested", "b"], 0.0)
    )


def test_torch_gather():
    td = make_td()
    index = torch.tensor([[0, 3], [1, 1], [2, 0]])
    out = torch.gather(td, 1, index)
    assert out.batch_size == torch.Size([3, 2])
    assert torch.equal(out["i"], torch.gather(td["i"], 1, index))
    expanded = index.unsqueeze(-1).expand(3, 2, 5)
    assert torch.equal(out["a"], torch.gather(td["a"], 1, expanded))


def test_stack_then_unbind_round_trip():
    tds = [make_td() * k for k in range(4)]
    back = torch.stack(tds, 1).unbind(1)
    assert len(back) == 4
    for orig, got in zip(tds, back):
        assert got.batch_size == orig.batch_size
        assert torch.equal(got["a"], orig["a"])
        assert torch.equal(got["nested", "b"], orig["nested", "b"])


def test_torch_layout_functions_dispatch_to_the_methods():
    b = torch.arange(6).view(2, 3)
    td = TensorDict({"a": torch.arange(24).view(2, 3, 4), "b": b}, batch_size=(2, 3))
    for fn, args in [
        (torch.fliplr, ()),
        (torch.flipud, ()),
        (torch.rot90, ()),
        (torch.rot90, (2,)),
        (torch.narrow, (1, 1, 2)),
        (torch.tile, ((2, 2),)),
        (torch.broadcast_to, ((4, 2, 3),)),
    ]:
        out = fn(td, *args)
        assert torch.equal(out["b"], fn(b, *args)), fn
        assert out.batch_size == fn(b, *args).shape
    scalar = TensorDict(a=torch.randn(3))
    assert torch.atleast_1d(scalar).batch_size == (1,)
    assert torch.atleast_3d(td).batch_size == (1, 2, 3)
    pair = torch.atleast_2d(scalar, torch.zeros(()))
    assert pair[0].batch_size == (1, 1) and pair[1].shape == (1, 1)


# torch's batch-shape functions called with torch's own keyword names (input first)
TORCH_KEYWORD_CALLS = [
    (torch.unbind, {"dim": 1}),
    (torch.split, {"split_size_or_sections": 2, "dim": 0}),
    (torch.chunk, {"chunks": 2, "dim": 1}),
    (torch.squeeze, {"dim": 0}),
    (torch.unsqueeze, {"dim": 1}),
    (torch.permute, {"dims": (1, 0)}),
    (torch.reshape, {"shape": (12,)}),
    (torch.flatten, {"start_dim": 0, "end_dim": 1}),
    (torch.unflatten, {"dim": 1, "sizes": (2, 2)}),
    (torch.transpose, {"dim0": 0, "dim1": 1}),
    (torch.swapdims, {"dim0": 0, "dim1": 1}),
    (torch.movedim, {"source": 0, "destination": 1}),
    (torch.moveaxis, {"source": 0, "destination": 1}),
    (torch.flip, {"dims": (0,)}),
    (torch.rot90, {"k": 2, "dims": (0, 1)}),
    (torch.narrow, {"dim": 1, "start": 1, "length": 2}),
    (torch.tile, {"dims": (2, 1)}),
    (torch.broadcast_to, {"size": (2, 3, 4)}),
]


@pytest.mark.parametrize(
    ("fn", "kwargs"), TORCH_KEYWORD_CALLS, ids=[fn.__name__ for fn, _ in TORCH_KEYWORD_CALLS]
)
def test_torch_shape_functions_take_torchs_keyword_names(fn, kwargs):
    td = make_td()
    out, expected = fn(td, **kwargs), fn(td["i"], **kwargs)
    outs, tensors = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
    assert len(outs) == len(tensors)
    for got, want in zip(outs, tensors):
        assert got.batch_size == want.shape
        assert torch.equal(got["i"], want)


def test_torch_masked_select_and_swapaxes_dispatch_to_the_methods():
    td = make_td()
    mask = td["i"] % 2 == 0
    assert torch.equal(torch.masked_select(td, mask)["i"], td["i"][mask])
    assert torch.swapaxes(td, 0, 1).batch_size == (4, 3)
    with pytest.raises(TypeError):  # a tensor first with a TensorDict after it: not ours
        torch.masked_select(td["i"], make_td())


def test_flip_and_rotate_need_enough_batch_dims():
    flat = TensorDict(a=torch.randn(3), batch_size=[3])
    for op in (flat.fliplr, flat.rot90):
        with pytest.raises(RuntimeError, match="requires at least 2"):
            op()


def test_expand_as_a_tensordict_expands_leaf_by_leaf():
    small = TensorDict({"a": torch.ones(3, 1, 4), "b": {"c": torch.ones(3, 2, 1, 4)}}, [3])
    big = TensorDict({"a": torch.zeros(2, 3, 5, 4), "b": {"c": torch.zeros(2, 3, 2, 6, 4)}}, [2, 3])
    out = small.expand_as(big)
    assert out.batch_size == (2, 3) and out["a"].shape == (2, 3, 5, 4)
    assert out["b", "c"].shape == (2, 3, 2, 6, 4) and (out == 1).all()
    assert small.expand_as(torch.zeros(2, 3)).batch_size == (2, 3)  # a tensor: the batch dims


def test_split_refuses_bad_arguments_with_upstreams_words():
    td = TensorDict({}, [3, 2])
    with pytest.raises(IndexError, match="Incompatible dim"):
        td.split(1, 2)
    with pytest.raises(TypeError, match="must be int or list of ints"):
        td.split("1", 0)
    with pytest.raises(TypeError, match="must be int or list of ints"):
        td.split(["1", 2], 0)
    with pytest.raises(RuntimeError, match="Insufficient number of elements in split_size"):
        td.split([], 0)
    with pytest.raises(RuntimeError, match="expects split_size to sum exactly to 3"):
        td.split([1, 1], 0)
    with pytest.raises(ValueError, match=r"split_size must be positive, got 0\."):
        td.split(0, -1)
    assert [t.batch_size[0] for t in td.split([1, 2], 0)] == [1, 2]


@pytest.mark.parametrize("op", [torch.cat, torch.stack])
def test_stack_and_cat_name_the_entry_on_another_device(op):
    """A device mismatch is named as one (with upstream's words), not as a shape mismatch."""
    on_cpu = TensorDict({"sub": TensorDict({"a": torch.randn(2, 3)}, [2])}, [2])
    on_meta = TensorDict({"sub": TensorDict({"a": torch.randn(2, 3, device="meta")}, [2])}, [2])
    with pytest.raises(RuntimeError, match='tensors on different devices at key "sub" / "a"'):
        op([on_cpu, on_meta], 0)
