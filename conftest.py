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
