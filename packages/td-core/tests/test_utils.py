"""Small public helpers: `convert_ellipsis_to_idx`, `implement_for`."""

import pytest
import torch

from td_core import TensorDict, convert_ellipsis_to_idx, implement_for

ALL = slice(None)


@pytest.mark.parametrize(
    "index,expected",
    [
        (..., (ALL, ALL, ALL, ALL)),
        ((0, ...), (0, ALL, ALL, ALL)),
        ((..., 0), (ALL, ALL, ALL, 0)),
        ((0, ..., slice(1, 2)), (0, ALL, ALL, slice(1, 2))),
        ((None, ..., 0), (None, ALL, ALL, ALL, 0)),
        ((0, 1), (0, 1)),
        (2, 2),
    ],
)
def test_convert_ellipsis_to_idx(index, expected):
    batch_size = [3, 4, 5, 6]
    assert convert_ellipsis_to_idx(index, batch_size) == expected
    td = TensorDict({"a": torch.arange(360).reshape(3, 4, 5, 6)}, batch_size)
    # the expanded index reads what the original index reads
    assert (td[expected]["a"] == td[index]["a"]).all()


@pytest.mark.parametrize(
    "index,words", [((..., 0, ...), "one ellipsis"), ((0, 0, 0, ...), "Not enough")]
)
def test_convert_ellipsis_to_idx_refuses_bad_indices(index, words):
    with pytest.raises(IndexError, match=words) as info:
        convert_ellipsis_to_idx(index, [3, 4])
    assert isinstance(info.value, RuntimeError)


def test_implement_for_picks_the_definition_for_the_installed_version():
    class Impl:
        @implement_for("torch", "2.0", None)
        def which(self):
            return "new"

        @implement_for("torch", None, "2.0")
        def which(self):  # noqa: F811
            return "old"

        @implement_for("torch", None, "2.0")
        def only_old(self):
            return "old"

        @implement_for("torch", "2.0", None, class_method=True)
        def build(cls):
            return cls

    assert Impl().which() == "new"
    assert Impl.build() is Impl
    with pytest.raises(ModuleNotFoundError, match=r"'torch'.*\[-inf, 2.0\)"):
        Impl().only_old()


def test_implement_for_a_missing_package_is_unsupported():
    @implement_for("a_package_that_is_not_installed", "1.0")
    def f():
        return 1

    with pytest.raises(ModuleNotFoundError, match="a_package_that_is_not_installed"):
        f()
    assert not implement_for("torch", "99.0").holds()
    assert implement_for("torch", "2.0", "99.0").holds()
