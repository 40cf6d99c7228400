"""MemoryMappedTensor's constructors: `device=`, the class call, `from_tensor`'s shortcut, links."""

import os

import pytest
import torch

from td_core import TensorDict
from td_memmap import MemmapExistsError, MemoryMappedTensor, SymlinkTargetError

_FACTORIES = [
    lambda **kw: MemoryMappedTensor.empty(2, 3, **kw),
    lambda **kw: MemoryMappedTensor.zeros((2, 3), **kw),
    lambda **kw: MemoryMappedTensor.ones(shape=(2, 3), **kw),
    lambda **kw: MemoryMappedTensor.full((2, 3), fill_value=4, **kw),
]


class TestDevice:
    @pytest.mark.parametrize("make", _FACTORIES)
    @pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu")])
    @pytest.mark.parametrize("in_file", [False, True])
    def test_cpu_is_accepted(self, make, device, in_file, tmp_path):
        filename = tmp_path / "x.memmap" if in_file else None
        t = make(device=device, dtype=torch.int32, filename=filename)
        assert isinstance(t, MemoryMappedTensor)
        assert t.shape == (2, 3) and t.dtype == torch.int32 and t.device.type == "cpu"
        if in_file:
            assert t.filename == str(tmp_path / "x.memmap")

    @pytest.mark.parametrize("make", _FACTORIES)
    @pytest.mark.parametrize("device", ["meta", "cuda", torch.device("cuda", 1)])
    def test_other_devices_are_refused_and_create_nothing(self, make, device, tmp_path):
        with pytest.raises(RuntimeError, match="Only CPU tensors are supported") as info:
            make(device=device, filename=tmp_path / "x.memmap")
        assert isinstance(info.value, ValueError)
        assert repr(device) in str(info.value)
        assert not os.listdir(tmp_path)

    def test_constructors_ignore_a_default_device_context(self, tmp_path):
        # torch.set_default_device("cuda") must not break memory mapping: the data stays on the CPU
        with torch.device("meta"):
            made = [
                MemoryMappedTensor.zeros(3),
                MemoryMappedTensor.full((3,), fill_value=2.0, filename=tmp_path / "a.memmap"),
                MemoryMappedTensor.from_tensor(torch.ones(3, device="cpu")),
                MemoryMappedTensor.from_filename(tmp_path / "a.memmap", torch.float32, (3,)),
            ]
            td = TensorDict(a=torch.ones(3, device="cpu"), batch_size=[3], device="cpu")
            td.memmap(tmp_path / "td")
            loaded = TensorDict.load_memmap(tmp_path / "td")
        assert [t.device.type for t in made] == ["cpu"] * 4
        assert made[3].tolist() == [2.0, 2.0, 2.0]
        assert loaded["a"].device.type == "cpu" and loaded["a"].tolist() == [1.0] * 3

    def test_missing_shape(self):
        with pytest.raises(TypeError, match="missing shape"):
            MemoryMappedTensor.zeros(dtype=torch.float32)
        assert MemoryMappedTensor.zeros(()).shape == ()


class TestClassCall:
    def test_data_is_copied_into_shared_memory(self):
        src = torch.arange(6.0)
        t = MemoryMappedTensor(src, shape=(2, 3))
        assert type(t) is MemoryMappedTensor and t.is_shared()
        assert torch.equal(t, src.view(2, 3))
        t.fill_(0)
        assert src.sum() == 15  # a copy

    def test_nested_list_dtype_filename_and_index(self, tmp_path):
        t = MemoryMappedTensor(
            [[1, 2], [3, 4]], dtype=torch.int16, filename=tmp_path / "x.memmap", index=1
        )
        assert t.tolist() == [3, 4] and t.dtype == torch.int16
        assert t.filename == str(tmp_path / "x.memmap")

    def test_storage(self):
        base = MemoryMappedTensor.from_tensor(torch.arange(4, dtype=torch.int64))
        t = MemoryMappedTensor(base.untyped_storage(), dtype=torch.int64, shape=(2, 2))
        t[0, 0] = 9
        assert base[0] == 9

    def test_refusals(self, tmp_path):
        with pytest.raises(RuntimeError, match="Only CPU tensors"):
            MemoryMappedTensor([3, 4], device="meta")
        with pytest.raises(TypeError, match="from_filename"):
            MemoryMappedTensor(str(tmp_path / "x.memmap"))
        with pytest.raises(TypeError, match="needs data"):
            MemoryMappedTensor()


class TestFromTensorShortcut:
    def test_already_there_is_returned_as_is(self, tmp_path):
        anon = MemoryMappedTensor.from_tensor(torch.zeros(3))
        assert MemoryMappedTensor.from_tensor(anon) is anon
        filed = MemoryMappedTensor.from_tensor(torch.zeros(3), filename=tmp_path / "a.memmap")
        assert MemoryMappedTensor.from_tensor(filed, filename=tmp_path / "a.memmap") is filed
        copy = MemoryMappedTensor.from_tensor(filed)  # into shared memory: a copy
        assert copy is not filed and copy.data_ptr() != filed.data_ptr()

    def test_another_file_needs_copy_existing(self, tmp_path):
        filed = MemoryMappedTensor.from_tensor(torch.arange(3.0), filename=tmp_path / "a.memmap")
        with pytest.raises(RuntimeError, match="copy_existing") as info:
            MemoryMappedTensor.from_tensor(filed, filename=tmp_path / "b.memmap")
        assert "a.memmap" in str(info.value)
        assert not (tmp_path / "b.memmap").exists()
        moved = MemoryMappedTensor.from_tensor(
            filed, filename=tmp_path / "b.memmap", copy_existing=True
        )
        assert moved.filename == str(tmp_path / "b.memmap") and torch.equal(moved, filed)

    def test_copy_data_false_always_makes_a_new_tensor(self):
        anon = MemoryMappedTensor.from_tensor(torch.ones(3))
        zeros = MemoryMappedTensor.from_tensor(anon, copy_data=False)
        assert zeros is not anon and zeros.sum() == 0 and anon.sum() == 3


class TestSymlinks:
    @pytest.mark.parametrize(
        "make",
        [
            lambda path: MemoryMappedTensor.from_tensor(
                torch.zeros(2), filename=path, existsok=True
            ),
            lambda path: MemoryMappedTensor.zeros(2, filename=path, existsok=True),
            lambda path: MemoryMappedTensor.from_tensor(torch.zeros(2), filename=path),
        ],
    )
    def test_never_written_through(self, make, tmp_path):
        target = tmp_path / "target"
        target.write_bytes(b"unchanged")
        link = tmp_path / "x.memmap"
        link.symlink_to(target)
        with pytest.raises(SymlinkTargetError, match="through symlink") as info:
            make(link)
        assert isinstance(info.value, RuntimeError) and str(link) in str(info.value)
        assert target.read_bytes() == b"unchanged" and link.is_symlink()

    def test_dangling_link_is_refused_too(self, tmp_path):
        link = tmp_path / "x.memmap"
        link.symlink_to(tmp_path / "nowhere")
        with pytest.raises(SymlinkTargetError):
            MemoryMappedTensor.ones(2, filename=link)
        assert not (tmp_path / "nowhere").exists()

    def test_existing_file_still_reported(self, tmp_path):
        MemoryMappedTensor.zeros(2, filename=tmp_path / "x.memmap")
        with pytest.raises(MemmapExistsError, match="already exists"):
            MemoryMappedTensor.zeros(2, filename=tmp_path / "x.memmap")


class TestSymlinkedSubFolders:
    @pytest.mark.parametrize("how", ["memmap", "memmap_like", "memmap_"])
    def test_a_linked_sub_folder_is_refused_before_any_write(self, how, tmp_path):
        prefix, outside = tmp_path / "saved", tmp_path / "outside"
        prefix.mkdir()
        outside.mkdir()
        (prefix / "nested").symlink_to(outside, target_is_directory=True)
        td = TensorDict({"a": torch.zeros(2), "nested": {"x": torch.randn(3)}}, batch_size=[])
        with pytest.raises(SymlinkTargetError, match="TensorDict through symlink") as info:
            getattr(td, how)(prefix)
        assert "nested" in str(info.value)
        assert not list(outside.iterdir())
        assert sorted(os.listdir(prefix)) == ["nested"]  # nothing written

    def test_a_linked_top_folder_is_followed(self, tmp_path):
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
        TensorDict({"nested": {"x": torch.ones(3)}}, batch_size=[]).memmap(tmp_path / "link")
        assert TensorDict.load_memmap(tmp_path / "real")["nested", "x"].tolist() == [1.0] * 3
