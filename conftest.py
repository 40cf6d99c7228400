"""Test isolation shared by every package's tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_distribution_validation():
    # The first torch.compile in a process turns off argument validation of
    # torch.distributions for the whole process (torch/_dynamo/eval_frame.py);
    # put the default back so tests that check validation errors do not depend
    # on whether a compile test ran before them.
    torch.distributions.Distribution.set_default_validate_args(True)
    yield


@pytest.fixture
def check_public_names():
    """A check of a package's `__all__`, for the sibling packages' tests.

    `__all__` lists exactly the public names the package has (none missing,
    none extra, each of them there), and every name it shares with td_core's
    `__all__` is td_core's own object: re-exported, not reimplemented.
    """
    import types

    import td_core

    def check(package: types.ModuleType) -> None:
        listed = set(package.__all__) - {"__version__"}
        public = {
            name
            for name, value in vars(package).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        }
        assert public == listed, package.__name__
        for name in package.__all__:
            assert hasattr(package, name), name
        shared = listed & set(td_core.__all__)
        assert shared, package.__name__
        for name in shared:
            assert getattr(package, name) is getattr(td_core, name), name

    return check
