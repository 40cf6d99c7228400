"""The README's first command, ``uv run python docs/examples/tour.py``, in its CI form (``--quick``)."""

import os
import subprocess
import sys
from pathlib import Path

from td_core import TensorDict

TOUR = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tour.py"


def run_tour(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp)}  # where tempfile puts the tour's files
    return subprocess.run(
        [sys.executable, "-W", "error", str(TOUR), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def leftovers(tmp: Path) -> list[str]:
    # torch.optim imports torch._dynamo, which creates torch's (empty) compile cache folder
    # torchinductor_<user> in the temp dir: torch's, not the tour's
    return sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))


def test_quick_tour_runs_prints_a_summary_and_cleans_up(tmp_path):
    result = run_tour("--quick", tmp=tmp_path / "tmp")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for stage in ("1. generate", "2. load it back", "3. train", "4. checkpoint"):
        assert stage in out
    assert "5,000 rows" in out and "distinct images" in out
    assert "step   60  loss" in out
    assert "same predictions as the trained model: True" in out
    summary = out[out.index("\nsummary\n") :]
    assert summary.count(" s  ") == 5 and "total" in summary  # four stages and the total
    assert "60 steps, loss 2." in summary and "accuracy" in summary
    assert "100%" in result.stderr  # the progress bar of the save
    assert leftovers(tmp_path / "tmp") == []  # the tour's temp dir is gone


def test_tour_keeps_its_files_with_out(tmp_path):
    out_dir = tmp_path / "kept"
    result = run_tour("--rows", "300", "--steps", "3", "--out", str(out_dir), tmp=tmp_path / "tmp")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "step    3  loss" in result.stdout
    data = TensorDict.load_memmap(out_dir / "dataset")
    assert data.batch_size == (300,)
    assert data["images"].dtype.is_floating_point is False and data["labels"].max() < 10
    params = TensorDict.load_memmap(out_dir / "model")
    assert len(list(params.keys(include_nested=True, leaves_only=True))) == 8
    assert leftovers(tmp_path / "tmp") == []
