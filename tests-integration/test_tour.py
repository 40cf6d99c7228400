"""The README's first command, ``uv run python docs/examples/tour.py``, in its CI form (``--quick``)."""

import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from PIL import Image

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


def assert_training_plot(path: Path) -> None:
    """A PNG of two panels drawn by matplotlib: white canvas, black axes, the blue loss and
    batch-accuracy curves and the orange held-out accuracy (matplotlib's tab: colors)."""
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    with Image.open(path) as image:
        image.verify()  # checks every chunk's CRC
    with Image.open(path) as image:
        assert image.size == (1000, 360)  # figsize (10, 3.6) at 100 dpi
        colors = {rgba[:3] for _, rgba in image.convert("RGBA").getcolors(maxcolors=1 << 20)}
    assert {(255, 255, 255), (0, 0, 0), (31, 119, 180), (255, 127, 14)} <= colors


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
    assert result.stderr == ""  # no progress bars when stderr is not a terminal
    # the tour's temp dir is gone; the plot stays beside it, and the tour says where
    assert leftovers(tmp_path / "tmp") == ["td-tour-training.png"]
    plot = tmp_path / "tmp" / "td-tour-training.png"
    assert f"drawn in {plot}" in out and f"training curves: {plot}" in summary
    assert_training_plot(plot)


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
    assert_training_plot(out_dir / "training.png")
    assert f"drawn in {out_dir / 'training.png'}" in result.stdout
    assert leftovers(tmp_path / "tmp") == []


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_tour_shows_progress_bars_on_a_terminal(tmp_path):
    import fcntl
    import pty
    import termios

    # stderr on a pseudo-terminal, as when a person runs the tour
    leader, follower = pty.openpty()
    # 24 rows of 100 columns: a new pty is 0 x 0, and tqdm draws nothing in 0 columns
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:  # read while it runs: a full terminal buffer would block the tour
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO once the tour has exited and closed its end
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        result = subprocess.run(
            [sys.executable, "-W", "error", str(TOUR), "--rows", "300", "--steps", "3"],
            env={**os.environ, "TMPDIR": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(follower)
        reader.join(timeout=30)
        os.close(leader)
    bars = b"".join(chunks).decode(errors="replace")
    assert result.returncode == 0, result.stdout + bars
    for stage in ("writing chunks", "hashing chunks", "training"):
        assert stage in bars
    assert "100%" in bars and "4/4" in bars  # the training bar: steps 0 to 3
