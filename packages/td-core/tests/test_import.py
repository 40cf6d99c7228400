import subprocess
import sys

CHECK = """
import sys, torch
before = set(sys.modules)
import td_core
added = set(sys.modules) - before
print(sorted(m for m in added if not m.startswith("td_core")))
print(sorted(m for m in sys.modules if m.split(".")[0] in {"td_nn", "td_distributions", "td_memmap", "td_query", "tensordict", "sympy"} or m.startswith("torch._dynamo")))
"""


def test_import_is_light_and_loads_no_sibling():
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True
    ).stdout
    added, forbidden = out.strip().splitlines()
    assert added == "[]", f"import td_core pulled in modules beyond torch: {added}"
    assert forbidden == "[]", f"import td_core loaded {forbidden}"
