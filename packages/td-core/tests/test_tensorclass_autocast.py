"""tensorclass(autocast=True): values cast to the field annotations, forward references too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from td_core import TensorDict, tensorclass


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
