"""Lazy stacks, tensorclasses and TensorDictParams: saved, loaded and memory-mapped like TensorDicts."""

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch
from saved_files import edit_meta

from td_core import (
    LazyStackedTensorDict,
    NonTensorStack,
    TensorDict,
    TensorDictParams,
    UnbatchedTensor,
    is_non_tensor,
    is_tensor_collection,
    is_tensorclass,
    lazy_stack,
    tensorclass,
)
from td_memmap import (
    MemmapFormatError,
    MemoryMappedTensor,
    MissingLeafError,
    UnknownClassError,
    UnsafePathError,
    is_memmap,
    load_memmap,
    memmap,
    memmap_,
    memmap_like,
)


@tensorclass
class Pair:
    obs: torch.Tensor
    label: str


@tensorclass
class Renamed:
    obs: torch.Tensor
    label: str


@tensorclass
class Outer:
    pair: Pair
    weight: torch.Tensor


def _ragged_stack(stack_dim: int = 0) -> LazyStackedTensorDict:
    a = TensorDict({"x": torch.arange(6.0).view(2, 3), "common": {"c": torch.zeros(2)}}, [2])
    b = TensorDict(
        {"x": torch.ones(2, 5), "common": {"c": torch.ones(2)}, "only_b": torch.ones(2)}, [2]
    )
    b["name"] = "bee"
    return lazy_stack([a, b], stack_dim)


def _pair() -> Pair:
    return Pair(torch.arange(6.0).view(3, 2), "cat", batch_size=[3])


def _flavours() -> dict:
    """One of every kind of container, each nested somewhere."""
    outer = Outer(_pair(), torch.ones(3), batch_size=[3])
    return {
        "tensordict": TensorDict({"a": torch.ones(3, 2), "n": {"b": torch.zeros(3)}}, [3]),
        "lazy": _ragged_stack(),
        "lazy_dim1": _ragged_stack(stack_dim=1),
        "tensorclass": _pair(),
        "nested_tensorclass": outer,
        "td_holding_both": TensorDict({"p": _pair(), "s": lazy_stack([_pair(), _pair()], 1)}, [3]),
        "lazy_of_lazy": lazy_stack([_ragged_stack(), _ragged_stack()]),
        "lazy_of_tensorclasses": lazy_stack([_pair(), _pair()]),
    }


def _structure(td, values: bool = True):
    """A comparable description: kinds, classes, batch sizes, keys and leaves."""
    if isinstance(td, LazyStackedTensorDict):
        members = [_structure(m, values) for m in td.tensordicts]
        return ("lazy", td.stack_dim, tuple(td.batch_size), members)
    out = {}
    # a tensorclass's get() reads a non-tensor field as its value (as upstream): read the leaves
    # from its TensorDict
    source = td.to_tensordict() if is_tensorclass(td) else td
    for key in source.keys():
        value = source.get(key)
        if isinstance(value, torch.Tensor):
            out[key] = (value.dtype, value.tolist() if values else tuple(value.shape))
        elif is_non_tensor(value):
            out[key] = (type(value).__name__, value.tolist())
        else:
            out[key] = _structure(value, values)
    return (type(td).__name__, tuple(td.batch_size), out)


def _tensors(td):
    if isinstance(td, LazyStackedTensorDict):
        return [t for m in td.tensordicts for t in _tensors(m)]
    out = []
    for value in td.values():
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif is_tensor_collection(value):
            out += _tensors(value)
    return out


FLAVOURS = sorted(_flavours())


class TestRoundTrip:
    @pytest.mark.parametrize("flavour", FLAVOURS)
    @pytest.mark.parametrize("num_threads", [0, 3])
    def test_memmap_then_load(self, tmp_path, flavour, num_threads):
        td = _flavours()[flavour]
        out = memmap(td, tmp_path / "s", num_threads=num_threads)
        assert type(out) is type(td) and out.is_locked and is_memmap(out)
        assert _structure(out) == _structure(td)
        back = load_memmap(tmp_path / "s", num_threads=num_threads)
        assert type(back) is type(td) and is_memmap(back)
        assert _structure(back) == _structure(td)

    @pytest.mark.parametrize("flavour", FLAVOURS)
    def test_memmap_in_place(self, tmp_path, flavour):
        td = _flavours()[flavour]
        expected = _structure(td)
        assert memmap_(td, tmp_path / "s") is td
        assert td.is_locked and is_memmap(td)
        assert _structure(td) == expected == _structure(load_memmap(tmp_path / "s"))

    @pytest.mark.parametrize("flavour", FLAVOURS)
    def test_memmap_like(self, tmp_path, flavour):
        td = _flavours()[flavour]
        like = memmap_like(td, tmp_path / "s")
        assert type(like) is type(td) and is_memmap(like)
        back = load_memmap(tmp_path / "s")
        for t in (like, back):
            assert _structure(t, values=False) == _structure(td, values=False)
            assert all(leaf.count_nonzero().item() == 0 for leaf in _tensors(t))

    @pytest.mark.parametrize("flavour", FLAVOURS)
    def test_shared_memory(self, flavour):
        td = _flavours()[flavour]
        out = memmap(td)
        assert type(out) is type(td) and is_memmap(out)
        assert _structure(out) == _structure(td)

    def test_methods_on_the_containers(self, tmp_path):
        stack = _ragged_stack()
        assert stack.memmap(tmp_path / "l").is_memmap()
        assert isinstance(TensorDict.load_memmap(tmp_path / "l"), LazyStackedTensorDict)
        pair = _pair()
        pair.memmap_(tmp_path / "p")
        assert isinstance(pair.obs, MemoryMappedTensor) and pair.is_memmap()
        assert isinstance(Pair.load_memmap(tmp_path / "p"), Pair)


class TestLazyStacks:
    def test_exclusive_keys_and_ragged_leaves_survive(self, tmp_path):
        memmap(_ragged_stack(stack_dim=1), tmp_path / "s")
        back = load_memmap(tmp_path / "s")
        assert back.stack_dim == 1 and back.batch_size == torch.Size([2, 2])
        assert back.exclusive_keys() == [[], ["only_b", "name"]]
        assert back.get_item_shape("x") == torch.Size([2, 2, -1])
        assert back.tensordicts[1]["x"].shape == (2, 5)
        assert back.tensordicts[1]["name"] == "bee"
        assert back["common", "c"].tolist() == [[0.0, 1.0], [0.0, 1.0]]

    def test_layout_and_metadata(self, tmp_path):
        memmap(_ragged_stack(stack_dim=1), tmp_path / "s", layout="files")
        meta = json.loads((tmp_path / "s" / "meta.json").read_text())
        assert meta["kind"] == "LazyStackedTensorDict"
        assert (meta["stack_dim"], meta["members"], meta["batch_size"]) == (1, 2, [2, 2])
        assert "entries" not in meta
        assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["0", "1", "meta.json"]
        assert (tmp_path / "s" / "1" / "only_b.memmap").exists()

    def test_a_member_loads_alone(self, tmp_path):
        memmap(_ragged_stack(), tmp_path / "s")
        member = load_memmap(tmp_path / "s" / "1")
        assert type(member) is TensorDict and member.batch_size == torch.Size([2])
        assert set(member.keys()) == {"x", "common", "only_b", "name"}

    def test_writes_to_a_writable_load_reach_the_member_files(self, tmp_path):
        memmap(_ragged_stack(), tmp_path / "s")
        back = load_memmap(tmp_path / "s", mode="r+")
        back.tensordicts[1]["x"][0, 4] = 42.0
        assert load_memmap(tmp_path / "s" / "1")["x"][0, 4].item() == 42.0

    def test_a_lazy_stack_of_non_tensor_stacks(self, tmp_path):
        a, b = TensorDict(batch_size=[2]), TensorDict(batch_size=[2])
        a["v"] = NonTensorStack.from_list([1, 2])
        b["v"] = NonTensorStack.from_list([3, 4])
        memmap(lazy_stack([a, b]), tmp_path / "s")
        assert load_memmap(tmp_path / "s")["v"] == [[1, 2], [3, 4]]


class TestLazyStackValidation:
    @pytest.mark.parametrize(
        ("edit", "message"),
        [
            (lambda m: m.update(stack_dim=2), "'stack_dim' 2"),
            (lambda m: m.update(stack_dim="0"), "'stack_dim'"),
            (lambda m: m.update(members=3), "'members' 3"),
            (lambda m: m.update(members=0, batch_size=[0, 2], shape=[0, 2]), "'members' 0"),
        ],
    )
    def test_bad_fields(self, tmp_path, edit, message):
        memmap(_ragged_stack(), tmp_path / "s")
        edit_meta(tmp_path / "s", edit)
        with pytest.raises(MemmapFormatError, match=message) as info:
            load_memmap(tmp_path / "s")
        assert str(tmp_path / "s" / "meta.json") in str(info.value)

    def test_missing_member_folder(self, tmp_path):
        memmap(_ragged_stack(), tmp_path / "s", layout="files")
        (tmp_path / "s" / "1").rename(tmp_path / "elsewhere")
        with pytest.raises(MissingLeafError, match="member folder"):
            load_memmap(tmp_path / "s")

    def test_member_folder_that_is_a_link_out(self, tmp_path):
        memmap(_ragged_stack(), tmp_path / "s", layout="files")
        (tmp_path / "s" / "1").rename(tmp_path / "elsewhere")
        (tmp_path / "s" / "1").symlink_to(tmp_path / "elsewhere")
        with pytest.raises(UnsafePathError, match="leaves the saved folder"):
            load_memmap(tmp_path / "s")

    @pytest.mark.parametrize("num_threads", [0, 3])
    def test_error_in_a_member_names_its_file(self, tmp_path, num_threads):
        memmap(_ragged_stack(), tmp_path / "s", layout="files")
        edit_meta(tmp_path / "s" / "1", lambda m: m.update(batch_size=[5]))
        with pytest.raises(MemmapFormatError, match=r"s/1/meta\.json.*stacked member"):
            load_memmap(tmp_path / "s", num_threads=num_threads)


class TestTensorclasses:
    def test_class_is_recorded_and_restored(self, tmp_path):
        memmap(_pair(), tmp_path / "p")
        meta = json.loads((tmp_path / "p" / "meta.json").read_text())
        assert meta["kind"] == "tensorclass"
        assert meta["class"] == f"{Pair.__module__}:Pair"
        back = load_memmap(tmp_path / "p")
        assert type(back) is Pair and back.label == "cat"
        assert isinstance(back.obs, MemoryMappedTensor) and back.obs.sum().item() == 15.0

    def test_nested_tensorclasses(self, tmp_path):
        memmap(
            TensorDict({"o": Outer(_pair(), torch.ones(3), batch_size=[3])}, [3]), tmp_path / "t"
        )
        back = load_memmap(tmp_path / "t")
        assert type(back.get("o")) is Outer and type(back.get("o").pair) is Pair
        assert back.get("o").pair.label == "cat"
        assert type(load_memmap(tmp_path / "t" / "o" / "pair")) is Pair  # a sub-folder alone

    def test_cls_replaces_the_recorded_class(self, tmp_path):
        memmap(_pair(), tmp_path / "p")
        assert type(load_memmap(tmp_path / "p", cls=Renamed)) is Renamed
        memmap(TensorDict({"obs": torch.zeros(2), "label": "x"}, [2]), tmp_path / "td")
        assert type(load_memmap(tmp_path / "td", cls=Pair)) is Pair

    def test_cls_tensordict_restores_no_class(self, tmp_path):
        memmap(Outer(_pair(), torch.ones(3), batch_size=[3]), tmp_path / "o")
        back = load_memmap(tmp_path / "o", cls=TensorDict)
        assert type(back) is TensorDict and type(back.get("pair")) is TensorDict
        assert back["pair", "label"] == "cat"

    def test_cls_must_fit(self, tmp_path):
        memmap(Outer(_pair(), torch.ones(3), batch_size=[3]), tmp_path / "o")
        with pytest.raises(MemmapFormatError, match=r"\['pair', 'weight'\] are not fields of"):
            load_memmap(tmp_path / "o", cls=Pair)
        with pytest.raises(TypeError, match="tensorclass or TensorDict"):
            load_memmap(tmp_path / "o", cls=dict)
        memmap(_ragged_stack(), tmp_path / "l")
        with pytest.raises(TypeError, match="lazy stack"):
            load_memmap(tmp_path / "l", cls=Pair)

    def test_a_class_defined_in_a_function_loads_where_it_was_saved(self, tmp_path):
        @tensorclass
        class Local:
            v: torch.Tensor

        memmap(Local(torch.ones(2), batch_size=[2]), tmp_path / "l")
        back = load_memmap(tmp_path / "l")
        assert type(back) is Local and back.v.tolist() == [1.0, 1.0]
        assert type(load_memmap(tmp_path / "l", cls=Local)) is Local

    def test_a_class_saved_by_another_process_needs_cls(self, tmp_path):
        script = textwrap.dedent(
            f"""
            import torch
            from td_core import tensorclass

            def save():
                @tensorclass
                class Gone:
                    v: torch.Tensor

                Gone(torch.zeros(2), batch_size=[2]).memmap({str(tmp_path / "g")!r})

            save()
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True)
        with pytest.raises(UnknownClassError, match=r"<locals>\.Gone"):
            load_memmap(tmp_path / "g")
        assert type(load_memmap(tmp_path / "g", cls=TensorDict)) is TensorDict

    def test_fields_that_the_class_lacks(self, tmp_path):
        memmap(_pair(), tmp_path / "p")
        edit_meta(
            tmp_path / "p",
            lambda m: m["entries"].append(
                {
                    "key": "extra",
                    "type": "non_tensor",
                    "batch_size": [3],
                    "stacked": False,
                    "encoding": "json",
                    "value": 1,
                }
            ),
        )
        with pytest.raises(
            MemmapFormatError, match=r"\['extra'\] are not fields of tensorclass Pair"
        ):
            load_memmap(tmp_path / "p")

    @pytest.mark.parametrize(
        "name", [3, "", "NoModule", "mod:", "mod:a b", "mod:os.system()", "a:b:c"]
    )
    def test_malformed_class_names(self, tmp_path, name):
        memmap(_pair(), tmp_path / "p")
        edit_meta(tmp_path / "p", lambda m: m.update({"class": name}))
        with pytest.raises(MemmapFormatError, match="'class'"):
            load_memmap(tmp_path / "p")


class TestClassLookupRunsNoCode:
    def _save_naming(self, tmp_path, name):
        memmap(_pair(), tmp_path / "p")
        edit_meta(tmp_path / "p", lambda m: m.update({"class": name}))
        return tmp_path / "p"

    def test_a_module_that_is_not_imported_is_never_imported(self, tmp_path, monkeypatch):
        marker = tmp_path / "imported"
        (tmp_path / "evil_td_module.py").write_text(
            f"open({str(marker)!r}, 'w').close()\n"
            "from td_core import tensorclass\n"
            "import torch\n"
            "@tensorclass\n"
            "class Pair:\n"
            "    obs: torch.Tensor\n"
            "    label: str\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        folder = self._save_naming(tmp_path, "evil_td_module:Pair")
        with pytest.raises(
            UnknownClassError, match="Import 'evil_td_module' before loading"
        ) as info:
            load_memmap(folder)
        assert not marker.exists() and "evil_td_module" not in sys.modules
        assert isinstance(info.value, LookupError) and isinstance(info.value, RuntimeError)

    def test_module_getattr_is_never_called(self, tmp_path, monkeypatch):
        calls = []
        module = types.ModuleType("td_memmap_test_lazy_module")
        module.__getattr__ = lambda name: calls.append(name) or Pair
        monkeypatch.setitem(sys.modules, module.__name__, module)
        folder = self._save_naming(tmp_path, f"{module.__name__}:Pair")
        with pytest.raises(UnknownClassError):
            load_memmap(folder)
        assert calls == []

    @pytest.mark.parametrize(
        "name", ["os:system", "td_core:TensorDict", "builtins:dict", "os:path.join"]
    )
    def test_objects_that_are_not_tensorclasses_are_refused(self, tmp_path, name):
        with pytest.raises(UnknownClassError, match="not imported"):
            load_memmap(self._save_naming(tmp_path, name))

    def test_the_error_names_the_nested_file(self, tmp_path):
        memmap(
            TensorDict({"ok": torch.zeros(2), "p": Pair(torch.zeros(2), "x", batch_size=[2])}, [2]),
            tmp_path / "t",
            layout="files",  # a meta.json per folder; the packed one: test_packed.py
        )
        edit_meta(tmp_path / "t" / "p", lambda m: m.update({"class": "nowhere:Pair"}))
        with pytest.raises(UnknownClassError, match=r"t/p/meta\.json"):
            load_memmap(tmp_path / "t")


class TestParams:
    def _params(self) -> TensorDictParams:
        return TensorDictParams(TensorDict(a=torch.ones(3), b={"c": torch.zeros(2)}))

    @pytest.mark.parametrize("nested", [False, True])
    @pytest.mark.parametrize("in_folder", [False, True])
    def test_memmap_in_place_is_refused_before_writing(self, tmp_path, nested, in_folder):
        params = self._params()
        td = TensorDict(p=params, x=torch.zeros(1)) if nested else params
        with pytest.raises(RuntimeError, match="Cannot build a memmap TensorDict in-place") as info:
            td.memmap_(tmp_path if in_folder else None)
        assert ("'p'" in str(info.value)) is nested
        assert not os.listdir(tmp_path)
        assert isinstance(params["a"], torch.nn.Parameter) and not params.is_locked

    def test_memmap_copy_works(self, tmp_path):
        out = self._params().memmap(tmp_path)
        assert isinstance(out["b", "c"], MemoryMappedTensor) and out["a"].tolist() == [1.0] * 3


class TestUnbatched:
    @staticmethod
    def _td():
        return TensorDict(
            a=torch.randn(4, 3), n={"u": UnbatchedTensor(torch.randn(7, 11))}, batch_size=[4]
        )

    @pytest.mark.parametrize(
        "how",
        [
            lambda td, path: td.memmap(),
            lambda td, path: td.memmap(path, num_threads=2),
            lambda td, path: td.memmap(path, return_early=True).result(),
            lambda td, path: td.clone().memmap_(path),
            lambda td, path: (td.save(path / "x.tdz"), TensorDict.load(path / "x.tdz"))[1],
            lambda td, path: (td.memmap(path), TensorDict.load_memmap(path))[1],
        ],
    )
    def test_saved_and_loaded_as_an_unbatched_tensor(self, tmp_path, how):
        td = self._td()
        out = how(td, tmp_path)
        u = out.get(("n", "u"))
        assert type(u) is UnbatchedTensor and u.shape == (7, 11)
        assert torch.equal(u, td["n", "u"]) and (out == td).all()
        assert out.is_memmap()

    def test_folder_marks_the_entry_and_writes_reach_the_file(self, tmp_path):
        memmap(self._td(), tmp_path, layout="files")
        meta = json.loads((tmp_path / "n" / "meta.json").read_text())
        (entry,) = meta["entries"]
        assert entry["unbatched"] is True and entry["shape"] == [7, 11]
        loaded = TensorDict.load_memmap(tmp_path)
        loaded["n", "u"][0, 0] = 5.0
        assert TensorDict.load_memmap(tmp_path)["n", "u"][0, 0] == 5.0

    @pytest.mark.parametrize("flag", ["yes", 1, None])
    def test_a_malformed_flag_is_refused(self, tmp_path, flag):
        memmap(self._td(), tmp_path, layout="files")
        path = tmp_path / "n" / "meta.json"
        meta = json.loads(path.read_text())
        meta["entries"][0]["unbatched"] = flag
        path.write_text(json.dumps(meta))
        with pytest.raises(MemmapFormatError, match="unbatched"):
            TensorDict.load_memmap(tmp_path)

    def test_without_the_flag_the_batch_dims_are_still_checked(self, tmp_path):
        memmap(self._td(), tmp_path, layout="files")
        path = tmp_path / "n" / "meta.json"
        meta = json.loads(path.read_text())
        del meta["entries"][0]["unbatched"]
        path.write_text(json.dumps(meta))
        with pytest.raises(MemmapFormatError, match="does not start with batch_size"):
            TensorDict.load_memmap(tmp_path)


def test_tensorclass_over_a_ragged_stack_saves_and_loads_as_the_class_over_a_stack(
    tmp_path,
) -> None:
    ragged = lazy_stack(
        [TensorDict(obs=torch.ones(3), label="a"), TensorDict(obs=torch.zeros(2), label="b")]
    )
    obj = Pair.from_tensordict(ragged)
    saved = memmap(obj, tmp_path / "copy")
    loaded = load_memmap(tmp_path / "copy")
    for out in (saved, loaded):  # the class survives, over a stack; the entry is not stacked
        assert type(out) is Pair and isinstance(out._tensordict, LazyStackedTensorDict)
        assert [type(m) for m in out._tensordict.tensordicts] == [TensorDict, TensorDict]
        assert [t.tolist() for t in out.get("obs", as_list=True)] == [[1.0, 1.0, 1.0], [0.0, 0.0]]
    memmap_(obj, tmp_path / "inplace")  # in place: the members' leaves become mapped
    assert all(isinstance(t, MemoryMappedTensor) for t in obj.get("obs", as_list=True))
