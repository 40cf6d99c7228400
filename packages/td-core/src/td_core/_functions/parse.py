"""`parse_tensor_dict_string`: rebuild a TensorDict (zeros) from its printed form.

A debugging aid: keys, shapes, dtypes, devices and batch sizes come from the
text, values are zeros. Reads td's detailed repr (and tensorclasses') and
upstream's default compact repr (`TensorDict(batch_size=[3], fields={a: f32[4]})`).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from td_core._kinds.dense import TensorDict

__all__ = ["parse_tensor_dict_string"]

_SIZE = re.compile(r"torch\.Size\(\[([^\]]*)\]\)")
_TENSOR = re.compile(
    r"^\w*Tensor\((?:shape=torch\.Size\(\[(?P<shape>[^\]]*)\]\))?"
    r"(?:, )?(?:device=(?P<device>[\w:]+))?(?:, )?(?:dtype=torch\.(?P<dtype>\w+))?"
)
_COMPACT_HEADER = re.compile(
    r"^\s*\w+\(batch_size=\[(?P<bs>[^\]]*)\](?:, device=(?P<device>[\w:]+))?"
)
_COMPACT_LEAF = re.compile(r"^(?P<dtype>[a-z]\w*)?\[(?P<shape>[^\]]*)\]$")


def _short(dtype: torch.dtype) -> str:
    name = str(dtype).replace("torch.", "")
    for long, short in (("float", "f"), ("uint", "u"), ("int", "i"), ("complex", "c")):
        name = name.replace(long, short)
    return name


_DTYPES = {
    _short(d): d
    for d in vars(torch).values()
    if isinstance(d, torch.dtype) and not str(d).startswith("torch.q")
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _split(body: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def _block(text: str, open_at: int) -> tuple[str, int]:
    """The text inside the bracket opening at `open_at`, and the index after it closes."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i], i + 1
    raise ValueError(f"unbalanced brackets in {text[open_at : open_at + 60]!r}...")


def parse_tensor_dict_string(s: str) -> TensorDict:
    """Build a TensorDict of zeros with the keys, shapes, dtypes and batch sizes printed in `s`.

    Raises:
        ValueError: for a field that is neither a tensor nor a TensorDict, or
            text that is not a TensorDict repr.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, parse_tensor_dict_string
        >>> td = TensorDict(obs=torch.ones(3, 4), done=torch.ones(3, 1, dtype=torch.bool), batch_size=[3])
        >>> rebuilt = parse_tensor_dict_string(repr(td))
        >>> rebuilt["done"].dtype, rebuilt.batch_size, rebuilt["obs"].sum()
        (torch.bool, torch.Size([3]), tensor(0.))
    """
    text = s.strip()
    header = _COMPACT_HEADER.match(text)
    if header is not None:
        bs = _ints(header["bs"])
        start = text.index("fields=", header.end()) + len("fields=")
        body, _ = _block(text, start)
        return _compact(body, bs, header["device"])
    return _detailed(text)


def _detailed(text: str) -> TensorDict:
    try:
        start = text.index("(")
    except ValueError:
        raise ValueError(f"not the repr of a TensorDict: {text[:60]!r}") from None
    inner, _ = _block(text, start)
    parts = _split(inner)
    entries: dict[str, Any] = {}
    batch_size: list[int] = []
    device = None
    for part in parts:
        if part.startswith("fields={"):
            body, _ = _block(part, part.index("{"))
            for field in _split(body):
                key, value = re.split(r": |=", field, maxsplit=1)
                entries[key.strip()] = _detailed_value(key.strip(), value.strip())
        elif part.startswith("exclusive_fields={"):
            if _split(_block(part, part.index("{"))[0]):
                raise ValueError("cannot parse a lazy stack with exclusive keys")
        elif part.startswith("batch_size="):
            size = _SIZE.search(part)
            batch_size = _ints(size[1]) if size else []
        elif part.startswith("device="):
            name = part.split("=", 1)[1]
            device = None if name == "None" else name
        elif "=" in part and part.split("=", 1)[0].isidentifier() and "(" in part:
            key, value = part.split("=", 1)  # a tensorclass field
            entries[key] = _detailed_value(key, value.strip())
    return TensorDict(entries, batch_size=batch_size, device=device)


def _detailed_value(key: str, value: str) -> Any:
    if re.match(r"^\w*Tensor\(", value) and "fields=" not in value.split("(", 1)[1][:8]:
        m = _TENSOR.match(value)
        if m is None or m["shape"] is None:
            raise ValueError(f"Cannot parse the field {key!r}: {value[:80]!r}")
        dtype = getattr(torch, m["dtype"]) if m["dtype"] else torch.float32
        return torch.zeros(_ints(m["shape"]), dtype=dtype, device=m["device"] or "cpu")
    if "fields=" in value or re.match(r"^\w+\(\s*$", value.split("\n", 1)[0]):
        return _detailed(value)
    raise ValueError(
        f"Cannot parse the field {key!r}: parse_tensor_dict_string reads Tensor and TensorDict "
        f"fields, got {value[:60]!r}"
    )


def _compact(body: str, bs: list[int], device: str | None) -> TensorDict:
    entries: dict[str, Any] = {}
    for field in _split(body):
        key, token = (x.strip() for x in field.split(":", 1))
        nested = re.match(r"^(?:\[(?P<extra>[^\]]*)\])?\{", token)
        if nested is not None:
            inner, _ = _block(token, token.index("{"))
            entries[key] = _compact(inner, bs + _ints(nested["extra"] or ""), device)
            continue
        leaf = _COMPACT_LEAF.match(token)
        if leaf is None or (leaf["dtype"] and leaf["dtype"] not in _DTYPES):
            raise ValueError(
                f"Cannot parse the field '{key}: {token}': parse_tensor_dict_string reads Tensor "
                f"and TensorDict fields"
            )
        dtype = _DTYPES[leaf["dtype"]] if leaf["dtype"] else torch.float32
        entries[key] = torch.zeros(bs + _ints(leaf["shape"]), dtype=dtype, device=device)
    return TensorDict(entries, batch_size=bs, device=device)
