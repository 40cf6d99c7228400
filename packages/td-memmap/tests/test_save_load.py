import os
from concurrent.futures import Future

import pytest
import torch
from torch._subclasses import FakeTensor, FakeTensorMode

from td_core import NonTensorData, NonTensorStack, TensorDict, stack
from td_memmap import (
    MemmapExistsError,
    MemoryMappedTensor,
    is_memmap,
    load,
    load_memmap,
    memmap,
    memmap_,
    memmap_like,
    save,
)


def _td() -> TensorDict:
    td = TensorDict(
        {
            "obs": torch.randn(4, 3),
            "done": torch.tensor([True, False, True, False]),
            "half": torch.randn(4, 2).to(torch.bfloat16),
            "idx": torch.arange(4),
            "nested": {
                "a": torch.randn(4, 2, 2),
                "deeper": {"b": torch.randint(0, 255, (4,), dtype=torch.uint8)},
            },
            "empty": torch.zeros(4, 0),
        },
        batch_size=[4],
    )
    td["name"] = "cartpole"
    return td


def _assert_same(a: TensorDict, b: TensorDict) -> None:
    assert a.batch_size == b.batch_size
    assert list(a.keys()) == list(b.keys())
    for key in a.keys(include_nested=True, leaves_only=True):
        x, y = a.get(key), b.get(key)
        assert x.dtype == y.dtype and torch.equal(x, y), key
    assert a["name"] == b["name"]


class TestRoundTrip:
    @pytest.mark.parametrize("num_threads", [0, 3])
    def test_save_and_load(self, tmp_path, num_threads):
        td = _td()
        out = save(td, tmp_path / "td", num_threads=num_threads)
        _assert_same(out, td)
        assert out.is_locked and is_memmap(out)
        assert isinstance(out["nested", "deeper", "b"], MemoryMappedTensor)
        back = load(tmp_path / "td", num_threads=num_threads)
        _assert_same(back, td)
        assert is_memmap(back) and not back.is_locked
        assert back["nested"].batch_size == torch.Size([4])

    def test_methods_on_tensordict(self, tmp_path):
        td = _td()
        out = td.memmap(tmp_path / "a", num_threads=2)
        assert out.is_memmap() and not td.is_memmap()
        back = TensorDict.load_memmap(tmp_path / "a", num_threads=2)
        _assert_same(back, td)
        td.save(tmp_path / "b")
        _assert_same(TensorDict.load(tmp_path / "b"), td)
        td.dumps(tmp_path / "c")
        _assert_same(TensorDict.load_memmap(tmp_path / "c", mode="r+"), td)

    def test_plain_mapping(self, tmp_path):
        out = save({"w": torch.ones(3), "sub": {"b": torch.zeros(2)}}, tmp_path / "m")
        assert isinstance(out, TensorDict) and out.batch_size == torch.Size([])
        assert load(tmp_path / "m")["sub", "b"].tolist() == [0.0, 0.0]

    def test_batch_size_and_device_survive(self, tmp_path):
        td = TensorDict({"a": torch.zeros(2, 3, 5)}, batch_size=[2, 3], device="cpu")
        save(td, tmp_path / "d")
        back = load(tmp_path / "d")
        assert back.batch_size == torch.Size([2, 3]) and back.device == torch.device("cpu")
        assert load(tmp_path / "d", device="cpu")["a"].shape == (2, 3, 5)

    def test_device_argument_copies_off_the_mapping(self, tmp_path):
        save(_td(), tmp_path / "d")
        back = load(tmp_path / "d", device="cpu")
        assert back.device == torch.device("cpu")
        assert _td()["obs"].shape == back["obs"].shape

    def test_durable(self, tmp_path):
        td = _td()
        save(td, tmp_path / "d", durable=True, num_threads=2)
        _assert_same(load(tmp_path / "d"), td)

    def test_num_threads_must_be_non_negative(self, tmp_path):
        with pytest.raises(ValueError, match="num_threads"):
            save(_td(), tmp_path / "d", num_threads=-1)
        with pytest.raises(ValueError, match="num_threads"):
            load(tmp_path / "d", num_threads=-2)

    def test_empty_tensordict(self, tmp_path):
        save(TensorDict(batch_size=[3]), tmp_path / "e")
        back = load(tmp_path / "e")
        assert back.batch_size == torch.Size([3]) and len(list(back.keys())) == 0

    def test_non_tensor_data_and_stacks(self, tmp_path):
        a = TensorDict({"x": torch.zeros(2)}, [2])
        a["s"] = "u"
        b = TensorDict({"x": torch.ones(2)}, [2])
        b["s"] = "v"
        td = stack([a, b])
        td["cfg"] = NonTensorData({"lr": 0.1, "layers": (64, 64)}, batch_size=[2, 2])
        save(td, tmp_path / "s")
        back = load(tmp_path / "s")
        assert isinstance(back.get("s"), NonTensorStack)
        assert back["s"] == [["u", "u"], ["v", "v"]]
        assert back["cfg"] == {"lr": 0.1, "layers": (64, 64)}
        assert back[1, 0]["s"] == "v"

    def test_stacked_list_values_keep_their_depth(self, tmp_path):
        values = NonTensorStack.from_list([[1, 2], [3], []])
        td = TensorDict(batch_size=[3])
        td["v"] = values
        save(td, tmp_path / "s")
        assert load(tmp_path / "s")["v"] == [[1, 2], [3], []]

    def test_return_early(self, tmp_path):
        td = _td()
        fut = save(td, tmp_path / "f", num_threads=2, return_early=True)
        assert isinstance(fut, Future)
        _assert_same(fut.result(timeout=60), td)
        _assert_same(load(tmp_path / "f"), td)

    def test_out(self, tmp_path):
        td = _td()
        save(td, tmp_path / "o")
        dest = _td().apply(torch.zeros_like)
        dest["name"] = "cartpole"
        res = load(tmp_path / "o", out=dest)
        assert res is dest
        _assert_same(dest, td)


class TestInPlaceAndShared:
    def test_memmap_in_place(self, tmp_path):
        td = _td()
        obs = td["obs"].clone()
        res = memmap_(td, tmp_path / "p")
        assert res is td and td.is_locked and is_memmap(td)
        assert isinstance(td["obs"], MemoryMappedTensor) and torch.equal(td["obs"], obs)
        td["obs"][0] = 42.0  # in-place writes reach the file
        assert load(tmp_path / "p")["obs"][0].eq(42.0).all()

    def test_memmap_in_place_method(self, tmp_path):
        td = _td()
        assert td.memmap_(tmp_path / "p") is td and td.is_memmap()

    def test_memmap_in_place_of_a_locked_tensordict(self, tmp_path):
        td = _td().lock_()
        memmap_(td, tmp_path / "p")
        assert td.is_locked and is_memmap(td)

    def test_anonymous_shared_memory(self):
        td = _td()
        out = memmap(td)
        assert is_memmap(out) and out["obs"].is_shared()
        with pytest.raises(RuntimeError, match="no file"):
            _ = out["obs"].filename
        _assert_same(out, td)

    def test_already_mapped_elsewhere_needs_copy_existing(self, tmp_path):
        first = save(_td(), tmp_path / "a")
        with pytest.raises(RuntimeError, match="copy_existing=True"):
            save(first, tmp_path / "b")
        assert not (tmp_path / "b" / "meta.json").exists()
        second = save(first, tmp_path / "b", copy_existing=True)
        assert second["obs"].filename.startswith(str(tmp_path / "b"))
        _assert_same(load(tmp_path / "b"), first)

    def test_saving_onto_its_own_files_reuses_them(self, tmp_path):
        first = save(_td(), tmp_path / "a")
        before = os.stat(first["obs"].filename).st_ino
        again = save(first, tmp_path / "a")
        assert again["obs"] is first["obs"]
        assert os.stat(first["obs"].filename).st_ino == before
        _assert_same(load(tmp_path / "a"), first)

    def test_saving_a_modified_read_only_load_over_itself(self, tmp_path):
        save(_td(), tmp_path / "a")
        back = load(tmp_path / "a")  # copy-on-write leaves
        back["obs"][:] = 7.0
        back.unlock_()
        save(back, tmp_path / "a")  # writes new files; the old mappings stay valid
        assert load(tmp_path / "a")["obs"].eq(7.0).all()
        assert back["obs"].eq(7.0).all()

    def test_resaving_with_other_shapes_keeps_earlier_loads_valid(self, tmp_path):
        save(TensorDict({"w": torch.arange(1 << 16)}, []), tmp_path / "a")
        old = load(tmp_path / "a")
        save(TensorDict({"w": torch.zeros(3, dtype=torch.int64)}, []), tmp_path / "a")
        # the old file was replaced, not truncated under the mapping: no SIGBUS, old values
        assert old["w"][-1].item() == (1 << 16) - 1
        assert load(tmp_path / "a")["w"].tolist() == [0, 0, 0]

    def test_resaving_writes_a_new_generation_beside_the_old(self, tmp_path):
        first = save(TensorDict({"w": torch.zeros(4)}, []), tmp_path / "a", layout="files")
        old = first["w"].filename
        second = save(TensorDict({"w": torch.ones(4)}, []), tmp_path / "a")
        assert second["w"].filename == str(tmp_path / "a" / "w.b.memmap")
        assert first["w"].tolist() == [0.0] * 4  # the old file is untouched, kept as a spare
        assert load(tmp_path / "a")["w"].tolist() == [1.0] * 4
        inode = os.stat(old).st_ino
        third = save(TensorDict({"w": torch.full((4,), 2.0)}, []), tmp_path / "a")
        assert third["w"].filename == old and os.stat(old).st_ino == inode  # rewritten in place
        assert sorted(os.listdir(tmp_path / "a")) == ["meta.json", "w.b.memmap", "w.memmap"]
        save(TensorDict({"v": torch.ones(2)}, []), tmp_path / "a")  # a key gone: its files too
        assert sorted(os.listdir(tmp_path / "a")) == ["meta.json", "v.memmap"]

    def test_resaving_without_a_sub_td_removes_its_folder(self, tmp_path):
        save(TensorDict({"w": torch.zeros(4), "sub": {"b": torch.ones(2)}}, []), tmp_path / "a")
        save(TensorDict({"w": torch.ones(4)}, []), tmp_path / "a")
        # no stale sub-folder is left that would load alone, naming files now removed
        assert not (tmp_path / "a" / "sub").exists()
        assert load(tmp_path / "a").keys() == {"w"}

    def test_resaving_a_memory_mapped_td_keeps_its_files(self, tmp_path):
        td = save(
            TensorDict({"w": torch.zeros(4), "v": torch.ones(2)}, []),
            tmp_path / "a",
            layout="files",
        )
        td = load(tmp_path / "a")
        td["w"] += 3  # written through to the file
        td.memmap_(tmp_path / "a")
        assert td["w"].filename == str(tmp_path / "a" / "w.memmap")
        assert load(tmp_path / "a")["w"].tolist() == [3.0] * 4

    def test_resaving_never_follows_a_planted_link(self, tmp_path):
        save(TensorDict({"w": torch.zeros(4)}, []), tmp_path / "a", layout="files")
        outside = tmp_path / "outside.memmap"
        outside.write_bytes(b"\0" * 16)
        os.unlink(tmp_path / "a" / "w.memmap")
        os.symlink(outside, tmp_path / "a" / "w.memmap")
        # the folder no longer loads, so a default save would be packed: ask for files
        save(TensorDict({"w": torch.ones(4)}, []), tmp_path / "a", layout="files")
        assert outside.read_bytes() == b"\0" * 16
        assert not os.path.islink(tmp_path / "a" / "w.memmap")
        assert load(tmp_path / "a")["w"].tolist() == [1.0] * 4

    def test_existsok_false(self, tmp_path):
        save(_td(), tmp_path / "a")
        with pytest.raises(MemmapExistsError, match="existsok=True"):
            save(_td(), tmp_path / "a", existsok=False)
        save(_td(), tmp_path / "new", existsok=False)


class TestMemmapLike:
    def test_seed_dataset_example(self, tmp_path):
        data = TensorDict(
            {
                "images": torch.zeros((16, 16, 3), dtype=torch.uint8),
                "labels": torch.zeros((), dtype=torch.int),
            },
            batch_size=[],
        )
        data = data.expand(10_000)
        data = data.memmap_like(tmp_path / "dataset")
        assert data.batch_size == torch.Size([10_000]) and data.is_memmap()
        images = tmp_path / "dataset" / "data.pack"  # every leaf, packed (format version 2)
        assert images.stat().st_size >= 10_000 * (16 * 16 * 3 + 4)
        assert images.stat().st_blocks * 512 < images.stat().st_size  # sparse: nothing written
        data[500] = TensorDict(
            {"images": torch.full((16, 16, 3), 9, dtype=torch.uint8), "labels": torch.tensor(3)}, []
        )
        rows = data[torch.tensor([1, 500, 9_999])]
        assert rows["labels"].tolist() == [0, 3, 0]
        assert rows["images"][1].eq(9).all() and rows["images"][0].eq(0).all()
        back = load_memmap(tmp_path / "dataset")
        assert back["labels"][500].item() == 3

    def test_memmap_like_function_and_non_tensor(self, tmp_path):
        td = _td()
        like = memmap_like(td, tmp_path / "l", num_threads=2)
        assert like["name"] == "cartpole"
        assert like["obs"].shape == td["obs"].shape and like["obs"].abs().sum().item() == 0
        assert like["half"].dtype == torch.bfloat16

    def test_memmap_like_anonymous(self):
        like = memmap_like(_td())
        assert is_memmap(like) and like["obs"].sum().item() == 0


class TestSeedParameterExample:
    def test_checkpoint_and_slice(self, tmp_path):
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 3))
        x = torch.randn(5, 3)
        expected = model(x).detach()
        folder = str(tmp_path / "folder")

        params = TensorDict.from_module(model)
        params.memmap(folder, num_threads=16)
        params = TensorDict.load_memmap(folder, num_threads=16)
        assert isinstance(params["0", "weight"], MemoryMappedTensor)
        with torch.no_grad():  # scramble the model: only the loaded values can restore it
            for p in model.parameters():
                p.zero_()
        assert not torch.allclose(model(x), expected)

        params.to_module(model)
        assert model[0].weight is params["0", "weight"]
        torch.testing.assert_close(model(x), expected)

        params["0"].to_module(model[0])
        params0 = TensorDict.load_memmap(folder + "/0", num_threads=16)
        assert set(params0.keys()) == {"weight", "bias"}
        params0.to_module(model[0])
        assert model[0].weight is params0["weight"]
        assert model[0].weight.abs().sum().item() > 0
        torch.testing.assert_close(
            model[0](x), torch.nn.functional.linear(x, params0["weight"], params0["bias"])
        )

    def test_to_module_as_a_context_manager_restores_the_model(self, tmp_path):
        model = torch.nn.Linear(2, 2)
        saved = TensorDict.from_module(model).memmap(tmp_path / "p")
        with torch.no_grad():
            model.weight.fill_(3.0)
        before = model.weight
        with TensorDict.load_memmap(tmp_path / "p").to_module(model):
            assert torch.equal(model.weight, saved["weight"])
        assert model.weight is before and model.weight.eq(3.0).all()


class TestSubpath:
    def _stack(self):
        from td_core import lazy_stack

        return lazy_stack(
            [
                TensorDict(
                    x=torch.full((2,), float(i)), sub={"y": torch.ones(2) * i}, batch_size=[2]
                )
                for i in range(3)
            ]
        )

    @pytest.mark.parametrize("archive", [False, True])
    @pytest.mark.parametrize("subpath", ["1/sub", "/1//sub/", ("1", "sub"), ("1", ("sub",))])
    def test_paths_and_nested_keys_reach_stack_members(self, tmp_path, archive, subpath):
        prefix = tmp_path / ("saved.tdz" if archive else "saved")
        self._stack().save(prefix)
        part = TensorDict.load_memmap(prefix, subpath=subpath)
        assert type(part) is TensorDict and part["y"].tolist() == [1.0, 1.0]
        member = TensorDict.load_memmap(prefix, subpath="2")
        assert member["x"].tolist() == [2.0, 2.0]

    def test_a_key_with_a_slash_needs_the_tuple_form(self, tmp_path):
        TensorDict({"a/b": {"c": torch.ones(1)}}, []).save(tmp_path)
        assert TensorDict.load_memmap(tmp_path, subpath=("a/b",))["c"].tolist() == [1.0]
        with pytest.raises(ValueError, match="No tensordict found under subpath 'a/b'"):
            TensorDict.load_memmap(tmp_path, subpath="a/b")

    @pytest.mark.parametrize(
        "subpath, names",
        [
            ("does/not/exist", "'does' is nothing"),
            (("1", "x"), "'1/x' is a MemoryMappedTensor"),
            ("3", "'3' is nothing"),
        ],
    )
    def test_what_is_not_a_saved_tensordict_is_a_value_error(self, tmp_path, subpath, names):
        self._stack().save(tmp_path)
        with pytest.raises(ValueError, match="No tensordict found under subpath") as info:
            TensorDict.load_memmap(tmp_path, subpath=subpath)
        assert names in str(info.value) and str(tmp_path) in str(info.value)
        with pytest.raises(ValueError, match="subpath must be"):
            TensorDict.load_memmap(tmp_path, subpath=())


@pytest.mark.parametrize("layout", ["files", "packed"])
def test_loading_under_a_fake_tensor_mode_gives_fake_leaves(tmp_path, layout):
    """As upstream: `load` inside a `FakeTensorMode` (tracing, shape inference) gives fake
    tensors of the saved shapes and dtypes, whichever layout the folder has."""
    td = TensorDict({"w": torch.zeros(3, 4), "n": {"i": torch.arange(3)}}, [3])
    td.set_non_tensor("tag", "x")
    memmap(td, tmp_path / "td", layout=layout)
    with FakeTensorMode():
        fake = load(tmp_path / "td")
    assert isinstance(fake["w"], FakeTensor) and isinstance(fake["n", "i"], FakeTensor)
    assert fake["w"].shape == (3, 4) and fake["n", "i"].dtype == torch.int64
    assert fake.batch_size == (3,) and fake["tag"] == "x"
    torch.testing.assert_close(load(tmp_path / "td")["n", "i"], torch.arange(3))
