"""Each package installed on its own: build every wheel, install a few into fresh virtual envs.

``uv build --all-packages`` builds the five sdists and, from them, the five wheels;
the first test checks what every archive ships (LICENSE, metadata); each other test makes a new virtual
environment, installs only some of them (plus torch and numpy, pinned to this
environment's versions so uv links them from its cache), and runs a script with
that environment's Python, away from the workspace. Installing needs uv's cache or
the package index: without both, the test fails and says so.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["td-core", "td-distributions", "td-memmap", "td-nn", "td-query"]
PINNED = ["torch", "numpy"]  # the heavy dependencies, pinned so the cached wheels are reused


def _uv() -> str:
    path = os.environ.get("UV") or shutil.which("uv")
    if path is None:
        pytest.fail("the isolated-install test needs the uv executable: not in $UV nor on PATH")
    return path


def _env() -> dict[str, str]:
    # nothing of the workspace's environment leaks into the new ones
    drop = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `command` in `cwd` with the cleaned environment, capturing its output (5 minutes at most)."""
    return subprocess.run(
        command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )


def _uv_run(args: list[str], what: str, cwd: Path) -> None:
    """Run uv offline (from its cache) first, then with the network; fail with uv's words."""
    tries = []
    for extra in (["--offline"], []):
        result = _run([_uv(), *args, *extra], cwd)
        if result.returncode == 0:
            return
        tries.append(result.stderr.strip()[-2000:])
    pytest.fail(
        f"could not {what}, neither from uv's cache (--offline) nor from the package index "
        f"(is the network reachable?).\noffline: {tries[0]}\nonline: {tries[1]}"
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    # sdists first, then each wheel from its sdist (so a file the sdist lacks is missed)
    _uv_run(["build", "--all-packages", "--out-dir", str(out)], "build the packages", ROOT)
    found = {w.name.split("-")[0].replace("_", "-"): w for w in out.glob("*.whl")}
    assert sorted(found) == PACKAGES, sorted(found)
    return found


def test_every_wheel_and_sdist_ships_the_license_and_metadata(wheels):
    license_text = (ROOT / "LICENSE").read_text()
    sdists = {
        s.name.rsplit("-", 1)[0].replace("_", "-"): s
        for s in wheels["td-core"].parent.glob("*.tar.gz")
    }
    assert sorted(sdists) == PACKAGES, sorted(sdists)
    for name, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            files = archive.namelist()
            licenses = [f for f in files if f.endswith(".dist-info/licenses/LICENSE")]
            assert len(licenses) == 1, f"{wheel.name}: no LICENSE in {files}"
            assert archive.read(licenses[0]).decode() == license_text
            meta_name = next(f for f in files if f.endswith(".dist-info/METADATA"))
            meta = email.parser.Parser().parsestr(archive.read(meta_name).decode())
        assert meta["License-Expression"] == "MIT" and meta["Author"], wheel.name
        urls = {u.split(",")[0] for u in meta.get_all("Project-URL", [])}
        assert {"Homepage", "Documentation", "Repository", "Issues"} <= urls, wheel.name
        classifiers = meta.get_all("Classifier", [])
        assert any(c.startswith("Development Status ::") for c in classifiers), wheel.name
        assert {f"Programming Language :: Python :: 3.{m}" for m in (10, 11, 12, 13)} <= set(
            classifiers
        )
        # the long description is the README an index page shows: its links must be absolute
        links = re.findall(r"\]\(([^)]+)\)", meta.get_payload())
        assert all(re.match(r"https://|#", link) for link in links), (wheel.name, links)
        with tarfile.open(sdists[name]) as archive:
            root = archive.getnames()[0].split("/")[0]
            member = archive.extractfile(f"{root}/LICENSE")
            assert member is not None and member.read().decode() == license_text, sdists[name].name
            assert f"{root}/PKG-INFO" in archive.getnames()


def make_venv(tmp_path: Path, wheels: dict[str, Path], names: list[str]) -> Path:
    """A new virtual env holding only the wheels of ``names`` and their dependencies."""
    venv = tmp_path / "venv"
    _uv_run(["venv", str(venv), "--python", sys.executable], "create a virtual env", tmp_path)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    pins = tmp_path / "pins.txt"
    pins.write_text("".join(f"{p}=={importlib.metadata.version(p)}\n" for p in PINNED))
    install = ["pip", "install", "--python", str(python), "--constraint", str(pins)]
    # the wheels asked for by path; their td-* dependencies from the same folder
    install += ["--find-links", str(wheels["td-core"].parent)]
    _uv_run(install + [str(wheels[n]) for n in names], f"install {names}", tmp_path)
    return python


def run_in(python: Path, script: str, tmp_path: Path) -> str:
    """Run ``script`` with the env's Python in an empty folder; return what it printed."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = _run([str(python), "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(script)], cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


PRELUDE = """
    import importlib.metadata
    import importlib.util
    import sys
    import tempfile

    import torch

    import td_core
    from td_core import TensorDict

    assert td_core.__file__.startswith(sys.prefix), td_core.__file__  # the wheel, not the workspace
    installed = sorted(
        d.metadata["Name"] for d in importlib.metadata.distributions() if d.metadata["Name"].startswith("td-")
    )
    print("installed:", " ".join(installed))

    def absent(*modules):
        for name in modules:
            assert importlib.util.find_spec(name) is None, f"{name} is importable"

    def raises(error, needle, call):
        try:
            call()
        except error as err:
            assert needle in str(err), f"{needle!r} not in {err!r}"
        else:
            raise AssertionError(f"{call} did not raise {error.__name__}")
"""


def test_td_core_and_td_nn_alone(tmp_path, wheels):
    python = make_venv(tmp_path, wheels, ["td-core", "td-nn"])
    out = run_in(
        python,
        """
        from torch import nn
        from torch.distributions import Normal
        import td_nn
        from td_nn import ProbabilisticTensorDictModule, TensorDictModule, TensorDictSequential

        absent("td_distributions", "td_memmap", "td_query")
        assert not td_core.has_extension("distributions") and not td_core.has_extension("memmap")

        net = TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["loc"])
        scale = TensorDictModule(lambda loc: loc.exp(), in_keys=["loc"], out_keys=["scale"])
        head = ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"], out_keys=["action"], distribution_class=Normal, return_log_prob=True
        )
        td = TensorDictSequential(net, scale, head)(TensorDict(x=torch.randn(5, 3), batch_size=[5]))
        assert td["action"].shape == (5, 4) and td["action_log_prob"].shape == (5, 4)
        torch.testing.assert_close(td["action"], td["loc"])

        # no default distribution class without td-distributions, no memmap without td-memmap
        raises(TypeError, "td-distributions", lambda: ProbabilisticTensorDictModule(in_keys=["loc"]))
        raises(ImportError, "td-memmap", lambda: td.memmap(tempfile.mkdtemp()))
        print("td-nn works")
        """,
        tmp_path,
    )
    assert "installed: td-core td-nn\n" in out and "td-nn works" in out


def test_td_core_alone(tmp_path, wheels):
    python = make_venv(tmp_path, wheels, ["td-core"])
    out = run_in(
        python,
        """
        absent("td_nn", "td_distributions", "td_memmap", "td_query")
        td = TensorDict(a=torch.arange(6).view(3, 2), b={"c": torch.zeros(3)}, batch_size=[3])
        assert td[1:]["b", "c"].shape == (2,) and torch.stack([td, td]).batch_size == (2, 3)
        assert not td.is_memmap()

        # the memmap methods live in td-memmap: each names it
        folder = tempfile.mkdtemp()
        raises(ImportError, "td-memmap", lambda: td.memmap(folder))
        raises(ImportError, "td-memmap", lambda: td.memmap_(folder))
        raises(ImportError, "td-memmap", lambda: td.memmap_like(folder))
        raises(ImportError, "td-memmap", lambda: td.save(folder))
        raises(ImportError, "td-memmap", lambda: TensorDict.load_memmap(folder))
        raises(ImportError, "td-memmap", lambda: TensorDict.load(folder))
        print("td-core works")
        """,
        tmp_path,
    )
    assert "installed: td-core\n" in out and "td-core works" in out


def test_extensions_are_found_from_installed_wheels(tmp_path, wheels):
    # td-core comes in as a dependency; td-nn finds Delta and td-core finds td-memmap
    # through the entry points declared in the wheels
    python = make_venv(tmp_path, wheels, ["td-nn", "td-distributions", "td-memmap"])
    out = run_in(
        python,
        """
        import td_distributions
        from td_nn import ProbabilisticTensorDictModule

        absent("td_query")
        assert ProbabilisticTensorDictModule(in_keys=["param"]).distribution_class is td_distributions.Delta
        td = TensorDict(a=torch.arange(6).view(3, 2), batch_size=[3])
        folder = tempfile.mkdtemp()
        td.memmap(folder)
        assert (TensorDict.load_memmap(folder) == td).all()
        print("extensions work")
        """,
        tmp_path,
    )
    assert "installed: td-core td-distributions td-memmap td-nn\n" in out
    assert "extensions work" in out
