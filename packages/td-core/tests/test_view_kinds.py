"""What the two write-through view kinds share: a sub-TensorDict and a legacy lazy view.

Both read from and write into a source; their dim names, batch size, copies and
pickles follow the same rules, checked here on each kind.
"""

import pickle

import pytest
import torch
from torch.utils._pytree import tree_map

from td_core import TensorDict, set_lazy_legacy


def _source() -> TensorDict:
    return TensorDict({"a": torch.arange(6.0).reshape(2, 3)}, batch_size=[2, 3])


def _sub(td: TensorDict):
    return td._get_sub_tensordict(0)


def _lazy(td: TensorDict):
    with set_lazy_legacy(True):
        return td.permute(1, 0)


KINDS = {
    "sub": (_sub, "SubTensorDict", "Names of a subtensordict cannot be modified"),
    "lazy": (_lazy, "LazyViewTensorDict", "Names of a lazy tensordict cannot be modified"),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return KINDS[request.param]


def test_dim_names_are_refused_with_the_kinds_message(kind) -> None:
    make, _, message = kind
    view = make(_source())
    names = [f"d{i}" for i in range(view.batch_dims)]
    with pytest.raises(RuntimeError, match=message):
        view.refine_names(*names)
    with pytest.raises(RuntimeError, match=message):
        view.rename_(*names)
    with pytest.raises(RuntimeError, match=message):
        view.names = names
    with pytest.raises(ValueError, match="dim names"):  # a wrong count: the count error
        view.refine_names(*names, "extra")
    assert view.names == [None] * view.batch_dims


def test_batch_size_follows_the_source(kind) -> None:
    make, _, _ = kind
    view = make(_source())
    before = view.batch_size
    with pytest.raises(RuntimeError, match="lazy representation"):
        view.auto_batch_size_()
    assert view.batch_size == before


def test_is_shared_is_the_sources(kind) -> None:
    make, _, _ = kind
    td = _source()
    assert not make(td).is_shared()
    td.share_memory_()
    assert make(td).is_shared()


def test_shallow_clone_is_the_same_kind_over_a_structure_copy(kind) -> None:
    make, name, _ = kind
    td = _source()
    view = make(td)
    shallow = view.clone(recurse=False)
    assert type(shallow).__name__ == name
    assert shallow.batch_size == view.batch_size
    assert torch.equal(shallow["a"], view["a"])
    assert shallow.source is not td
    deep = view.clone()
    assert type(deep) is TensorDict and torch.equal(deep["a"], view["a"])


def test_pickle_keeps_the_kind_and_its_state_key(kind) -> None:
    make, name, _ = kind
    view = make(_source())
    state = view.__getstate__()
    assert set(state) == {"source", "idx" if name == "SubTensorDict" else "op"}
    back = pickle.loads(pickle.dumps(view))
    assert type(back).__name__ == name
    assert back.batch_size == view.batch_size
    assert torch.equal(back["a"], view["a"])


def test_pytree_rebuilds_a_dense_tensordict(kind) -> None:
    make, _, _ = kind
    view = make(_source())
    out = tree_map(lambda t: t + 1, view)
    assert type(out) is TensorDict
    assert out.batch_size == view.batch_size
    assert torch.equal(out["a"], view["a"] + 1)
