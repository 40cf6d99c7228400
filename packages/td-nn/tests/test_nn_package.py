import importlib.metadata

import torch

import td_core
import td_nn


def test_version_matches_metadata():
    assert td_nn.__version__ == importlib.metadata.version("td-nn")


def test_shared_vocabulary_works_through_td_nn():
    # uses every name td_nn shares with td_core and td-distributions
    assert abs(float(td_nn.biased_softplus(2.0)(torch.zeros(()))) - 2.0) < 1e-6
    assert abs(td_nn.inv_softplus(1.0) - 0.5413248546129181) < 1e-9
    assert torch.equal(td_nn.mappings("relu")(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))
    td = td_nn.make_tensordict(a=torch.zeros(3, 4))
    assert td.batch_size == torch.Size([3, 4])
    params = td_nn.TensorDictParams(td_core.TensorDict(w=torch.zeros(2)))
    assert [name for name, _ in params.named_parameters()] == ["w"]
    with td_nn.set_interaction_type("mode"):
        assert td_nn.interaction_type() is td_nn.InteractionType.MODE
    with td_nn.set_composite_lp_aggregate(True):
        assert td_nn.composite_lp_aggregate() is True


def test_importing_td_nn_imports_no_sibling():
    import subprocess
    import sys

    code = (
        "import sys, td_nn; "
        "print(sorted(m for m in ('td_distributions', 'td_memmap', 'td_query') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_all_lists_the_public_names_and_re_exports_the_shared_vocabulary(check_public_names):
    check_public_names(td_nn)
