"""SipHash of each row of a tensor, vectorised over rows (numpy, torch or compiled)."""

from __future__ import annotations

import math
import sys
import time
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from td_query._sipkernels import (
    compiled_kernel,
    init_state,
    siphash_numpy,
    siphash_torch,
    to_int64,
)

__all__ = ["DEFAULT_KEY", "SipHash"]

#: The fixed key used when none is given: bytes `0x00 .. 0x0f`, the key of the
#: SipHash paper's test vectors. SipHash serves here as a fast, well-mixed,
#: reproducible hash, not as a MAC, so the key is not a secret.
DEFAULT_KEY: bytes = bytes(range(16))

#: Rows longer than this many bytes are hashed as a tree of `CHUNK`-byte chunks.
TREE_THRESHOLD = 1024
CHUNK = 256
#: On CPU, with `compiled=None`, batches of at least this many messages of at most
#: `COMPILE_MAX_WORDS` full words go through the compiled kernel.
COMPILE_MIN_ROWS = 8192
COMPILE_MAX_WORDS = 32


def _words(key: bytes | bytearray) -> tuple[int, int]:
    return int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")


_DEFAULT_WORDS = _words(DEFAULT_KEY)


def _check_key(key: bytes) -> tuple[int, int]:
    if (
        key is DEFAULT_KEY
    ):  # no bytes work inside a caller's torch.compile (older dynamo refuses it)
        return _DEFAULT_WORDS
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"SipHash key must be 16 bytes, got {type(key).__name__} {key!r}")
    if len(key) != 16:
        raise ValueError(f"SipHash key must be 16 bytes long, got {len(key)} bytes: {key!r}")
    return _words(key)


def _blocks_host(rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | int]:
    """The SipHash blocks of each row of a `[n, length]` uint8 array.

    Returns `words`, the full 8-byte words (`[n, length // 8]` uint64, or
    `None`), and `last`, the last block (`[n]` uint64, or one unsigned int
    shared by all rows). Viewing bytes as uint64 reads them little-endian, as
    SipHash specifies, on little-endian hosts (every platform PyTorch ships for).
    Copies are numpy's, on one thread (torch's OpenMP copies stall when other
    processes hold the cores).
    """
    n, length = rows.shape
    full = length // 8  # (not divmod: torch.compile cannot trace it)
    tail = length - 8 * full
    words = None
    if full:  # read in place where the layout allows
        words = rows[:, : 8 * full]
        if not words.flags.c_contiguous:
            words = words.copy()
        words = words.view(np.uint64)
        if not words.flags.aligned:
            words = words.copy()
    # the trailing `length % 8` bytes, zero padded, with the length (mod 256) as
    # the most significant byte; without trailing bytes, one constant for all rows
    last: np.ndarray | int = (length & 0xFF) << 56
    if tail:
        buffer = np.zeros((n, 8), dtype=np.uint8)
        buffer[:, :tail] = rows[:, 8 * full :]
        buffer[:, 7] = length & 0xFF
        last = buffer.view(np.uint64).reshape(n)
    elif words is None:  # empty rows: nothing but `last` tells the row count
        last = np.zeros(n, dtype=np.uint64)
    return words, last


def _blocks_torch(rows: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | int]:
    """`_blocks_host` in torch ops on the rows' device, as int64 (same bits)."""
    n, length = rows.shape
    full = length // 8  # (not divmod: torch.compile cannot trace it)
    tail = length - 8 * full
    words = None
    if full:
        body = rows[:, : 8 * full]
        # (traced by a caller's torch.compile, the offset is unknown: copy)
        aligned = not torch.compiler.is_compiling() and body.storage_offset() % 8 == 0
        if body.stride() != (8 * full, 1) or not aligned:
            body = body.clone(memory_format=torch.contiguous_format)
        words = body.view(torch.int64)
    last: torch.Tensor | int = to_int64((length & 0xFF) << 56)
    if tail:
        buffer = torch.zeros((n, 8), dtype=torch.uint8, device=rows.device)
        buffer[:, :tail] = rows[:, 8 * full :]
        buffer[:, 7] = length & 0xFF
        last = buffer.view(torch.int64).reshape(n)
    elif words is None:
        last = torch.zeros(n, dtype=torch.int64, device=rows.device)
    return words, last


#: With `compiled=None`, a row length is compiled once this many seconds were spent
#: hashing its large batches with numpy: the build takes seconds, so it pays only in
#: long-running work (JIT-style tiering; a one-off script never waits for it).
COMPILE_AFTER_SECONDS = 2.0
_NUMPY_SECONDS: dict[tuple[int, int, int], float] = {}


class RowHash(NamedTuple):
    """How `SipHash` hashes rows: what `hash_rows` and `siphash_rows` pass down unchanged.

    `key`: the SipHash key as two little-endian 64-bit words; `rounds`: `(c, d)`;
    `compiled` and `compile_after`: as the `SipHash` arguments of the same names.
    """

    key: tuple[int, int]
    rounds: tuple[int, int]
    compiled: bool | None
    compile_after: float = COMPILE_AFTER_SECONDS


def siphash_rows(rows: torch.Tensor, how: RowHash) -> torch.Tensor:
    """SipHash-c-d of each row of a `[n, length]` uint8 tensor, as `[n]` int64.

    The loop runs over the 8-byte words of a row (`length // 8 + 1` steps), never
    over rows. Where it runs: on CPU, through the compiled kernel if `how.compiled`
    asks for it (`None`: for large batches, when one can be built), else with
    numpy; on other devices (or while a caller's `torch.compile` traces this),
    with torch ops on the rows' device. All three give the same bits.
    """
    key, rounds, compiled = how.key, how.rounds, how.compiled
    n, length = rows.shape
    if rows.device.type != "cpu" or torch.compiler.is_compiling():
        words_t, last_t = _blocks_torch(rows)
        init = [to_int64(v) for v in init_state(key)]
        return siphash_torch(words_t, last_t, torch.tensor(init, device=rows.device), *rounds)
    words, last = _blocks_host(rows.numpy())
    large = n >= COMPILE_MIN_ROWS and length // 8 <= COMPILE_MAX_WORDS
    shape = (length, *rounds)
    spent = _NUMPY_SECONDS.get(shape, 0.0)
    if compiled or (compiled is None and large and spent >= how.compile_after):
        hashes = compiled_kernel(words, last, key, rounds, required=bool(compiled))
        if hashes is not None:
            return hashes
    start = time.perf_counter()
    out = torch.from_numpy(siphash_numpy(words, last, n, key, rounds).view(np.int64))
    if large and compiled is None:
        _NUMPY_SECONDS[shape] = _NUMPY_SECONDS.get(shape, 0.0) + time.perf_counter() - start
    return out


def hash_rows(rows: torch.Tensor, how: RowHash) -> torch.Tensor:
    """The hash of each row of a `[n, length]` uint8 tensor, as `[n]` int64.

    Rows of up to `TREE_THRESHOLD` bytes get SipHash-c-d of their bytes. Longer
    rows are cut into `CHUNK`-byte chunks (the last one zero padded), every chunk
    of every row is hashed at once, and the row's hash is `hash_rows` of its chunk
    hashes followed by its byte length (one int64 word each). This bounds the Python
    loop to a few dozen steps per level instead of one per 8 bytes of a row.
    """
    n, length = rows.shape
    if length <= TREE_THRESHOLD:
        return siphash_rows(rows, how)
    chunks = -(-length // CHUNK)
    if chunks * CHUNK != length:
        padded = torch.zeros((n, chunks * CHUNK), dtype=torch.uint8, device=rows.device)
        padded[:, :length] = rows
        rows = padded
    digests = siphash_rows(rows.reshape(n * chunks, CHUNK), how)
    digests = digests.reshape(n, chunks)
    size = torch.full((n, 1), length, dtype=torch.int64, device=rows.device)
    message = torch.cat([digests, size], dim=1).view(torch.uint8)
    return hash_rows(message, how)


def row_bytes(x: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """The bytes of each row of `x` (all dims after the first `batch_dims`), as `[n, L]` uint8."""
    n = math.prod(x.shape[:batch_dims])
    features = math.prod(x.shape[batch_dims:])
    x = x.detach().resolve_conj().resolve_neg().reshape(n, features).contiguous()
    return x.view(torch.uint8)


class SipHash(nn.Module):
    """A deterministic 64-bit hash of each row of a tensor: SipHash over the row's bytes.

    A row is everything after the first `batch_dims` dims (by default: one row per
    index of the first dim). Its bytes, in row-major order, are hashed with
    SipHash-c-d under a fixed `key`. The computation is vectorised over rows (a
    Python loop over the words of a row, never over rows), so the result is
    identical across processes, runs and machines: unlike `hash()`, it does not
    depend on `PYTHONHASHSEED`.

    **Which SipHash.** SipHash-1-3 by default (`rounds=(1, 3)`: one compression
    round per 8-byte word, three finalisation rounds), the variant behind CPython's
    `hash()` of bytes and Rust's `HashMap`; it costs about 40% less than
    SipHash-2-4 on short rows. `rounds=(2, 4)` gives SipHash-2-4, the paper's
    default, and reproduces its test vectors. Rows longer than 1 KiB are hashed as
    a two-level tree (each 256-byte chunk with SipHash, then the chunk hashes and
    the row's length with SipHash, recursively), which keeps the number of Python
    steps small; rows up to 1 KiB get plain SipHash of their bytes.

    **What is hashed.** Only the bytes and their number: neither the dtype nor the
    shape of a row enters the hash. Rows whose bytes are equal therefore hash equal
    even when their dtypes or shapes differ (`float32` `1.0` and `int32`
    `1065353216`; a row of shape `[2, 3]` and one of shape `[6]`), and rows
    equal as numbers but not as bytes hash differently (`0.0` and `-0.0`, NaNs
    with different payloads, `1.0` as `float32` and as `float64`). Cast to a
    common dtype first if values, not representations, should decide. `bfloat16`
    is hashed as its own bytes (torchrl converts it to `float16` first).

    **Collisions.** The output is 64 bits, the SipHash value's bits read as an
    int64. Distinct rows collide with probability about `2**-64` per pair, so
    about `n**2 / 2**65` among `n` distinct rows (`3e-8` for a million). A
    collision is silent: the two rows get the same hash (and, in a
    `QueryModule`, the same index). SipHash with a key an adversary does not
    know also resists crafted collisions, but `DEFAULT_KEY` is public: pass
    your own `key` if inputs may be adversarial.

    **Where it runs.** On CPU, large batches (at least 8192 rows of up to 256
    bytes, tree chunks included) go through a kernel that `torch.compile`
    generates: one C++ loop over rows, the SipHash state in registers. It is built
    on the first such call, once per row length and round count in a process, which
    takes seconds (torch caches the code on disk, so later processes are quicker);
    if it cannot be built (no C++ compiler, say), a warning is logged once and
    numpy is used instead. Other CPU batches are hashed with numpy uint64 ops, a
    few dozen passes per 8 bytes of a row over blocks of rows. On other devices
    (and inside a caller's `torch.compile`) it is torch ops on the tensor's
    device, one kernel per step over all rows. All paths give the same bits.

    Args:
        as_tensor: if `True` (default) return the hashes as an int64 tensor of
            shape `x.shape[:batch_dims]`; if `False` return what torchrl returns:
            a list with the bytes of each row (`bytes`), in row-major order of
            the batch dims.

    Keyword Args:
        key: the 16-byte SipHash key. Defaults to `DEFAULT_KEY`.
        batch_dims: how many leading dims index rows. Defaults to 1.
        rounds: `(c, d)`, the compression and finalisation rounds. Defaults to
            `(1, 3)`; `(2, 4)` is SipHash-2-4.
        compiled: on CPU, whether to use the compiled kernel: `None` (default)
            for large batches when it can be built, once a row length has spent
            `compile_after` seconds in numpy (the build takes seconds: only
            long-running work pays it), `True` for every batch
            (errors from `torch.compile` are raised), `False` never (numpy
            only: no compilation, no first-call delay).
        compile_after: with `compiled=None`, the seconds of numpy hashing of
            large batches of one row length after which its kernel is built
            (default 2; 0 builds it for the first large batch).

    Examples:
        >>> import torch
        >>> from td_query import SipHash
        >>> x = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.1, 0.2]])
        >>> h = SipHash()(x)
        >>> h.dtype, h.shape
        (torch.int64, torch.Size([3]))
        >>> bool(h[0] == h[2]), bool(h[0] == h[1])
        (True, False)
        >>> # the empty message: the first test vector of the SipHash paper
        >>> empty = torch.empty(1, 0, dtype=torch.uint8)
        >>> hex(SipHash(rounds=(2, 4))(empty).item() & (2**64 - 1))
        '0x726fdb47dd0e0e31'
    """

    def __init__(
        self,
        as_tensor: bool = True,
        *,
        key: bytes = DEFAULT_KEY,
        batch_dims: int = 1,
        rounds: tuple[int, int] = (1, 3),
        compiled: bool | None = None,
        compile_after: float = COMPILE_AFTER_SECONDS,
    ) -> None:
        super().__init__()
        if sys.byteorder != "little":  # pragma: no cover - no such PyTorch platform today
            raise RuntimeError("SipHash needs a little-endian host to give portable hashes")
        if not isinstance(batch_dims, int) or isinstance(batch_dims, bool) or batch_dims < 0:
            raise ValueError(f"batch_dims must be a non-negative int, got {batch_dims!r}")
        if (
            not isinstance(rounds, (tuple, list))
            or len(rounds) != 2
            or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in rounds)
        ):
            raise ValueError(f"rounds must be two positive ints (c, d), got {rounds!r}")
        if compiled not in (None, True, False):
            raise ValueError(f"compiled must be None, True or False, got {compiled!r}")
        self.as_tensor = bool(as_tensor)
        self.batch_dims = batch_dims
        self.rounds = (rounds[0], rounds[1])
        self.key = bytes(key) if isinstance(key, bytearray) else key
        self._k = _check_key(key)
        if not isinstance(compile_after, (int, float)) or compile_after < 0:
            raise ValueError(
                f"compile_after must be a non-negative number of seconds, got {compile_after!r}"
            )
        self.compiled = compiled
        self.compile_after = float(compile_after)

    def extra_repr(self) -> str:
        parts = []
        if not self.as_tensor:
            parts.append("as_tensor=False")
        if self.key != DEFAULT_KEY:
            parts.append("key=<custom>")
        if self.batch_dims != 1:
            parts.append(f"batch_dims={self.batch_dims}")
        if self.rounds != (1, 3):
            parts.append(f"rounds={self.rounds}")
        if self.compiled is not None:
            parts.append(f"compiled={self.compiled}")
        return ", ".join(parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[bytes]:
        """Hash each row of `x`.

        Args:
            x: a tensor with at least `batch_dims` dims, of any dtype and device.

        Returns:
            An int64 tensor of shape `x.shape[:batch_dims]` on `x.device` (or a
            list of bytes if `as_tensor=False`).

        Raises:
            TypeError: if `x` is not a tensor.
            ValueError: if `x` has fewer than `batch_dims` dims.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"SipHash expects a torch.Tensor, got {type(x).__name__}")
        if x.dim() < self.batch_dims:
            raise ValueError(
                f"SipHash(batch_dims={self.batch_dims}) needs a tensor with at least "
                f"{self.batch_dims} dims, got shape {list(x.shape)}"
            )
        rows = row_bytes(x, self.batch_dims)
        if not self.as_tensor:
            data = rows.cpu().numpy().tobytes()
            width = rows.shape[1]
            return [data[i * width : (i + 1) * width] for i in range(rows.shape[0])]
        hashes = hash_rows(rows, RowHash(self._k, self.rounds, self.compiled, self.compile_after))
        return hashes.reshape(x.shape[: self.batch_dims])
