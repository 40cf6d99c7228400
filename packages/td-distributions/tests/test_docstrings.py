import doctest

import pytest

import td_distributions

OWN = [
    name
    for name in td_distributions.__all__
    if getattr(getattr(td_distributions, name), "__module__", "").startswith("td_distributions")
]


@pytest.mark.parametrize("name", OWN)
def test_docstring_examples_run(name):
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(getattr(td_distributions, name), name, globs={})
    examples = sum(len(t.examples) for t in tests)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0
    assert examples > 0, f"{name} has no docstring example"
