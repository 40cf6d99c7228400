import os
import subprocess
import sys
import textwrap

import pytest
import torch

from td_query import DEFAULT_KEY, SipHash

# SipHash-2-4 test vectors from the SipHash paper (Aumasson & Bernstein, appendix
# and reference implementation): key 00..0f, message i = bytes 00..(i-1), digest
# as its 8 little-endian bytes.
PAPER_VECTORS = """
310e0edd47db6f72 fd67dc93c539f874 5a4fa9d909806c0d 2d7efbd796666785
b7877127e09427cf 8da699cd64557618 cee3fe586e46c9cb 37d1018bf50002ab
6224939a79f5f593 b0e4a90bdf82009e f3b9dd94c5bb5d7a a7ad6b22462fb3f4
fbe50e86bc8f1e75 903d84c02756ea14 eef27a8e90ca23f7 e545be4961ca29a1
db9bc2577fcc2a3f 9447be2cf5e99a69 9cd38d96f0b3c14b bd6179a71dc96dbb
98eea21af25cd6be c7673b2eb0cbf2d0 883ea3e395675393 c8ce5ccd8c030ca8
94af49f6c650adb8 eab8858ade92e1bc f315bb5bb835d817 adcf6b0763612e2f
a5c91da7acaa4dde 716595876650a2a6 28ef495c53a387ad 42c341d8fa92d832
ce7cf2722f512771 e37859f94623f3a7 381205bb1ab0e012 ae97a10fd434e015
b4a31508beff4d31 81396229f0907902 4d0cf49ee5d4dcca 5c73336a76d8bf9a
d0a704536ba93e0e 925958fcd6420cad a915c29bc8067318 952b79f3bc0aa6d4
f21df2e41d4535f9 87577519048f53a9 10a56cf5dfcd9adb eb75095ccd986cd0
51a9cb9ecba312e6 96afadfc2ce666c7 72fe52975a4364ee 5a1645b276d592a1
b274cb8ebf87870a 6f9bb4203de7b381 eaecb2a30b22a87f 9924a43cc1315724
bd838d3aafbf8db7 0b1a2a3265d51aea 135079a3231ce660 932b2846e4d70666
e1915f5cb1eca46c f325965ca16d629f 575ff28e60381be5 724506eb4c328a95
""".split()

# SipHash-1-3 vectors, same key and messages: Rust's libcore test_siphash_1_3
# (library/coretests/tests/hash/sip.rs), the variant SipHash() uses by default.
VECTORS_1_3 = """
dcc40f055801acab 93ca577df39bf4c9 4dd4c74d029bcb82 fbf7dde7b80af88b
2883d388605775cf 673b53492fd5f9de a7229fc5502b0dc5 4011b19b987d92d3
8e9a298d11959036 e43d066cb38ea425 7f09ff92ee85de79 52c34df9c118c170
a2d9b457b184a378 a7ff29120c766f30 345df9c011a15a60 5699512a6dd820d3
668b907d1add4fcc 0cd8db639068f29c 3ee673b49c38fc8f 1c7d298de59d1ff2
40e0cca6462fdcc0 44f8452bfeab92b9 2e8720a39b7bfe7f 23c1e6da7f0e5a52
8c9c3467b2ae64f4 79095b702859cd45 a51399cae3353e3a 353bde4a4ec71da9
0dd06cef02ed0bfb f4e1b14ab43cd988 63e6c543d6110f54 bcd1218c1fdd7023
0db6a7166c7b1581 bff98f7ae5b9544d 3e752a1f78129f75 916b18bfbea3a1ce
0662a2add308f52c 5730c3a32d1c10b6 a1363aae9674f4b3 9283107b54576b62
3115e4993236d2c1 44d91a3f92c17c66 258813c8fe4f7065 a64989c2d180f224
6b87f8faed1ccac2 9621049ffc4b16c2 23d6b168939c6ea1 fd14518b9c16fb49
464c07dff843319f b386cc1224affdc6 8f09520ad149af7e 9a2f299d5513f31c
121ff4a2dd304ac4 d01ea74389e9fa36 e6bcf0734cb38f31 80e9a77036bf7aa2
756d3c24dbc0bcb4 1315b7fd52d8f823 088a7da64d5f038f 48f1e8b7e5d09cd8
ee44a6f7bce6f4f6 f237180fd89ac5ae e094664b15f6b2c3 a8b3bbb76290199d
""".split()

MASK = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & MASK


def ref_siphash(msg: bytes, key: bytes = DEFAULT_KEY, c: int = 1, d: int = 3) -> int:
    """Slow, plain-Python SipHash-c-d (unsigned 64-bit result)."""
    k0 = int.from_bytes(key[:8], "little")
    k1 = int.from_bytes(key[8:], "little")
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D]
    v += [k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def sipround():
        v[0] = (v[0] + v[1]) & MASK
        v[1] = _rotl(v[1], 13) ^ v[0]
        v[0] = _rotl(v[0], 32)
        v[2] = (v[2] + v[3]) & MASK
        v[3] = _rotl(v[3], 16) ^ v[2]
        v[0] = (v[0] + v[3]) & MASK
        v[3] = _rotl(v[3], 21) ^ v[0]
        v[2] = (v[2] + v[1]) & MASK
        v[1] = _rotl(v[1], 17) ^ v[2]
        v[2] = _rotl(v[2], 32)

    full = len(msg) // 8
    blocks = [int.from_bytes(msg[8 * i : 8 * i + 8], "little") for i in range(full)]
    blocks.append(int.from_bytes(msg[8 * full :], "little") | ((len(msg) & 0xFF) << 56))
    for m in blocks:
        v[3] ^= m
        for _ in range(c):
            sipround()
        v[0] ^= m
    v[2] ^= 0xFF
    for _ in range(d):
        sipround()
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def ref_row_hash(msg: bytes, key: bytes = DEFAULT_KEY, c: int = 1, d: int = 3) -> int:
    """The documented rule: SipHash up to 1024 bytes, a tree of 256-byte chunks above."""
    if len(msg) <= 1024:
        return ref_siphash(msg, key, c, d)
    chunks = [msg[i : i + 256].ljust(256, b"\0") for i in range(0, len(msg), 256)]
    digests = [ref_siphash(ch, key, c, d).to_bytes(8, "little") for ch in chunks]
    return ref_row_hash(b"".join(digests) + len(msg).to_bytes(8, "little"), key, c, d)


def unsigned(t: torch.Tensor) -> list[int]:
    return [v & MASK for v in t.tolist()]


@pytest.mark.parametrize(
    ("rounds", "vectors"), [((2, 4), PAPER_VECTORS), ((1, 3), VECTORS_1_3)], ids=["2-4", "1-3"]
)
def test_known_vectors_all_lengths(rounds, vectors):
    assert len(vectors) == 64
    for length, digest in enumerate(vectors):
        expected = int.from_bytes(bytes.fromhex(digest), "little")
        row = torch.arange(length, dtype=torch.uint8)
        # the same message three times: every row must give the published value
        got = SipHash(rounds=rounds)(row.expand(3, length))
        assert unsigned(got) == [expected] * 3, f"length {length}"
        # the slow reference used below is itself checked against the vectors
        assert ref_siphash(bytes(range(length)), DEFAULT_KEY, *rounds) == expected


def test_default_is_siphash_1_3():
    x = torch.arange(11, dtype=torch.uint8)[None]
    assert torch.equal(SipHash()(x), SipHash(rounds=(1, 3))(x))
    assert not torch.equal(SipHash()(x), SipHash(rounds=(2, 4))(x))


@pytest.mark.parametrize(
    "dtype", [torch.uint8, torch.int16, torch.float32, torch.float64, torch.int64, torch.bfloat16]
)
@pytest.mark.parametrize("features", [0, 1, 3, 7, 8, 9, 16, 33])
def test_random_rows_match_reference(dtype, features):
    gen = torch.Generator().manual_seed(features)
    x = (torch.randn(6, features, generator=gen) * 100).to(dtype)
    for rounds in ((1, 3), (2, 4), (3, 5)):
        got = unsigned(SipHash(rounds=rounds)(x))
        expected = [
            ref_siphash(x[i].view(torch.uint8).numpy().tobytes(), DEFAULT_KEY, *rounds)
            for i in range(6)
        ]
        assert got == expected


@pytest.mark.parametrize("length", [13, 256])
def test_many_rows_match_reference_across_blocks(length):
    # numpy hashes rows in blocks of thousands: rows at block edges, and equal
    # rows in different blocks, must come out as the reference says
    gen = torch.Generator().manual_seed(length)
    x = torch.randint(0, 256, (40_000, length), dtype=torch.uint8, generator=gen)
    x[39_999] = x[0]
    got = SipHash(compiled=False)(x)
    for i in (0, 4095, 4096, 16383, 16384, 32768, 39_998):
        assert unsigned(got[i : i + 1]) == [ref_siphash(x[i].numpy().tobytes())], i
    assert got[39_999] == got[0]
    assert got.unique().numel() == 39_999


def test_bool_and_complex_rows_match_reference():
    b = torch.tensor([[True, False, True], [False, False, True]])
    assert unsigned(SipHash()(b)) == [ref_siphash(bytes([1, 0, 1])), ref_siphash(bytes([0, 0, 1]))]
    c = torch.randn(3, 2, dtype=torch.complex64)
    expected = [ref_siphash(c[i].numpy().tobytes()) for i in range(3)]
    assert unsigned(SipHash()(c)) == expected


def test_custom_key():
    key = bytes(range(100, 116))
    x = torch.arange(20, dtype=torch.uint8).reshape(2, 10)
    got = unsigned(SipHash(key=key)(x))
    assert got == [ref_siphash(bytes(range(10)), key), ref_siphash(bytes(range(10, 20)), key)]
    assert got != unsigned(SipHash()(x))


@pytest.mark.parametrize("nbytes", [1025, 1032, 4096, 5000, 70_000])
def test_long_rows_follow_documented_tree_rule(nbytes):
    gen = torch.Generator().manual_seed(nbytes)
    x = torch.randint(0, 256, (3, nbytes), dtype=torch.uint8, generator=gen)
    got = unsigned(SipHash()(x))
    assert got == [ref_row_hash(x[i].numpy().tobytes()) for i in range(3)]
    got = unsigned(SipHash(rounds=(2, 4))(x[:1]))
    assert got == [ref_row_hash(x[0].numpy().tobytes(), DEFAULT_KEY, 2, 4)]
    # a one-byte change anywhere changes the hash
    y = x.clone()
    y[1, nbytes // 2] ^= 1
    h = SipHash()(y)
    assert h[0] == SipHash()(x)[0] and h[1] != SipHash()(x)[1]


def test_long_rows_padding_does_not_collide():
    x = torch.ones(1, 1100, dtype=torch.uint8)
    padded = torch.cat([x, torch.zeros(1, 180, dtype=torch.uint8)], dim=1)  # same chunks
    assert SipHash()(x) != SipHash()(padded)


def test_identical_across_processes():
    x = torch.linspace(-3, 3, 60).reshape(10, 6)
    here = SipHash()(x).tolist()
    code = textwrap.dedent(
        """
        import torch
        from td_query import SipHash
        x = torch.linspace(-3, 3, 60).reshape(10, 6)
        print(SipHash()(x).tolist())
        """
    )
    # another process, whose hash() is seeded differently from this one's
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert eval(out.stdout) == here


def test_pinned_value():
    # a fixed value, so any change of the hash definition is noticed
    x = torch.tensor([[1.0, 2.0]])
    expected = ref_siphash(x.numpy().tobytes())
    assert unsigned(SipHash()(x)) == [expected]
    assert SipHash()(x).item() == SipHash()(x.clone()).item()


def test_equal_rows_equal_hashes_distinct_rows_distinct():
    x = torch.randn(1000, 5)
    x[500:] = x[:500]
    h = SipHash()(x)
    assert torch.equal(h[:500], h[500:])
    assert h[:500].unique().numel() == 500


def test_what_is_hashed_is_bytes_only():
    one_f = torch.tensor([[1.0]], dtype=torch.float32)
    same_bits = torch.tensor([[1065353216]], dtype=torch.int32)
    assert SipHash()(one_f) == SipHash()(same_bits)
    assert SipHash()(torch.tensor([[0.0]])) != SipHash()(torch.tensor([[-0.0]]))
    assert SipHash()(one_f) != SipHash()(one_f.double())
    x = torch.randn(4, 2, 3)
    assert torch.equal(SipHash()(x), SipHash()(x.reshape(4, 6)))


def test_shapes_and_layouts():
    x = torch.randn(4, 5, 3)
    h2 = SipHash(batch_dims=2)(x)
    assert h2.shape == (4, 5)
    assert torch.equal(h2.reshape(-1), SipHash()(x.reshape(20, 3)))
    assert SipHash(batch_dims=0)(x).shape == ()
    assert SipHash(batch_dims=0)(x) == SipHash()(x.reshape(1, -1))[0]
    # 1-D input: each element is a row
    v = torch.arange(5)
    assert torch.equal(SipHash()(v), SipHash()(v[:, None]))
    # non-contiguous, negative-stride-free views hash like their contiguous copy
    t = torch.randn(6, 4).t()
    assert torch.equal(SipHash()(t), SipHash()(t.contiguous()))
    assert torch.equal(SipHash()(x[:, ::2]), SipHash()(x[:, ::2].contiguous()))
    # conjugate views hash their values, not the lazy bits
    c = torch.randn(3, 2, dtype=torch.complex64)
    assert torch.equal(SipHash()(c.conj()), SipHash()(c.conj().resolve_conj()))
    # rows starting at a storage offset that is not a multiple of 8 bytes
    flat = torch.randn(81)
    shifted = flat[1:].reshape(10, 8)
    assert torch.equal(SipHash()(shifted), SipHash()(shifted.clone()))
    # one row whose stride is not its length
    wide = torch.randn(1, 5)
    assert torch.equal(SipHash()(wide[:, :2]), SipHash()(wide[:, :2].clone()))
    # no rows
    assert SipHash()(torch.empty(0, 4)).shape == (0,)
    # grad-tracking inputs are fine
    g = torch.randn(3, 2, requires_grad=True)
    assert SipHash()(g).dtype == torch.int64


def test_as_tensor_false_returns_row_bytes():
    x = torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    rows = SipHash(as_tensor=False)(x)
    assert rows == [x[0].numpy().tobytes(), x[1].numpy().tobytes()]
    assert all(isinstance(r, bytes) for r in rows)


@pytest.mark.parametrize("features", [3, 400])
def test_vectorised_over_rows(features, lines_run):
    # the Python work does not grow with the number of rows (on CPU, numpy takes
    # rows in blocks of thousands: a constant factor at most)
    counts = []
    for rows in (2, 200, 60_000 if features < 100 else 600):
        x = torch.randn(rows, features)
        counts.append(lines_run(lambda x=x: SipHash(compiled=False)(x))[1])
    assert counts[0] == counts[1]
    assert counts[2] <= 5 * counts[0]


# ------------------------------------------------------------- the torch paths
# On CPU, SipHash uses numpy unless a batch is large (or ``compiled=True``): then
# torch.compile fuses the torch implementation (the one other devices run
# eagerly) into one loop. Both must give the published values.


@pytest.mark.parametrize(
    ("rounds", "vectors"), [((2, 4), PAPER_VECTORS), ((1, 3), VECTORS_1_3)], ids=["2-4", "1-3"]
)
def test_torch_ops_eagerly_match_known_vectors(rounds, vectors):
    # force_eager runs the function handed to torch.compile as plain torch ops:
    # what a GPU runs, checked here on CPU without compiling
    with torch.compiler.set_stance("force_eager"):
        for length, digest in enumerate(vectors):
            expected = int.from_bytes(bytes.fromhex(digest), "little")
            row = torch.arange(length, dtype=torch.uint8).expand(3, length)
            got = SipHash(rounds=rounds, compiled=True)(row)
            assert unsigned(got) == [expected] * 3, f"length {length}"


def test_inside_a_callers_torch_compile():
    # traced by dynamo (backend="eager": no C++ build), SipHash runs its torch ops
    # (what other devices run) and gives the published values
    @torch.compile(backend="eager", fullgraph=True)
    def hash_1_3(x):
        return SipHash()(x)

    for length in (0, 7, 8, 15, 63):
        expected = int.from_bytes(bytes.fromhex(VECTORS_1_3[length]), "little")
        row = torch.arange(length, dtype=torch.uint8).expand(3, length)
        assert unsigned(hash_1_3(row)) == [expected] * 3, f"length {length}"
    long_rows = torch.randint(0, 256, (2, 1100), dtype=torch.uint8)
    assert torch.equal(hash_1_3(long_rows), SipHash()(long_rows))


def test_compiled_kernel_matches_known_vectors_and_numpy():
    # Compiling takes seconds, once per row length: a few lengths cover no full
    # word, full words with and without trailing bytes, and several words. Each
    # length has a kernel of its own, which torch.compile must not count as a
    # recompilation of another (past its limit, it would stop compiling): with
    # the limit at one graph per function, every length must still compile.
    with torch._dynamo.config.patch(recompile_limit=1):
        for rounds, vectors, lengths in (
            ((1, 3), VECTORS_1_3, (0, 15, 16, 63)),
            ((2, 4), PAPER_VECTORS, (15,)),
        ):
            for length in lengths:
                expected = int.from_bytes(bytes.fromhex(vectors[length]), "little")
                row = torch.arange(length, dtype=torch.uint8).expand(3, length)
                got = SipHash(rounds=rounds, compiled=True)(row)
                assert unsigned(got) == [expected] * 3, f"{rounds} length {length}"
        # a large batch goes through the compiled kernel by default, with the same bits
        x = torch.randn(20_000, 4)
        assert torch.equal(SipHash()(x), SipHash(compiled=False)(x))
        assert torch.equal(SipHash(compiled=True)(x[:5]), SipHash(compiled=False)(x[:5]))


def test_when_compiling_fails_large_batches_fall_back_to_numpy():
    # A torch.compile whose kernels fail when first run, as they do without a
    # working C++ compiler: the default falls back to numpy (same hashes, one
    # warning, no second attempt); compiled=True raises the error.
    code = textwrap.dedent(
        """
        import torch

        def failing_compile(fn, **options):
            def kernel(*args, **kwargs):
                raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found")
            return kernel

        torch.compile = failing_compile
        from td_query import SipHash

        x = torch.randn(10_000, 4, generator=torch.Generator().manual_seed(0))
        eager = SipHash(compile_after=0.0)  # try the kernel for the first large batch
        assert torch.equal(eager(x), SipHash(compiled=False)(x))
        assert torch.equal(eager(x[:9000]), SipHash(compiled=False)(x[:9000]))
        try:
            SipHash(compiled=True)(x)
        except RuntimeError as error:
            print("raised", error)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "raised InvalidCxxCompiler" in out.stdout
    assert out.stderr.count("could not build the SipHash kernel (RuntimeError") == 1, out.stderr


def test_errors():
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        SipHash()([1, 2, 3])
    with pytest.raises(ValueError, match=r"at least 2 dims, got shape \[3\]"):
        SipHash(batch_dims=2)(torch.zeros(3))
    with pytest.raises(ValueError, match="16 bytes long, got 3"):
        SipHash(key=b"abc")
    with pytest.raises(TypeError, match="16 bytes"):
        SipHash(key="0123456789abcdef")
    with pytest.raises(ValueError, match="batch_dims"):
        SipHash(batch_dims=-1)
    with pytest.raises(
        ValueError, match=r"rounds must be two positive ints \(c, d\), got \(0, 3\)"
    ):
        SipHash(rounds=(0, 3))
    with pytest.raises(ValueError, match="rounds"):
        SipHash(rounds=(2,))
    with pytest.raises(ValueError, match="compiled must be None, True or False, got 'yes'"):
        SipHash(compiled="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    x = torch.randn(100, 7)
    cpu = SipHash()(x)
    gpu = SipHash()(x.cuda())
    assert gpu.device.type == "cuda"
    assert torch.equal(gpu.cpu(), cpu)
    big = torch.randint(0, 256, (5, 3000), dtype=torch.uint8)
    assert torch.equal(SipHash()(big.cuda()).cpu(), SipHash()(big))


def test_default_policy_builds_the_kernel_only_after_time_in_numpy(monkeypatch):
    calls = []
    import td_query._siphash as impl

    def fake_kernel(*args, **kwargs):
        calls.append(1)
        return None  # "could not build": numpy is used

    monkeypatch.setattr(impl, "compiled_kernel", fake_kernel)
    x = torch.randn(9000, 3)  # a row length no other test hashes
    SipHash()(x)
    assert calls == []  # a short job never waits for a build
    SipHash(compile_after=0.0)(x)
    assert calls == [1]
    with pytest.raises(ValueError, match="compile_after"):
        SipHash(compile_after=-1)
