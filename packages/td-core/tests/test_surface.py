"""pin_memory_, record_stream, clear_refs_for_compile_, attrs/TensorAttrs, pack/PackLayout,
from_schema, map_iter, lazy-stack hooks and UnbatchedTensor: behaviour and error messages."""

from __future__ import annotations

import dataclasses
import pickle
import warnings

import pytest
import torch

from td_core import (
    LazyStackedTensorDict,
    PackLayout,
    TensorAttrs,
    TensorDict,
    UnbatchedTensor,
    lazy_stack,
    tensorclass,
)


def _td() -> TensorDict:
    return TensorDict(
        a=torch.zeros(3, 4), b={"c": torch.ones(3, dtype=torch.int64)}, batch_size=[3]
    )


# ---------------------------------------------------------------- memory methods
def test_pin_memory_is_deprecated_and_all_or_nothing_without_cuda() -> None:
    td = _td()
    before = td["a"]
    with pytest.warns(DeprecationWarning, match=r"pin_memory\(inplace=True\)"):
        if torch.cuda.is_available():
            assert td.pin_memory_() is td
            assert td["a"].is_pinned()
            return
        with pytest.raises(RuntimeError, match="accelerator"):
            td.pin_memory_()
    assert td["a"] is before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs CUDA, not available")
def test_pin_memory_inplace_with_threads_on_a_lazy_stack() -> None:
    stack = lazy_stack([_td(), _td()])
    assert stack.pin_memory(num_threads=2, inplace=True) is stack
    assert stack.tensordicts[0]["a"].is_pinned()


def test_record_stream_on_cpu_raises_the_tensor_error_and_records_nothing() -> None:
    td = _td()
    with pytest.raises(RuntimeError):
        td.record_stream(None)
    assert TensorDict().record_stream("any") is not None  # no leaf, nothing to mark


def test_record_stream_refuses_a_second_stream() -> None:
    td = TensorDict()
    td.record_stream("s1")
    assert td.record_stream("s1") is td
    with pytest.raises(RuntimeError, match="already marked with stream 's1'"):
        td.record_stream("s2")
    with pytest.raises(RuntimeError, match="A stream is already associated with this TensorDict"):
        td.record_stream("s2")  # upstream's words, which ported code may match


@pytest.mark.skipif(not torch.cuda.is_available(), reason="record_stream needs CUDA, not available")
def test_record_stream_with_cuda() -> None:
    td = _td().cuda()
    stream = torch.cuda.Stream()
    assert td.record_stream(stream) is td


def test_clear_refs_for_compile_forgets_the_lock_record() -> None:
    td = _td()
    td.lock_()
    assert td.clear_refs_for_compile_() is td
    with td:  # nothing recorded: the block restores the state it started in (locked)
        td.unlock_()
    assert td.is_locked is True


# ---------------------------------------------------------------- attrs
def test_attrs_describe_each_leaf() -> None:
    attrs = _td().attrs()
    assert attrs.batch_size == torch.Size([]) and attrs.device is None
    assert isinstance(attrs["a"], TensorAttrs)
    assert attrs["a"].tgt_shape == torch.Size([3, 4])
    assert attrs["b", "c"].tgt_dtype == torch.int64
    only = _td().attrs(fields=("dtype",))
    assert only["a"].tgt_device is None and only["a"].tgt_shape is None


def test_to_attrs_casts_leaf_by_leaf() -> None:
    src = TensorDict(
        a=torch.zeros(3, 4, dtype=torch.float64),
        b={"c": torch.ones(3, dtype=torch.int32)},
        batch_size=[3],
    )
    out = _td().to(src.attrs())
    assert out["a"].dtype == torch.float64 and out["b", "c"].dtype == torch.int32
    partial = _td().to(TensorDict(a=TensorAttrs.from_tensor(torch.zeros(1, dtype=torch.int8))))
    assert partial["a"].dtype == torch.int8 and partial["b", "c"].dtype == torch.int64


def test_to_attrs_refuses_more_positional_arguments() -> None:
    with pytest.raises(TypeError, match="no other positional argument"):
        _td().to(_td().attrs(), torch.float64)
    with pytest.raises(TypeError, match="does not accept additional positional"):
        _td().to(_td().attrs(), "cpu")


def test_to_attrs_refuses_non_blocking_pin() -> None:
    with pytest.raises(NotImplementedError, match="non_blocking_pin"):
        _td().to(_td().attrs(), non_blocking_pin=True)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("num_threads", [None, 0, 4])
def test_to_takes_non_blocking_pin_and_num_threads(inplace: bool, num_threads: int | None) -> None:
    td = _td()
    td.names = ["n"]
    out = td.to("cpu", non_blocking_pin=False, num_threads=num_threads, inplace=inplace)
    assert (out is td) is inplace
    assert out.device == torch.device("cpu") and out.names == ["n"]
    cast = td.to(torch.float64, non_blocking_pin=True, num_threads=num_threads)  # no device: no pin
    assert cast["a"].dtype == torch.float64


# ---------------------------------------------------------------- pack
def test_pack_layout_round_trip_and_value_semantics() -> None:
    td = TensorDict(
        p=torch.zeros(5), v=torch.ones(5, 3), n={"s": torch.ones(5, 2, 2)}, batch_size=[5]
    )
    flat, layout = td.pack()
    assert flat.shape == (5, 8) and layout.keys == (("n", "s"), "p", "v")
    assert layout == td.pack()[1] and hash(layout) == hash(td.pack()[1])
    assert isinstance(layout, PackLayout) and layout.offsets == (0, 4, 5)
    out = layout.unpack(flat.index_select(0, torch.tensor([0, 2])))
    assert out.batch_size == torch.Size([2]) and out["n", "s"].shape == (2, 2, 2)
    assert layout.unpack(flat)["v"].data_ptr() == flat[:, 5:].data_ptr()
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.dim = 0  # type: ignore[misc]


def test_pack_a_tensorclass_comes_back_as_one() -> None:
    @tensorclass
    class C:
        x: torch.Tensor

    flat, layout = C(x=torch.zeros(3, 2), batch_size=[3]).pack(0)
    assert flat.shape == (2, 3) and type(layout.unpack(flat)) is C


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: _td().pack(3), IndexError, "dim 3 is out of range"),
        (lambda: _td().pack(), TypeError, "one dtype"),
        (lambda: TensorDict(a=torch.zeros(2), s="x", batch_size=[2]).pack(), TypeError, "'s'"),
        (
            lambda: TensorDict(a=torch.zeros(2), batch_size=[2]).pack(
                layout=TensorDict(b=torch.zeros(2), batch_size=[2]).pack()[1]
            ),
            KeyError,
            "differ from the keys",
        ),
        (
            lambda: TensorDict(a=torch.zeros(2), batch_size=[2]).pack(
                layout=TensorDict(a=torch.zeros(2, 2), batch_size=[2]).pack()[1]
            ),
            ValueError,
            "feature shapes",
        ),
        (
            lambda: TensorDict(a=torch.zeros(2), batch_size=[2]).pack(
                0, layout=PackLayout(("a",), ((),))
            ),
            ValueError,
            "along dim -1",
        ),
        (lambda: PackLayout(("a",), ((2,),)).unpack(torch.zeros(3, 3)), ValueError, "expected 2"),
        (
            lambda: lazy_stack([TensorDict(a=torch.zeros(1)), TensorDict(b=torch.zeros(1))]).pack(),
            RuntimeError,
            "different keys",
        ),
    ],
)
def test_pack_errors(build, error, match) -> None:
    with pytest.raises(error, match=match):
        build()


# ---------------------------------------------------------------- from_schema
def test_from_schema_storages(tmp_path) -> None:
    schema = {"obs": ([2], torch.uint8), ("n", "r"): ([], torch.float32)}
    td = TensorDict.from_schema(schema, batch_size=[4])
    assert td["obs"].shape == (4, 2) and td["n", "r"].dtype == torch.float32
    assert (td["obs"] == 0).all()
    assert TensorDict.from_schema(schema, storage="shared").is_shared()
    pytest.importorskip("td_memmap")
    mm = TensorDict.from_schema(schema, batch_size=[4], storage="memmap", prefix=tmp_path)
    assert mm.is_memmap() and mm["obs"].shape == (4, 2)


@pytest.mark.parametrize(
    ("storage", "error", "match"),
    [
        ("nope", ValueError, "Unknown storage backend 'nope'"),
    ],
)
def test_from_schema_bad_storage(storage, error, match) -> None:
    with pytest.raises(error, match=match):
        TensorDict.from_schema({"a": ([1], torch.float32)}, storage=storage)


def test_from_schema_bad_entry() -> None:
    with pytest.raises(TypeError, match="'a' must be a pair"):
        TensorDict.from_schema({"a": torch.float32})  # type: ignore[dict-item]


# ---------------------------------------------------------------- map_iter
def _plus_one(td):
    return td.set("y", td["x"] + 1)


def test_map_iter_yields_each_chunk_in_order() -> None:
    td = TensorDict(x=torch.arange(7.0), batch_size=[7])
    out = list(td.map_iter(_plus_one, num_workers=2, chunksize=3, mp_start_method="fork"))
    assert [o.batch_size[0] for o in out] == [3, 3, 1]
    assert torch.cat([o["y"] for o in out]).tolist() == [float(i + 1) for i in range(7)]


def test_map_iter_checks_arguments_before_starting() -> None:
    td = TensorDict(x=torch.arange(4.0), batch_size=[4])
    with pytest.raises(RuntimeError, match="index_with_generator"):
        td.map_iter(_plus_one, shuffle=True, index_with_generator=False)
    with pytest.raises(ValueError, match="not both"):
        td.map_iter(_plus_one, chunksize=1, num_chunks=2)
    with pytest.raises(ValueError, match="num_workers"):
        td.map_iter(_plus_one, num_workers=0)


# ---------------------------------------------------------------- lazy hooks
def test_lazy_stack_hooks_are_deprecated_and_hook_out_is_applied() -> None:
    stack = lazy_stack([_td(), _td()])
    with pytest.warns(DeprecationWarning, match="hook_out"):
        assert stack.hook_out is None
    with pytest.warns(DeprecationWarning):
        stack.hook_out = lambda t: t + 10
    assert (stack["a"] == 10).all()
    assert (stack["b"]["c"] == 11).all()  # handed to the sub-stack
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stack.tensordicts[0]["a"].sum() == 0  # members unchanged
    with pytest.warns(DeprecationWarning, match="hook_in"):
        stack.hook_in = abs
    with pytest.warns(DeprecationWarning):
        assert stack.hook_in is abs
    with pytest.warns(DeprecationWarning):
        LazyStackedTensorDict(_td(), _td(), hook_out=abs)


# ---------------------------------------------------------------- UnbatchedTensor
def _with_table() -> TensorDict:
    return TensorDict(a=torch.zeros(3, 4), table=UnbatchedTensor(torch.arange(5.0)), batch_size=[3])


@pytest.mark.parametrize(
    "op",
    [
        lambda td: td[0],
        lambda td: td[1:],
        lambda td: td[torch.tensor([True, False, True])],
        lambda td: td.reshape(3, 1),
        lambda td: td.unsqueeze(0).expand(2, 3),
        lambda td: td.unbind(0)[2],
        lambda td: td.split(1)[0],
        lambda td: torch.stack([td, td], 1),
        lambda td: torch.cat([td, td]),
        lambda td: lazy_stack([td, td]),
        lambda td: td.sum(),
        lambda td: td.gather(0, torch.tensor([0, 2])),
    ],
)
def test_unbatched_entries_pass_batch_ops_unchanged(op) -> None:
    td = _with_table()
    out = op(td)
    table = out["table"]
    assert isinstance(table, UnbatchedTensor) and table.shape == (5,)
    assert table.data_ptr() == td["table"].data_ptr()
    assert table.batch_size == out.batch_size


def test_unbatched_leaf_ops_apply_and_keep_the_class() -> None:
    td = _with_table()
    for out in (td * 2, td.clone(), td.to(torch.float64), td.apply(lambda t: t + 1)):
        assert isinstance(out["table"], UnbatchedTensor)
        assert out["table"].batch_size == torch.Size([3])
    assert (td * 2)["table"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_unbatched_tensor_survives_pickle_and_auto_batch_size() -> None:
    td = pickle.loads(pickle.dumps(_with_table()))
    assert isinstance(td["table"], UnbatchedTensor) and td["table"].batch_size == (3,)
    auto = TensorDict(a=torch.zeros(3, 4), table=UnbatchedTensor(torch.zeros(7)), batch_size=None)
    assert auto.batch_size == torch.Size([3, 4])


def test_a_plain_tensor_still_needs_the_batch_dims() -> None:
    td = _with_table()
    with pytest.raises(RuntimeError, match="'table'"):
        td.set("table", torch.ones(2))
    assert isinstance(td["table"], UnbatchedTensor)


# ---------------------------------------------------------------- pipes
class _ListPipe:
    """A stand-in for upstream's UCXX `TensorDictPipe`: awaitable asend/arecv."""

    def __init__(self) -> None:
        self.items: list = []

    async def asend(self, td) -> None:
        self.items.append(td.clone())

    async def arecv(self, td, device=None):
        return self.items.pop(0).to(device) if device is not None else self.items.pop(0)


def test_asend_arecv_go_through_the_pipe() -> None:
    import asyncio

    async def run():
        pipe = _ListPipe()
        await _td().asend(pipe)
        return await TensorDict().arecv(pipe)

    out = asyncio.run(run())
    assert out.batch_size == torch.Size([3]) and out["b", "c"].dtype == torch.int64


@pytest.mark.parametrize("method", ["asend", "arecv"])
def test_asend_arecv_refuse_what_is_not_a_pipe(method) -> None:
    import asyncio

    with pytest.raises(TypeError, match=f"{method}: int is not a pipe"):
        asyncio.run(getattr(TensorDict(), method)(3))
