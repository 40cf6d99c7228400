"""Check the packages' versions and their td-core ranges (stdlib only).

    python .ci/check_versions.py                    # every range includes td-core's version
    python .ci/check_versions.py --tag td-nn-v0.1.0 # and the tag names a package at that version

uv does not enforce the version ranges between workspace members (they are
installed from the workspace whatever their range says), so a sibling could
declare ``td-core>=0.2`` while the workspace holds td-core 0.1 and every test
would still pass. This script reads each member's ``pyproject.toml`` and version
file (the ``[tool.hatch.version] path``), and fails unless every ``td-core``
requirement includes the workspace's td-core version.

The specifier check is a small subset of PEP 440, enough for the ranges used
here: release versions with optional ``aN``/``bN``/``rcN``, ``.postN`` and
``.devN`` parts, and the operators ``==`` (with ``.*``), ``!=``, ``<``, ``<=``,
``>``, ``>=``, ``~=``. Anything else is reported as an error, never guessed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's dependency tomli is the same parser
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CORE = "td-core"

_VERSION = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc)(?P<pre_n>\d+))?"
    r"(?:\.post(?P<post>\d+))?"
    r"(?:\.dev(?P<dev>\d+))?$"
)
_SPEC = re.compile(r"^(?P<op>~=|==|!=|<=|>=|<|>)\s*(?P<version>[^\s,;]+)$")
_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<specs>[^;]*)"
)
_PRE_ORDER = {"a": 0, "b": 1, "rc": 2}


class VersionError(ValueError):
    """A version or specifier this checker does not understand."""


def parse_version(text: str) -> tuple:
    """A sort key for ``text``: ``1.0.dev1 < 1.0a1 < 1.0rc1 < 1.0 < 1.0.post1 < 1.0.1``."""
    match = _VERSION.match(text.strip())
    if not match:
        raise VersionError(f"unsupported version {text!r}")
    release = tuple(int(p) for p in match["release"].split("."))
    while len(release) > 1 and release[-1] == 0:  # 1.0 == 1.0.0
        release = release[:-1]
    if match["pre"]:
        pre = (_PRE_ORDER[match["pre"]], int(match["pre_n"]))
    elif match["dev"] is not None and match["post"] is None:
        pre = (-1, 0)  # a dev release comes before the pre-releases of its release
    else:
        pre = (3, 0)  # a final release comes after them
    post = int(match["post"]) if match["post"] is not None else -1
    dev = int(match["dev"]) if match["dev"] is not None else sys.maxsize
    return (release, pre, post, dev)


def _release(text: str, length: int = 0) -> tuple[int, ...]:
    """The release numbers of ``text``, zero-padded to ``length`` (``1`` is ``1.0.0``)."""
    match = _VERSION.match(text.strip())
    if not match:
        raise VersionError(f"unsupported version {text!r}")
    release = tuple(int(p) for p in match["release"].split("."))
    return release + (0,) * (length - len(release))


def _is_prerelease(text: str) -> bool:
    match = _VERSION.match(text.strip())
    return bool(match and (match["pre"] or match["dev"] is not None))


def satisfies(version: str, specifiers: str) -> bool:
    """Whether ``version`` satisfies every comma-separated specifier (empty: any)."""
    key = parse_version(version)
    for spec in filter(None, (s.strip() for s in specifiers.split(","))):
        match = _SPEC.match(spec)
        if not match:
            raise VersionError(f"unsupported specifier {spec!r}")
        op, other = match["op"], match["version"]
        if op in ("==", "!=") and other.endswith(".*"):
            prefix = _release(other[:-2])
            ok = _release(version, len(prefix))[: len(prefix)] == prefix
            if (op == "==") != ok:
                return False
            continue
        other_key = parse_version(other)
        if op == "==":
            ok = key == other_key
        elif op == "!=":
            ok = key != other_key
        elif op == "<":
            # PEP 440: <V excludes pre-releases of V unless V is one itself
            ok = key < other_key and not (
                _is_prerelease(version)
                and not _is_prerelease(other)
                and parse_version(version)[0] == parse_version(other)[0]
            )
        elif op == "<=":
            ok = key <= other_key
        elif op == ">":
            ok = key > other_key
        elif op == ">=":
            ok = key >= other_key
        else:  # ~=V.N means >=V.N, ==V.*
            release = _release(other)
            if len(release) < 2:
                raise VersionError(f"~= needs at least two release parts: {spec!r}")
            prefix = release[:-1]
            ok = key >= other_key and _release(version, len(prefix))[: len(prefix)] == prefix
        if not ok:
            return False
    return True


def _self_test() -> None:
    """The checker checks itself first, so a broken comparison cannot pass silently."""
    cases = [
        ("0.1.0", ">=0.1,<0.2", True),
        ("0.2.0", ">=0.1,<0.2", False),
        ("0.1.5", "~=0.1.0", True),
        ("0.2.0", "~=0.1.0", False),
        ("0.2.0", "~=0.1", True),
        ("1.0", "==1.0.0", True),
        ("0.1.3", "==0.1.*", True),
        ("0.10.0", "==0.1.*", False),
        ("0.2.0.dev1", "<0.2", False),
        ("0.2.0rc1", ">=0.1,<0.2", False),
        ("0.1.0rc1", ">=0.1", False),
        ("0.1.0.post1", ">0.1.0", True),
        ("0.1.0", "!=0.1.0", False),
        ("0.1.0", "", True),
        ("1", "==1.0.*", True),
        ("1", "~=1.0", True),
    ]
    for version, spec, expected in cases:
        got = satisfies(version, spec)
        assert got is expected, (
            f"self-test: {version!r} in {spec!r} gave {got}, expected {expected}"
        )


# ------------------------------------------------------------------ the workspace
def members() -> dict[str, Path]:
    """Package name -> folder, for every workspace member."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    out = {}
    for pattern in root["tool"]["uv"]["workspace"]["members"]:
        for folder in sorted(ROOT.glob(pattern)):
            if (folder / "pyproject.toml").is_file():
                name = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"]
                out[name] = folder
    return out


def package_version(folder: Path) -> str:
    """The version in the file that ``[tool.hatch.version] path`` names."""
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    path = folder / project["tool"]["hatch"]["version"]["path"]
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", path.read_text(), re.M)
    if not match:
        raise VersionError(f"{path}: no __version__ = '...' line")
    return match[1]


def core_requirements(folder: Path) -> list[str]:
    """The specifiers of every td-core requirement of a package (runtime and optional)."""
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    out = []
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement.strip())
        if match and re.sub(r"[-_.]+", "-", match["name"]).lower() == CORE:
            out.append(match["specs"].strip())
    return out


def check_ranges(packages: dict[str, Path]) -> list[str]:
    errors = []
    core_version = package_version(packages[CORE])
    for name, folder in packages.items():
        if name == CORE:
            continue
        specs = core_requirements(folder)
        if not specs:
            errors.append(f"{name}: does not depend on {CORE}")
        for spec in specs:
            try:
                ok = satisfies(core_version, spec)
            except VersionError as err:
                errors.append(f"{name}: {err}")
                continue
            print(f"{name}: {CORE}{spec or ' (any version)'} includes {core_version}: {ok}")
            if not ok:
                errors.append(
                    f"{name}: requires {CORE}{spec}, which excludes the workspace's "
                    f"{CORE} {core_version}; widen the range in {folder.name}/pyproject.toml"
                )
    return errors


def check_tag(tag: str, packages: dict[str, Path]) -> list[str]:
    """A release tag is ``<package>-v<version>`` and must match the package's version file."""
    match = re.fullmatch(r"(?P<name>[a-z0-9-]+)-v(?P<version>\d[^\s]*)", tag)
    if not match:
        return [f"tag {tag!r} is not of the form <package>-v<version> (e.g. td-core-v0.1.0)"]
    name, version = match["name"], match["version"]
    if name not in packages:
        return [f"tag {tag!r}: no workspace package {name!r} (packages: {sorted(packages)})"]
    actual = package_version(packages[name])
    if actual != version:
        return [
            f"tag {tag!r}: {name}'s version file says {actual}; bump it with "
            f"`hatch version` in packages/{name} (or move the tag)"
        ]
    print(f"tag {tag}: {name} {actual}")
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", help="a release tag to check, e.g. td-core-v0.1.0")
    args = parser.parse_args(argv)
    _self_test()
    packages = members()
    if CORE not in packages:
        print(f"error: no {CORE} in the workspace", file=sys.stderr)
        return 1
    errors = check_ranges(packages)
    if args.tag:
        errors += check_tag(args.tag, packages)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
