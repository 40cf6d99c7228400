"""Port by changing imports: an upstream RL training script runs on td with only its imports swapped.

`rl_port_ddpg.py` (also shown in docs/guides/rl-port.md) is written against
upstream tensordict. The test runs it as is, then runs the same text with the
two `tensordict` import lines replaced by td's, and compares the final numbers
(same seed, same data, same order of operations).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "rl_port_ddpg.py"
IMPORTS = {
    "from tensordict import TensorDict\n": "from td_core import TensorDict\n",
    "from tensordict.nn import TensorDictModule, TensorDictSequential\n": (
        "from td_nn import TensorDictModule, TensorDictSequential\n"
    ),
}
TIMEOUT = 300  # seconds; the script itself bounds every collective and its processes


def ported_text() -> str:
    """The script with upstream's imports replaced by td's, and nothing else changed."""
    text = SCRIPT.read_text()
    for upstream, ours in IMPORTS.items():
        assert text.count(upstream) == 1, f"the script no longer has the line {upstream!r}"
        text = text.replace(upstream, ours)
    assert "from tensordict" not in text and "import tensordict" not in text
    return text


def run(path: pathlib.Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, str(path), str(TIMEOUT - 30)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=path.parent,
    )
    assert done.returncode == 0, f"{path.name} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ported_script_changes_only_imports() -> None:
    ported = ported_text().splitlines()
    original = SCRIPT.read_text().splitlines()
    changed = [(a, b) for a, b in zip(original, ported) if a != b]
    assert len(original) == len(ported)
    assert len(changed) == len(IMPORTS)
    assert all(a.startswith("from tensordict") and b.startswith("from td_") for a, b in changed)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], dict[str, float]]:
    folder = tmp_path_factory.mktemp("rl_port")
    ported = folder / "rl_port_ddpg_td.py"
    ported.write_text(ported_text())
    return run(SCRIPT), run(ported)


def test_same_final_numbers_as_upstream(
    results: tuple[dict[str, float], dict[str, float]],
) -> None:
    upstream, td = results
    assert upstream.keys() == td.keys()
    for key in upstream:
        assert td[key] == pytest.approx(upstream[key], rel=1e-5, abs=1e-6), key
