"""`print_directory_tree`: what a saved TensorDict folder holds, one line per file or folder."""

from __future__ import annotations

import os

from td_core._core.utils import logger

__all__ = ["print_directory_tree"]

_UNITS = ("B", "KB", "MB", "GB", "TB")


def _readable(size: float) -> str:
    for unit in _UNITS[:-1]:
        if size < 1024.0:
            return f"{size:.2f} {unit}"
        size /= 1024.0
    return f"{size:.2f} {_UNITS[-1]}"


def _total_size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total


def _tree(path: str, indent: str, lines: list[str]) -> None:
    if not os.path.isdir(path):
        lines.append(indent + os.path.basename(path))
        return
    lines.append(indent + os.path.basename(os.path.normpath(path)) + "/")
    for name in sorted(os.listdir(path)):
        _tree(os.path.join(path, name), indent + "    ", lines)


def print_directory_tree(
    path: str | os.PathLike[str], indent: str = "", display_metadata: bool = True
) -> str:
    """Log the tree of files under `path` (a saved TensorDict, say) and return it as text.

    Each line goes to the `td_core` logger at level INFO, as upstream's
    `tensordict.utils.print_directory_tree` does.

    Args:
        path: the folder (or file) to describe.
        indent: prefix of the first line; each level adds four spaces.
        display_metadata: start with a line giving the total size of the files.

    Returns:
        The lines, joined with newlines.

    Raises:
        FileNotFoundError: `path` does not exist.

    Examples:
        >>> import pathlib, tempfile
        >>> from td_core import print_directory_tree
        >>> root = pathlib.Path(tempfile.mkdtemp()) / "saved"
        >>> (root / "sub").mkdir(parents=True)
        >>> _ = (root / "sub" / "x.bin").write_bytes(b"1234")
        >>> print(print_directory_tree(root))
        Directory size: 4.00 B
        saved/
            sub/
                x.bin
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"print_directory_tree: {path!r} does not exist")
    lines: list[str] = []
    if display_metadata:
        lines.append(f"Directory size: {_readable(_total_size(path))}")
    _tree(path, indent, lines)
    for line in lines:
        logger.info(line)
    return "\n".join(lines)
