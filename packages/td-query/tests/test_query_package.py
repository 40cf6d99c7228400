import importlib.metadata

import td_query


def test_version_matches_metadata():
    assert td_query.__version__ == importlib.metadata.version("td-query")
