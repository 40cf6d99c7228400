import importlib.metadata

import td_memmap


def test_version_matches_metadata():
    assert td_memmap.__version__ == importlib.metadata.version("td-memmap")
