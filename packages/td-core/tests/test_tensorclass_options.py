"""tensorclass(autocast=, nocast=, frozen=, shadow=, kw_only=), TensorClass, TensorCollection,
NonTensorDataBase and MetaData, against upstream's on the same classes."""

import dataclasses
import warnings

import pytest
import torch

import td_core as td

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up


def build(m, **options):
    @m.tensorclass(**options)
    class Sample:
        x: torch.Tensor
        i: int
        f: float
        s: str

    return Sample


def kinds(value):
    return type(value).__name__


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("options", [{}, {"autocast": True}, {"nocast": True}])
def test_casting_matches_upstream(options):
    results = []
    for m in (td, up):
        obj = build(m, **options)(x=1, i=torch.tensor(2), f=3, s="s", batch_size=[])
        row = [kinds(obj.x), kinds(obj.i), kinds(obj.f), float(obj.f)]
        obj.x, obj.i = 2.5, 2.7
        row += [kinds(obj.x), kinds(obj.i), float(obj.i)]
        results.append(row)
    assert results[0] == results[1]


def test_autocast_and_nocast_exclusive():
    with pytest.raises(ValueError):
        build(td, autocast=True, nocast=True)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_frozen():
    for m in (td, up):
        Frozen = build(m, frozen=True)
        obj = Frozen(x=torch.zeros(()), i=1, f=1.0, s="s")
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.x = torch.ones(())
        assert obj.is_locked


def test_shadow():
    for m in (td, up):
        with pytest.raises(AttributeError, match="shadow=True"):

            @m.tensorclass
            class Bad:
                get: torch.Tensor

        @m.tensorclass(shadow=True)
        class Good:
            get: torch.Tensor

        assert isinstance(Good(get=torch.zeros(2), batch_size=[2]).get, torch.Tensor)


def test_kw_only():
    @td.tensorclass(kw_only=True)
    class KW:
        x: torch.Tensor

    assert KW(x=torch.zeros(2)).x.shape == (2,)
    with pytest.raises(TypeError, match="keyword-only"):
        KW(torch.zeros(2))


# -------------------------------------------------------------- TensorClass
class Batch(td.TensorClass):
    obs: torch.Tensor
    name: str = "b"


def test_tensorclass_class_form():
    b = Batch(obs=torch.zeros(4, 3), batch_size=[4])
    assert td.is_tensorclass(b) and isinstance(b, td.TensorClass) and isinstance(b, Batch)
    assert type(b[:2]) is Batch and b[:2].obs.shape == (2, 3)
    assert type(torch.stack([b, b])) is Batch
    assert b.name == "b"
    assert not td.is_tensorclass(td.TensorClass)


def test_tensorclass_class_form_options():
    class Frozen(td.TensorClass["nocast", "frozen"]):
        x: int

    obj = Frozen(x=1)
    assert type(obj.x) is int and obj.is_locked
    with pytest.raises(dataclasses.FrozenInstanceError):
        obj.x = 2
    with pytest.raises(ValueError, match="unknown option"):
        td.TensorClass["nope"]


def test_tensorclass_class_keywords():
    for m in (td, up):

        class Frozen(m.TensorClass, nocast=True, frozen=True):
            x: int

        obj = Frozen(x=1)
        assert type(obj.x) is int
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.x = 2


def test_field_named_data_needs_no_shadow():
    for m in (td, up):

        @m.tensorclass
        class Sample:
            data: torch.Tensor

        sample = Sample(data=torch.arange(3), batch_size=[3])
        assert sample.data.tolist() == [0, 1, 2]
        assert sample[1:].data.tolist() == [1, 2]


# ----------------------------------------------------- isinstance targets
def test_tensor_collection_covers_every_kind():
    @td.tensorclass
    class Data:
        x: torch.Tensor

    x = td.TensorDict(a=torch.zeros(2), batch_size=[2])
    params = td.TensorDictParams(td.TensorDict(w=torch.zeros(2)))
    for obj in (
        x,
        td.lazy_stack([x, x]),
        params,
        Data(x=torch.ones(1)),
        Batch(obs=torch.ones(1)),
        td.NonTensorData(1),
        x[0],
    ):
        assert isinstance(obj, td.TensorCollection), type(obj)
    assert not isinstance(torch.zeros(1), td.TensorCollection)
    assert issubclass(td.TensorDict, td.TensorCollection)
    assert issubclass(up.TensorDict, up.TensorCollection)


def test_non_tensor_data_base():
    assert isinstance(td.NonTensorData(1), td.NonTensorDataBase)
    assert isinstance(td.MetaData(1), td.NonTensorDataBase)
    assert not isinstance(td.NonTensorStack.from_list([1, 2]), td.NonTensorDataBase)
    assert isinstance(up.NonTensorData(1), up.NonTensorDataBase)


# ------------------------------------------------------------------ MetaData
def test_metadata_keeps_object_through_batch_ops():
    config = {"lr": 0.1}
    for m in (td, up):
        x = m.TensorDict(a=torch.zeros(3), batch_size=[3])
        x["config"] = m.MetaData(config, batch_size=[3])
        assert x["config"] is config
        assert x[0]["config"] is config
        stacked = torch.stack([x, x])
        assert stacked["config"] is config
        assert type(stacked.get("config")).__name__ == "MetaData"
        other = x.clone()
        mixed = torch.stack([x, other])
        assert type(mixed.get("config")).__name__ == "NonTensorStack"


def test_metadata_typed():
    for m in (td, up):
        assert m.MetaData[dict]({"a": 1}).data == {"a": 1}
        with pytest.raises(TypeError):
            m.MetaData[dict]("not a dict")


def test_only_frozen_tensorclasses_are_hashable():
    for m in (td, up):

        @m.tensorclass(frozen=True)
        class Key:
            y: torch.Tensor

        @m.tensorclass
        class Value:
            y: torch.Tensor

        key = Key(y=torch.ones(()))
        assert {key: 0}[key] == 0
        with pytest.raises(TypeError, match="unhashable"):
            hash(Value(y=torch.ones(())))


def test_class_form_methods_may_call_super():
    seen = []

    class Shifted(td.TensorClass, nocast=True):
        a: torch.Tensor
        b: torch.Tensor

        def __setattr__(self, key, value):
            seen.append(key)
            if key == "b":
                return super().__setattr__("b", value + 1)
            return super().__setattr__(key, value)

        def total(self):
            return self.a + self.b

    obj = Shifted(a=torch.zeros(3), b=torch.zeros(3))
    assert seen == ["a", "b"]  # the constructor goes through __setattr__, as a dataclass's does
    assert (obj.b == 1).all() and (obj.total() == 1).all()
    obj.b = torch.ones(())
    assert (obj.b == 2).all() and seen == ["a", "b", "b"]
    assert type(obj.clone()) is Shifted and isinstance(obj, td.TensorClass)


def test_option_flags_of_the_class_form():
    class Frozen(td.TensorClass, nocast=True, frozen=True):
        a: int

    assert Frozen._nocast and Frozen._frozen and not Frozen._autocast
    assert not td.TensorClass._nocast and not td.TensorClass._frozen
