"""SipHash-c-d of many messages at once: the arithmetic behind `SipHash`.

A batch of `n` messages of the same length is given as `words` (`[n, full]`
int64: the full 8-byte words of each message, read little-endian) and `last`
(the final block of each message: its trailing bytes and its length). The same
arithmetic runs three ways, all with identical results:

- **numpy**, on CPU: uint64 ops in place (native wraparound and logical shifts),
  over blocks of rows that stay in cache. No compilation, a few hundred ufunc
  calls per block.
- **torch**, on other devices (and inside a caller's `torch.compile`): int64
  ops over all rows, one kernel per op.
- **compiled**, on CPU for large batches: the torch function above, fused by
  `torch.compile` (inductor) into one C++ loop over rows that keeps the state
  in registers. Built lazily, once per message length and round count, and
  cached by torch on disk; if it cannot be built, numpy is used instead.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable

import numpy as np
import torch

__all__ = [
    "compiled_kernel",
    "init_state",
    "siphash_numpy",
    "siphash_torch",
    "to_int64",
]

_log = logging.getLogger("td_query")

# "somepseudorandomlygeneratedbytes", the SipHash initialisation constants
INIT = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)

#: On CPU, numpy hashes at most this many rows at a time, fewer for long rows, so
#: that the block's state and words stay in L2 cache (each ufunc call still does
#: enough work to hide its overhead).
NUMPY_BLOCK = 16384


def to_int64(value: int) -> int:
    """The int64 with the same 64 bits as the unsigned `value`."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def init_state(key: tuple[int, int]) -> tuple[int, int, int, int]:
    """The SipHash state before the first word, as unsigned ints."""
    k0, k1 = key
    return (k0 ^ INIT[0], k1 ^ INIT[1], k0 ^ INIT[2], k1 ^ INIT[3])


# ----------------------------------------------------------------------- numpy
_U64 = np.uint64
_SHIFTS = {bits: (_U64(bits), _U64(64 - bits)) for bits in (13, 16, 17, 21, 32)}


def _rotl_np(x: np.ndarray, bits: int, tmp: np.ndarray) -> None:
    """Rotate the uint64 words of `x` left by `bits`, in place (`tmp` is scratch)."""
    left, right = _SHIFTS[bits]
    np.right_shift(x, right, out=tmp)
    np.left_shift(x, left, out=x)
    np.bitwise_or(x, tmp, out=x)


def _sipround_np(v: list[np.ndarray], tmp: np.ndarray) -> None:
    v0, v1, v2, v3 = v
    np.add(v0, v1, out=v0)
    _rotl_np(v1, 13, tmp)
    np.bitwise_xor(v1, v0, out=v1)
    _rotl_np(v0, 32, tmp)
    np.add(v2, v3, out=v2)
    _rotl_np(v3, 16, tmp)
    np.bitwise_xor(v3, v2, out=v3)
    np.add(v0, v3, out=v0)
    _rotl_np(v3, 21, tmp)
    np.bitwise_xor(v3, v0, out=v3)
    np.add(v2, v1, out=v2)
    _rotl_np(v1, 17, tmp)
    np.bitwise_xor(v1, v2, out=v1)
    _rotl_np(v2, 32, tmp)


def siphash_numpy(
    words: np.ndarray | None,
    last: np.ndarray | int,
    n: int,
    key: tuple[int, int],
    rounds: tuple[int, int],
) -> np.ndarray:
    """SipHash-c-d of `n` messages on CPU, as `[n]` uint64.

    Args:
        words: `[n, full]` uint64, the full words of each message, or `None`.
        last: `[n]` uint64, the final block of each message, or one unsigned int
            for all.
        n: the number of messages.
        key: `(k0, k1)`.
        rounds: `(c, d)`.
    """
    c_rounds, d_rounds = rounds
    full = 0 if words is None else words.shape[1]
    init = np.array(init_state(key), dtype=_U64)[:, None]
    out = np.empty(n, dtype=_U64)
    block = max(4096, min(NUMPY_BLOCK, (1 << 20) // (8 * (full + 1))))  # ~1 MiB of words
    width = min(n, block)
    state, scratch = np.empty((4, width), dtype=_U64), np.empty(width, dtype=_U64)
    for start in range(0, n, block):
        stop = min(start + block, n)
        v = list(state[:, : stop - start])
        np.copyto(state[:, : stop - start], init)
        tmp = scratch[: stop - start]
        for j in range(full + 1):
            if j < full:
                m = words[start:stop, j]  # type: ignore[index]
            else:
                m = last[start:stop] if isinstance(last, np.ndarray) else _U64(last)
            np.bitwise_xor(v[3], m, out=v[3])
            for _ in range(c_rounds):
                _sipround_np(v, tmp)
            np.bitwise_xor(v[0], m, out=v[0])
        np.bitwise_xor(v[2], _U64(0xFF), out=v[2])
        for _ in range(d_rounds):
            _sipround_np(v, tmp)
        hashes = out[start:stop]
        np.bitwise_xor(v[0], v[1], out=hashes)
        np.bitwise_xor(hashes, v[2], out=hashes)
        np.bitwise_xor(hashes, v[3], out=hashes)
    return out


# ----------------------------------------------------------------------- torch
def _rotl(x: torch.Tensor, bits: int) -> torch.Tensor:
    # `>>` on int64 is arithmetic: masking off the sign bits shifted in makes it
    # the logical shift that uint64 arithmetic needs
    return (x << bits) | ((x >> (64 - bits)) & ((1 << bits) - 1))


def _sipround(
    v0: torch.Tensor, v1: torch.Tensor, v2: torch.Tensor, v3: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    v0 = v0 + v1  # int64 addition wraps around, exactly like uint64 addition
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = v2 + v3
    v3 = _rotl(v3, 16) ^ v2
    v0 = v0 + v3
    v3 = _rotl(v3, 21) ^ v0
    v2 = v2 + v1
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash_torch(
    words: torch.Tensor | None,
    last: torch.Tensor | int,
    init: torch.Tensor,
    c_rounds: int,
    d_rounds: int,
) -> torch.Tensor:
    """SipHash-c-d of each message, in int64 torch ops (the same bits as uint64).

    Args:
        words: `[n, full]` int64, the full words of each message, or `None`.
        last: `[n]` int64, the final blocks, or one int64 value for all (then
            `words` must be given).
        init: `[4]` int64, the initial state (`init_state`, as int64).
        c_rounds: rounds per word.
        d_rounds: finalisation rounds.
    """
    zero = torch.zeros_like(last if isinstance(last, torch.Tensor) else words[:, 0])  # type: ignore[index]
    v0, v1, v2, v3 = (zero + init[i] for i in range(4))
    full = 0 if words is None else words.shape[1]
    for j in range(full + 1):
        m = words[:, j] if j < full else last  # type: ignore[index]
        v3 = v3 ^ m
        for _ in range(c_rounds):
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0 = v0 ^ m
    v2 = v2 ^ 0xFF
    for _ in range(d_rounds):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


# -------------------------------------------------------------------- compiled
_kernels: dict[tuple[int, int, int], Callable[..., torch.Tensor]] = {}
_broken: list[BaseException] = []  # the error that made compilation unavailable, if any


def _new_kernel(full: int, c_rounds: int, d_rounds: int) -> Callable[..., torch.Tensor]:
    # torch.compile keeps its graphs per code object and stops compiling after a
    # few (`recompile_limit`); each message length unrolls into a graph of its
    # own, so each gets a code object of its own.
    # (a plain function: torch.compile would wrap a functools.partial in a shared one)
    code = siphash_torch.__code__.replace(co_name=f"siphash_{full}w_{c_rounds}_{d_rounds}")
    fn = types.FunctionType(code, siphash_torch.__globals__, code.co_name)
    # One thread: the kernel takes about a millisecond per 100k rows on one core,
    # and OpenMP threads stall for milliseconds when the other cores are busy.
    return torch.compile(fn, fullgraph=True, dynamic=False, options={"cpp.threads": 1})


def compiled_kernel(
    words: np.ndarray | None,
    last: np.ndarray | int,
    key: tuple[int, int],
    rounds: tuple[int, int],
    *,
    required: bool,
) -> torch.Tensor | None:
    """SipHash through the compiled kernel for this message length, on CPU.

    Takes what `siphash_numpy` takes and returns `[n]` int64. The kernel
    is built on first use: seconds, once per process and message length (torch
    caches the generated code on disk, so later processes build faster). Returns
    `None` if it cannot be built (no C++ compiler, unsupported Python), after
    which every call in this process returns `None` at once; with
    `required=True` the error is raised instead.
    """
    if _broken and not required:
        return None
    full = 0 if words is None else words.shape[1]
    cache_key = (full, *rounds)
    try:
        kernel = _kernels.get(cache_key)
        if kernel is None:
            kernel = _kernels[cache_key] = _new_kernel(full, *rounds)
        # plain tensors whatever the caller's mode (inference mode would make
        # torch.compile build a second graph)
        with torch.inference_mode(False), torch.no_grad():
            words_t = None if words is None else torch.from_numpy(words.view(np.int64))
            last_t = (
                torch.from_numpy(last.view(np.int64))
                if isinstance(last, np.ndarray)
                else to_int64(last)
            )
            init = torch.tensor([to_int64(v) for v in init_state(key)])
            for tensor in (words_t, last_t):  # one graph for any number of messages
                if isinstance(tensor, torch.Tensor):
                    torch._dynamo.maybe_mark_dynamic(tensor, 0)
            return kernel(words_t, last_t, init, *rounds)
    except Exception as error:
        if required:
            raise
        _broken.append(error)
        _log.warning(
            "td_query: torch.compile could not build the SipHash kernel (%s: %s); "
            "hashing with numpy instead",
            type(error).__name__,
            (str(error).strip().splitlines() or [""])[0][:300],
        )
        return None
