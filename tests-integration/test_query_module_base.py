"""QueryModule counts as a td-nn TensorDictModuleBase, though td-query never imports td-nn."""

import subprocess
import sys

import torch
from torch import nn

import td_nn
from td_nn import TensorDictModuleBase, TensorDictSequential
from td_query import QueryModule


def test_query_module_is_a_tensordict_module_base() -> None:
    qm = QueryModule(in_keys=["obs"], index_key="idx")
    assert isinstance(qm, td_nn.TensorDictModuleBase)
    assert not isinstance(qm, TensorDictSequential)  # subclasses check as usual
    assert not issubclass(QueryModule, TensorDictModuleBase)


def test_other_objects_are_not() -> None:
    assert not isinstance(nn.Linear(2, 2), TensorDictModuleBase)

    class Keys:  # keys, but not a module
        in_keys = ("a",)
        out_keys = ("b",)

    assert not isinstance(Keys(), TensorDictModuleBase)
    assert not isinstance(torch.zeros(2), TensorDictModuleBase)


def test_td_query_does_not_import_td_nn() -> None:
    code = (
        "import sys, td_query; td_query.QueryModule(in_keys=['a']); print('td_nn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
