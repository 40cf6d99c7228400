import importlib.metadata

import td_distributions


def test_version_matches_metadata():
    assert td_distributions.__version__ == importlib.metadata.version("td-distributions")
