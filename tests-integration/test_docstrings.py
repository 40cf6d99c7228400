"""Every ``>>>`` example in the packages' docstrings runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["td_core", "td_nn", "td_distributions", "td_memmap", "td_query"]


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names.append(package)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}.")]
    return names


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
