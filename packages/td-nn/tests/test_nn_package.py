import importlib.metadata

import td_nn


def test_version_matches_metadata():
    assert td_nn.__version__ == importlib.metadata.version("td-nn")
