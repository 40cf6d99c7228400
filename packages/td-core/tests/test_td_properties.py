"""Property tests: random nested TensorDicts, random indices, round trips."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from td_core import TensorDict

SETTINGS = settings(max_examples=50, deadline=None)

NAMES = st.sampled_from(["a", "b", "c", "obs", "next", "x_1"])
DTYPES = st.sampled_from([torch.float32, torch.int64, torch.bool])


@st.composite
def batch_sizes(draw, min_dims=0, max_dims=3):
    return tuple(draw(st.lists(st.integers(1, 4), min_size=min_dims, max_size=max_dims)))


@st.composite
def leaves(draw, batch):
    feature = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    dtype = draw(DTYPES)
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 100, (*batch, *feature), generator=g)
    if dtype is torch.bool:
        return values % 2 == 0
    return values.to(dtype)


@st.composite
def tensordicts(draw, batch=None, depth=2):
    if batch is None:
        batch = draw(batch_sizes())
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    source = {}
    for name in names:
        if depth > 0 and draw(st.booleans()):
            source[name] = draw(tensordicts(batch=batch, depth=depth - 1))
        else:
            source[name] = draw(leaves(batch))
    return TensorDict(source, batch_size=batch)


@st.composite
def index_parts(draw, size):
    kind = draw(st.sampled_from(["int", "slice", "mask", "long", "full"]))
    if kind == "int":
        return draw(st.integers(-size, size - 1))
    if kind == "slice":
        start = draw(st.none() | st.integers(-size, size))
        stop = draw(st.none() | st.integers(-size, size))
        step = draw(st.none() | st.integers(1, 3))
        return slice(start, stop, step)
    if kind == "mask":
        return torch.tensor(draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    if kind == "long":
        return torch.tensor(draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=4)))
    return slice(None)


@st.composite
def td_and_index(draw):
    batch = draw(batch_sizes(min_dims=1))
    td = draw(tensordicts(batch=batch))
    n = draw(st.integers(1, len(batch)))
    parts = [draw(index_parts(size)) for size in batch[:n]]
    # at most one advanced (tensor) index, so the result layout is unambiguous and simple
    seen_tensor = False
    for i, part in enumerate(parts):
        if isinstance(part, torch.Tensor):
            if seen_tensor:
                parts[i] = slice(None)
            seen_tensor = True
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), None)
    if len(parts) == 1 and draw(st.booleans()):
        return td, parts[0]
    if draw(st.booleans()) and n < len(batch):
        # a leading ellipsis stands for the dims before the last one, which is indexed
        return td, (..., draw(index_parts(batch[-1])))
    return td, tuple(parts)


def leaf_index(idx, feature_dims):
    parts = idx if isinstance(idx, tuple) else (idx,)
    if any(p is Ellipsis for p in parts):
        return (*parts, *([slice(None)] * feature_dims))
    return idx


def leaf_keys(td):
    return list(td.keys(include_nested=True, leaves_only=True))


@SETTINGS
@given(td_and_index())
def test_index_commutes_with_get(case):
    td, idx = case
    expected_batch = torch.empty(td.batch_size)[idx].shape
    sub = td[idx]
    assert sub.batch_size == expected_batch
    for key in leaf_keys(td):
        leaf = td[key]
        assert torch.equal(sub[key], leaf[leaf_index(idx, leaf.ndim - td.batch_dims)]), key


@SETTINGS
@given(td_and_index())
def test_setitem_commutes_with_tensor_setitem(case):
    td, idx = case
    expected = {key: td[key].clone() for key in leaf_keys(td)}
    value = td[idx].apply(torch.zeros_like)
    td[idx] = value
    for key, leaf in expected.items():
        leaf[leaf_index(idx, leaf.ndim - td.batch_dims)] = 0
        assert torch.equal(td[key], leaf), key


@st.composite
def stack_case(draw):
    batch = draw(batch_sizes(max_dims=2))
    first = draw(tensordicts(batch=batch))
    n = draw(st.integers(1, 4))
    members = [first] + [
        first.apply(lambda x, k=k: (x + k) if x.dtype != torch.bool else ~x) for k in range(1, n)
    ]
    dim = draw(st.integers(-(len(batch) + 1), len(batch)))
    return members, dim


@SETTINGS
@given(stack_case())
def test_stack_unbind_round_trip(case):
    members, dim = case
    stacked = torch.stack(members, dim)
    ndim = members[0].batch_dims + 1
    assert stacked.batch_size[dim % ndim] == len(members)
    back = stacked.unbind(dim)
    assert len(back) == len(members)
    for orig, got in zip(members, back):
        assert got.batch_size == orig.batch_size
        assert set(leaf_keys(got)) == set(leaf_keys(orig))
        for key in leaf_keys(orig):
            assert torch.equal(got[key], orig[key]), key


@SETTINGS
@given(tensordicts(), st.sampled_from([".", "/", "::"]))
def test_flatten_unflatten_keys_round_trip(td, separator):
    flat = td.flatten_keys(separator)
    assert all(isinstance(k, str) for k in flat.keys(include_nested=True))
    assert len(list(flat.keys())) == len(leaf_keys(td))
    back = flat.unflatten_keys(separator)
    assert set(leaf_keys(back)) == set(leaf_keys(td))
    for key in leaf_keys(td):
        assert torch.equal(back[key], td[key]), key
        assert torch.equal(flat[separator.join(key) if isinstance(key, tuple) else key], td[key])


@SETTINGS
@given(tensordicts())
def test_flatten_unflatten_batch_dims_round_trip(td):
    if td.batch_dims < 2:
        flat = td.reshape(-1)
        assert flat.batch_size == torch.Size([td.numel()])
        back = flat.reshape(td.batch_size)
    else:
        flat = td.flatten(0, -1)
        assert flat.batch_size == torch.Size([td.numel()])
        back = flat.unflatten(0, td.batch_size)
    assert back.batch_size == td.batch_size
    for key in leaf_keys(td):
        assert torch.equal(back[key], td[key]), key


@SETTINGS
@given(tensordicts())
def test_clone_equals_and_is_independent(td):
    c = td.clone()
    assert (c == td).all()
    for key in leaf_keys(td):
        assert torch.equal(c[key], td[key])
        if td[key].numel():
            assert c[key].data_ptr() != td[key].data_ptr()


@SETTINGS
@given(tensordicts())
def test_keys_membership_agrees_with_iteration(td):
    nested = list(td.keys(include_nested=True))
    view = td.keys(include_nested=True)
    for key in nested:
        assert key in view
        assert key in td
    for key in leaf_keys(td):
        assert key in nested
        assert isinstance(td[key], torch.Tensor)
    assert len(set(nested)) == len(nested)
