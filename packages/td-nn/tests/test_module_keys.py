"""Module keys: unravelled properties, `out_keys_source`, `select_out_keys` errors (issue 22)."""

from __future__ import annotations

import pytest
import torch

from td_core import TensorDict, unravel_key_list
from td_nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential


def _td() -> TensorDict:
    return TensorDict(a=torch.zeros(()), b=torch.ones(()))


def test_unravel_key_list_reads_a_tuple_as_keys() -> None:
    assert unravel_key_list(("d", "e")) == ["d", "e"]
    assert unravel_key_list([("d",), ("e", ("f",))]) == ["d", ("e", "f")]
    assert unravel_key_list("d") == ["d"]


class ClassKeys(TensorDictModuleBase):
    in_keys = ("a", ("b",))
    out_keys = ("c", ("d",), ("e", ("f",)))

    def forward(self, tensordict):
        return (
            tensordict.set("c", tensordict["a"] + 1)
            .set("d", tensordict["b"] + 1)
            .set(("e", "f"), tensordict["a"])
        )


def test_class_attribute_keys_are_unravelled_and_settable_per_instance() -> None:
    first, second = ClassKeys(), ClassKeys()
    assert first.in_keys == ["a", "b"]
    assert first.out_keys == ["c", "d", ("e", "f")]
    assert first.out_keys is first.out_keys_source  # no selection yet
    first.in_keys = [("x",), ("y", ("z",))]
    assert first.in_keys == ["x", ("y", "z")]
    assert second.in_keys == ["a", "b"]  # the class default is untouched


def test_keys_set_in_init_before_module_init_are_unravelled() -> None:
    class Early(TensorDictModuleBase):
        def __init__(self) -> None:
            self.in_keys = [("a",)]
            self.out_keys = [("b", ("c",))]
            super().__init__()

        def forward(self, tensordict):
            return tensordict

    module = Early()
    assert module.in_keys == ["a"] and module.out_keys == [("b", "c")]


@pytest.mark.parametrize("kind", ["module", "base", "sequence"])
def test_select_out_keys_keeps_the_source_keys(kind: str) -> None:
    if kind == "module":
        module = TensorDictModule(
            lambda x, y: (x + 2, y + 2, x), in_keys=["a", "b"], out_keys=["c", "d", "e"]
        )
    elif kind == "sequence":
        module = TensorDictSequential(
            TensorDictModule(lambda x: x + 2, in_keys=["a"], out_keys=["c"]),
            TensorDictModule(lambda x: (x + 2, x), in_keys=["b"], out_keys=["d", "e"]),
        )
    else:

        class Base(TensorDictModuleBase):
            in_keys = ("a", "b")
            out_keys = ("c", "d", "e")

            def forward(self, tensordict):
                return (
                    tensordict.set("c", tensordict["a"])
                    .set("d", tensordict["b"])
                    .set("e", tensordict["a"])
                )

        module = Base()
    assert module.select_out_keys("d", "e") is module
    assert module.out_keys == ["d", "e"]
    assert module.out_keys_source == ["c", "d", "e"]
    assert set(module(_td()).keys()) == {"a", "b", "d", "e"}
    module.reset_out_keys()
    assert module.out_keys == ["c", "d", "e"]
    assert set(module(_td()).keys()) == {"a", "b", "c", "d", "e"}


def test_select_out_keys_rejects_a_list_and_an_unknown_key() -> None:
    module = TensorDictModule(lambda x: (x, x), in_keys=["a"], out_keys=["d", "e"])
    with pytest.raises(ValueError, match=r"key should be a .*\['d'\].*select_out_keys\(\*keys\)"):
        module.select_out_keys(["d"])
    with pytest.raises(ValueError, match=r"Can't select non existent key.*\('d', 'e'\)") as info:
        module.select_out_keys(("d", "e"))
    assert isinstance(info.value, KeyError)
    assert "separate arguments" in str(info.value)
    assert module.out_keys == ["d", "e"]  # a failed selection changes nothing


def test_an_item_that_is_not_a_key_is_named_with_the_list() -> None:
    with pytest.raises(TypeError, match=r"in_keys must be .*: 3 in \['a', 3\] is not a key"):
        TensorDictModule(lambda x: x, in_keys=["a", 3], out_keys=["b"])
