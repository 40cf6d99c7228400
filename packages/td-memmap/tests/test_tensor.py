import copy
import os
import pickle
import subprocess
import sys
import warnings

import pytest
import torch

from td_memmap import DTYPES, MemmapExistsError, MemoryMappedTensor, ReadOnlyMemmapError


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.reshape(-1).view(torch.uint8).tolist())


def _sample(dtype: torch.dtype) -> torch.Tensor:
    """Six elements of ``dtype`` with varied bytes, for any dtype (sub-byte and float8 included)."""
    raw = torch.tensor([1, 2, 3, 250, 128, 7] * dtype.itemsize, dtype=torch.uint8)
    return raw.view(dtype).reshape(2, 3)


class TestConstructors:
    def test_from_tensor_writes_file_and_maps_it(self, tmp_path):
        src = torch.arange(12.0).view(3, 4)
        t = MemoryMappedTensor.from_tensor(src, filename=tmp_path / "x.memmap")
        assert isinstance(t, MemoryMappedTensor)
        assert t.filename == str(tmp_path / "x.memmap")
        assert torch.equal(t, src)
        assert os.path.getsize(t.filename) == 12 * 4
        t[0, 0] = 100.0  # writable, shared: the file changes
        again = MemoryMappedTensor.from_filename(t.filename, torch.float32, (3, 4))
        assert again[0, 0].item() == 100.0

    def test_from_tensor_existsok(self, tmp_path):
        path = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.zeros(3), filename=path)
        with pytest.raises(MemmapExistsError, match="already exists"):
            MemoryMappedTensor.from_tensor(torch.ones(3), filename=path)
        with pytest.raises(FileExistsError):
            MemoryMappedTensor.from_tensor(torch.ones(3), filename=path)
        with pytest.raises(RuntimeError):  # what upstream raises
            MemoryMappedTensor.from_tensor(torch.ones(3), filename=path)
        t = MemoryMappedTensor.from_tensor(torch.ones(3), filename=path, existsok=True)
        assert torch.equal(t, torch.ones(3))

    def test_overwriting_a_mapped_file_keeps_the_old_mapping_valid(self, tmp_path):
        path = tmp_path / "x.memmap"
        old = MemoryMappedTensor.from_tensor(torch.zeros(1000), filename=path)
        new = MemoryMappedTensor.from_tensor(torch.ones(10), filename=path, existsok=True)
        assert old.sum().item() == 0  # the old inode is still mapped: no SIGBUS, no garbage
        assert new.sum().item() == 10

    def test_from_tensor_copy_data_false(self, tmp_path):
        t = MemoryMappedTensor.from_tensor(
            torch.ones(4, 2), filename=tmp_path / "x.memmap", copy_data=False
        )
        assert t.shape == (4, 2) and t.sum().item() == 0

    def test_from_tensor_non_contiguous_and_views(self, tmp_path):
        base = torch.arange(24).view(4, 6)
        for i, src in enumerate([base.t(), base[1:, ::2], base[2], torch.tensor(5)]):
            t = MemoryMappedTensor.from_tensor(src, filename=tmp_path / f"{i}.memmap")
            assert torch.equal(t, src)
            assert os.path.getsize(t.filename) == src.numel() * 8

    def test_from_tensor_parameter_and_conj(self, tmp_path):
        p = torch.nn.Parameter(torch.randn(3))
        t = MemoryMappedTensor.from_tensor(p, filename=tmp_path / "p.memmap")
        assert torch.equal(t, p.detach()) and not t.requires_grad
        c = torch.randn(3, dtype=torch.complex64).conj()
        tc = MemoryMappedTensor.from_tensor(c, filename=tmp_path / "c.memmap")
        assert torch.equal(tc, c.resolve_conj())

    @pytest.mark.parametrize("name", ["empty", "zeros"])
    def test_empty_zeros(self, tmp_path, name):
        t = getattr(MemoryMappedTensor, name)(
            2, 3, dtype=torch.int16, filename=tmp_path / "x.memmap"
        )
        assert t.shape == (2, 3) and t.dtype == torch.int16
        assert os.path.getsize(tmp_path / "x.memmap") == 12
        assert t.sum().item() == 0

    def test_shape_spellings(self):
        for args, kwargs in [
            ((2, 3), {}),
            (((2, 3),), {}),
            ((torch.Size([2, 3]),), {}),
            ((), {"shape": [2, 3]}),
        ]:
            assert MemoryMappedTensor.zeros(*args, **kwargs).shape == (2, 3)
        with pytest.raises(ValueError, match="negative"):
            MemoryMappedTensor.zeros(2, -1)
        with pytest.raises(TypeError):
            MemoryMappedTensor.zeros(2.5)

    def test_ones_full(self, tmp_path):
        assert MemoryMappedTensor.ones(3, filename=tmp_path / "o.memmap").tolist() == [1.0] * 3
        f = MemoryMappedTensor.full(
            (2,), fill_value=7, dtype=torch.int32, filename=tmp_path / "f.memmap"
        )
        assert f.tolist() == [7, 7] and f.dtype == torch.int32
        assert MemoryMappedTensor.full(2, 2, fill_value=True, dtype=torch.bool).all()

    def test_like_constructors(self, tmp_path):
        ref = torch.randn(2, 5, dtype=torch.float64)
        e = MemoryMappedTensor.empty_like(ref, filename=tmp_path / "e.memmap")
        z = MemoryMappedTensor.zeros_like(ref, filename=tmp_path / "z.memmap")
        o = MemoryMappedTensor.ones_like(ref)
        f = MemoryMappedTensor.full_like(ref, 3.5, filename=tmp_path / "f.memmap")
        for t in (e, z, o, f):
            assert (
                t.shape == ref.shape and t.dtype == ref.dtype and isinstance(t, MemoryMappedTensor)
            )
        assert z.sum().item() == 0 and o.sum().item() == 10 and f.sum().item() == 35

    def test_anonymous_shared_memory(self):
        t = MemoryMappedTensor.from_tensor(torch.arange(3))
        assert t.is_shared() and torch.equal(t, torch.arange(3))
        with pytest.raises(RuntimeError, match="no file"):
            _ = t.filename

    def test_rejects_quantized_and_sparse(self, tmp_path):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quantized tensors are deprecated in recent torch
            q = torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8)
        with pytest.raises(TypeError, match="cannot be memory-mapped"):
            MemoryMappedTensor.from_tensor(q, filename=tmp_path / "q.memmap")
        with pytest.raises(TypeError, match="strided"):
            MemoryMappedTensor.from_tensor(torch.eye(3).to_sparse(), filename=tmp_path / "s.memmap")


class TestDtypes:
    @pytest.mark.parametrize("name", sorted(DTYPES))
    def test_round_trip_every_dtype(self, tmp_path, name):
        dtype = DTYPES[name]
        src = _sample(dtype)
        t = MemoryMappedTensor.from_tensor(src, filename=tmp_path / "x.memmap")
        assert t.dtype == dtype and t.shape == src.shape
        assert os.path.getsize(t.filename) == src.numel() * dtype.itemsize
        back = MemoryMappedTensor.from_filename(t.filename, dtype, src.shape, mode="r")
        assert _bytes(back) == _bytes(src)
        clone = pickle.loads(pickle.dumps(t))
        assert _bytes(clone) == _bytes(src)

    def test_table_covers_storage_dtypes(self):
        for dtype in (
            torch.bool,
            torch.bfloat16,
            torch.float16,
            torch.complex128,
            torch.uint8,
            torch.int64,
        ):
            assert dtype in DTYPES.values()


class TestIndexing:
    @pytest.fixture
    def t(self, tmp_path):
        return MemoryMappedTensor.from_tensor(
            torch.arange(24.0).view(4, 6), filename=tmp_path / "x.memmap"
        )

    @pytest.mark.parametrize(
        "index",
        [0, slice(1, 3), (1, 2), Ellipsis, (slice(None), 0), (None, 1), (slice(None, None, 2),)],
    )
    def test_basic_indexing_is_a_mapped_view(self, t, index):
        v = t[index]
        assert isinstance(v, MemoryMappedTensor)
        assert v.filename == t.filename
        assert torch.equal(v, t.as_subclass(torch.Tensor)[index])

    @pytest.mark.parametrize(
        "index",
        [
            torch.tensor([0, 2]),
            torch.tensor([True, False, True, False]),
            [0, 1],
            (torch.tensor([0, 1]), 2),
        ],
    )
    def test_advanced_indexing_is_a_plain_tensor(self, t, index):
        v = t[index]
        assert type(v) is torch.Tensor
        assert torch.equal(v, t.as_subclass(torch.Tensor)[index])

    def test_views_write_through(self, t):
        t[1][2] = -1.0
        assert t[1, 2].item() == -1.0
        again = MemoryMappedTensor.from_filename(t.filename, torch.float32, (4, 6))
        assert again[1, 2].item() == -1.0

    def test_operations_give_plain_tensors(self, t):
        for out in (t + 1, t.sum(), t.view(-1), t.clone(), torch.stack([t, t]), t.double()):
            assert type(out) is torch.Tensor
        assert t.add_(0) is t  # in-place ops return the memory-mapped tensor itself

    def test_deepcopy_owns_its_data(self, t):
        d = copy.deepcopy(t)
        assert type(d) is torch.Tensor and torch.equal(d, t)
        d.zero_()
        assert t.sum().item() != 0


class TestReadOnly:
    def test_read_only_mapping_refuses_writes(self, tmp_path):
        path = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.arange(4.0), filename=path)
        before = path.read_bytes()
        t = MemoryMappedTensor.from_filename(path, torch.float32, [4], mode="r")
        with pytest.raises(ReadOnlyMemmapError, match=r"fill_.*mode='r'.*x\.memmap"):
            t.fill_(9.0)
        assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert path.read_bytes() == before

    def test_default_mapping_is_shared_with_other_mappings(self, tmp_path):
        path = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.zeros(4), filename=path)
        a = MemoryMappedTensor.from_filename(path, torch.float32, [4])
        b = MemoryMappedTensor.from_filename(path, torch.float32, [2, 2], index=1)
        a[3] = 5.0
        assert b.tolist() == [0.0, 5.0] and b.parent_shape == torch.Size([2, 2])
        with pytest.raises(ValueError, match="mode"):
            MemoryMappedTensor.from_filename(path, torch.float32, [4], mode="w")

    def test_from_filename_checks_size(self, tmp_path):
        path = tmp_path / "x.memmap"
        path.write_bytes(b"\0" * 12)
        with pytest.raises(ValueError, match=r"x\.memmap.*12 bytes.*16"):
            MemoryMappedTensor.from_filename(path, torch.float32, (4,))
        with pytest.raises(ValueError, match="12 bytes"):
            MemoryMappedTensor.from_filename(path, torch.float32, (2,))
        assert path.stat().st_size == 12  # never grown
        with pytest.raises(FileNotFoundError, match="missing"):
            MemoryMappedTensor.from_filename(tmp_path / "nope.memmap", torch.float32, (4,))


_CHILD = r"""
import pickle, sys, torch
from td_memmap import MemoryMappedTensor
t = pickle.load(sys.stdin.buffer)
assert type(t) is MemoryMappedTensor, type(t)
print(t.filename, tuple(t.shape), float(t.sum()), flush=True)
t.fill_(5)  # a shared, writable mapping: the parent sees it
"""


class TestPickle:
    def test_pickle_sends_filename_not_data(self, tmp_path):
        t = MemoryMappedTensor.zeros(1 << 18, filename=tmp_path / "big.memmap")  # 1 MiB
        payload = pickle.dumps(t)
        assert len(payload) < 1024
        assert pickle.loads(payload).filename == t.filename

    def test_pickle_of_view_keeps_offset_and_strides(self, tmp_path):
        t = MemoryMappedTensor.from_tensor(
            torch.arange(24).view(4, 6), filename=tmp_path / "x.memmap"
        )
        v = t[1:3, ::2]
        back = pickle.loads(pickle.dumps(v))
        assert isinstance(back, MemoryMappedTensor)
        assert torch.equal(back, v) and back.stride() == v.stride()
        back.fill_(-1)
        assert t[1, 0].item() == -1 and t[1, 1].item() == 7

    def test_across_a_process(self, tmp_path):
        t = MemoryMappedTensor.from_tensor(torch.ones(4, 3), filename=tmp_path / "x.memmap")
        view = t[1:3]
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=pickle.dumps(view),
            capture_output=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        out = proc.stdout.decode().split()
        assert out[0] == t.filename and out[-1] == "6.0"
        assert t[0].tolist() == [1.0] * 3
        assert t[1:3].eq(5).all()  # the child wrote through its own mapping
        assert t[3].tolist() == [1.0] * 3

    def test_read_only_mapping_pickles_read_only(self, tmp_path):
        path = tmp_path / "x.memmap"
        MemoryMappedTensor.from_tensor(torch.ones(3), filename=path)
        ro = MemoryMappedTensor.from_filename(path, torch.float32, (3,), mode="r")
        back = pickle.loads(pickle.dumps(ro))
        with pytest.raises(ReadOnlyMemmapError):
            back.zero_()
        assert MemoryMappedTensor.from_filename(path, torch.float32, (3,)).sum().item() == 3

    def test_unpickle_checks_the_file(self, tmp_path):
        path = tmp_path / "x.memmap"
        t = MemoryMappedTensor.from_tensor(torch.ones(8), filename=path)
        payload = pickle.dumps(t)
        path.write_bytes(b"\0" * 4)
        with pytest.raises(ValueError, match="4 bytes"):
            pickle.loads(payload)
        assert path.stat().st_size == 4

    def test_anonymous_pickles_its_data(self):
        t = MemoryMappedTensor.from_tensor(torch.arange(5))
        back = pickle.loads(pickle.dumps(t))
        assert isinstance(back, MemoryMappedTensor) and torch.equal(back, t) and back.is_shared()


# ----------------------------------------------------------------------------- from_handler


def test_from_handler_views_the_buffer_and_is_deprecated():
    import mmap

    memory = mmap.mmap(-1, 24)
    with pytest.warns(DeprecationWarning, match="from_handler"):
        t = MemoryMappedTensor.from_handler(memory, torch.float32, (2, 3))
    assert isinstance(t, MemoryMappedTensor) and t.shape == (2, 3)
    t.fill_(2.0)
    assert memory[:4] == torch.tensor([2.0]).numpy().tobytes()  # no copy

    class Handler:  # upstream's handlers hold their memory as .buffer
        buffer = memory

    with pytest.warns(DeprecationWarning):
        row = MemoryMappedTensor.from_handler(Handler(), torch.float32, torch.Size([2, 3]), index=1)
    assert row.shape == (3,) and row.eq(2).all()


def test_from_handler_errors_and_read_only_buffers():
    with pytest.warns(DeprecationWarning):
        ro = MemoryMappedTensor.from_handler(bytes(8), torch.int32, (2,))
    with pytest.raises(ReadOnlyMemmapError):
        ro.add_(1)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="needs 16 bytes"):
        MemoryMappedTensor.from_handler(bytearray(8), torch.float32, (4,))
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="buffer"):
        MemoryMappedTensor.from_handler(object(), torch.float32, (1,))
    memory = bytearray(12)
    # torch warns once per process that strided nested tensors are a prototype: the
    # test must not depend on whether an earlier test used one first
    with warnings.catch_warnings(), pytest.warns(DeprecationWarning):
        warnings.filterwarnings("ignore", "The PyTorch API of nested tensors", UserWarning)
        nested = MemoryMappedTensor.from_handler(
            memory, torch.float32, torch.tensor([[1, 2], [1, 1]])
        )
    nested[1].fill_(1.0)
    assert nested.is_nested and memory[8:] == torch.ones(1).numpy().tobytes()


@pytest.mark.parametrize("make", ["empty", "zeros", "ones"])
@pytest.mark.parametrize("shape", [(), (0, 3), (5, 2)])
def test_anonymous_allocation_is_shared_memory_of_the_right_values(make: str, shape: tuple) -> None:
    t = getattr(MemoryMappedTensor, make)(shape, dtype=torch.float64)
    assert isinstance(t, MemoryMappedTensor) and t.shape == shape and t.dtype == torch.float64
    assert t.is_shared()
    with pytest.raises(RuntimeError, match="no file"):
        t.filename  # noqa: B018
    if make != "empty":  # (fresh shared memory reads as zeros; empty promises nothing)
        assert (t == (1 if make == "ones" else 0)).all()


def test_from_storage_applies_index_after_the_shape():
    storage = torch.arange(6, dtype=torch.int64).untyped_storage()
    row = MemoryMappedTensor.from_storage(storage, shape=(3, 2), dtype=torch.int64, index=2)
    assert isinstance(row, MemoryMappedTensor)
    assert row.tolist() == [4, 5]
