import importlib.metadata

import td_core
import td_nn


def test_version_matches_metadata():
    assert td_nn.__version__ == importlib.metadata.version("td-nn")


def test_shared_vocabulary_is_re_exported_not_reimplemented():
    for name in (
        "InteractionType",
        "interaction_type",
        "set_interaction_type",
        "composite_lp_aggregate",
        "set_composite_lp_aggregate",
        "biased_softplus",
        "inv_softplus",
        "mappings",
        "TensorDictParams",
        "make_tensordict",
    ):
        assert getattr(td_nn, name) is getattr(td_core, name), name


def test_public_names():
    assert set(td_nn.__all__) >= {
        "TensorDictModuleBase",
        "TensorDictModule",
        "TensorDictSequential",
        "TensorDictModuleWrapper",
        "ProbabilisticTensorDictModule",
        "ProbabilisticTensorDictSequential",
        "EnsembleModule",
        "make_functional",
        "get_functional",
        "is_functional",
        "repopulate_module",
        "symbolic_trace",
        "dispatch",
        "set_skip_existing",
        "skip_existing",
    }
    for name in td_nn.__all__:
        assert hasattr(td_nn, name), name


def test_utilities_work_through_td_nn():
    import torch

    assert abs(float(td_nn.biased_softplus(2.0)(torch.zeros(()))) - 2.0) < 1e-6
    assert abs(td_nn.inv_softplus(1.0) - 0.5413248546129181) < 1e-9
    td = td_nn.make_tensordict(a=torch.zeros(3, 4))
    assert td.batch_size == torch.Size([3, 4])
    params = td_nn.TensorDictParams(td_core.TensorDict(w=torch.zeros(2)))
    assert [name for name, _ in params.named_parameters()] == ["w"]


def test_importing_td_nn_imports_no_sibling():
    import subprocess
    import sys

    code = (
        "import sys, td_nn; "
        "print(sorted(m for m in ('td_distributions', 'td_memmap', 'td_query') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
