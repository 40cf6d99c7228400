"""tensorclass(autocast=True): values cast to the field annotations, forward references too."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from td_core import TensorDict, from_dataclass, is_tensorclass, tensorclass


@tensorclass(autocast=True)
class Node:
    value: torch.Tensor
    label: str
    extra: TensorDict
    child: Node


@tensorclass(autocast=True)
class Scalars:
    tensor: torch.Tensor
    integer: int
    string: str
    floating: float
    array: np.ndarray
    anything: Any


def test_autocast_builds_nested_fields_from_dicts():
    node = Node(
        value=torch.zeros(()),
        label="root",
        extra={"a": 0.0},
        child={"value": 1, "label": 2, "extra": {"b": 0.0}, "child": None},
    )
    assert type(node.child) is Node and type(node.extra) is TensorDict
    assert isinstance(node.child.value, torch.Tensor) and node.child.label == "2"
    assert type(node.child.extra) is TensorDict and node.child.child is None


def test_autocast_to_each_annotation():
    obj = Scalars(tensor=1, integer=1.0, string=1, floating=1, array=[1, 2], anything=1)
    assert isinstance(obj.tensor, torch.Tensor)
    assert type(obj.integer) is int and obj.string == "1" and type(obj.floating) is float
    assert isinstance(obj.array, np.ndarray) and obj.array.tolist() == [1, 2]
    assert isinstance(obj.anything, torch.Tensor)
    obj.tensor = 2.0
    assert isinstance(obj.tensor, torch.Tensor)
    with pytest.raises(TypeError):
        obj.tensor = "text"
    obj.anything = "text"
    assert obj.anything == "text"


def test_option_flags_are_class_attributes():
    assert Node._autocast and not Node._nocast and not Node._frozen

    @tensorclass
    class Plain:
        x: torch.Tensor

    assert not Plain._autocast


@dataclasses.dataclass
class Record:
    a: int
    b: torch.Tensor
    c: str


def test_from_dataclass_gives_a_tensorclass_with_options():
    cast = from_dataclass(Record, autocast=True)
    assert is_tensorclass(cast) and cast._autocast and cast is not Record
    obj = cast(a=0, b=0, c=0)
    assert type(obj.a) is int and isinstance(obj.b, torch.Tensor) and obj.c == "0"
    kept = from_dataclass(Record, nocast=True)(a=0, b=0, c=0)
    assert (type(kept.a), type(kept.b), type(kept.c)) == (int, int, int)
    inst = from_dataclass(Record(a=torch.ones(3), b=torch.zeros(3, 2), c="x"), batch_size=[3])
    assert is_tensorclass(inst) and inst.batch_size == (3,) and inst.c == "x"
    auto = from_dataclass(
        Record(a=torch.ones(3), b=torch.zeros(3, 2), c=None), auto_batch_size=True
    )
    assert auto.batch_size == (3,)
    target = from_dataclass(Record)
    assert type(from_dataclass(Record(1, torch.zeros(()), "y"), dest_cls=target)) is target
    assert type(TensorDict.from_dataclass(Record(1, torch.zeros(()), "y"))) is TensorDict
    with pytest.raises(TypeError, match="dataclass type or instance"):
        from_dataclass({"a": 1})
    with pytest.raises(ValueError, match="inplace=True"):
        from_dataclass(Record, inplace=True)


@tensorclass
class WithPrivate:
    a: torch.Tensor
    _note: Any = None
    rate: ClassVar[float] = 0.5

    @property
    def note(self):
        return self._note

    @note.setter
    def note(self, value):
        self._note = value


def test_underscore_fields_and_string_classvars_follow_dataclasses():
    assert WithPrivate._fields == ("a", "_note")
    assert [f.name for f in dataclasses.fields(WithPrivate)] == ["a", "_note"]
    obj = WithPrivate(torch.ones(3), batch_size=[3])
    assert obj.note is None and obj.rate == 0.5
    obj.note = "text"
    assert obj.note == "text" and obj[0].note == "text"
    assert "rate" not in obj.__expected_keys__


def test_autocast_dict_may_leave_fields_out_and_too_many_positionals_are_refused():
    node = Node(value=torch.zeros(()), label="r", extra={}, child={"value": 1})
    assert isinstance(node.child, Node) and node.child.label is None
    with pytest.raises(TypeError, match="takes 5 positional arguments but 6 were given"):
        Node(1, "a", {}, None, 5)
