"""Every package's metadata: LICENSE shipped, URLs, authors, classifiers, absolute README links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_license_file_is_the_root_one(pkg: Path) -> None:
    assert (pkg / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    project = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_metadata(pkg: Path) -> None:
    project = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    assert project["authors"] == [{"name": "td contributors"}]
    assert {"Homepage", "Documentation", "Repository", "Issues"} <= set(project["urls"])
    classifiers = set(project["classifiers"])
    assert any(c.startswith("Development Status ::") for c in classifiers)
    for minor in (10, 11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_readme_links_are_absolute(pkg: Path) -> None:
    links = re.findall(r"\]\(([^)]+)\)", (pkg / "README.md").read_text())
    relative = [link for link in links if not re.match(r"[a-z]+://|#|mailto:", link)]
    assert not relative, (
        f"{pkg.name}/README.md has relative links (dead on an index page): {relative}"
    )
