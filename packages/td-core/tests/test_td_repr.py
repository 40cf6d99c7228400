"""repr: the seeds' format, one line per field."""

import textwrap

import torch

from td_core import TensorDict


def expected(text):
    return textwrap.dedent(text).strip("\n")


def one_leaf_repr(
    shape: str, *, device: str = "cpu", td_device: str = "None", shared: bool = False
) -> str:
    """The repr of a TensorDict whose one float32 leaf `x` has the batch shape `[shape]`."""
    return expected(
        f"""
        TensorDict(
            fields={{
                x: Tensor(shape=torch.Size([{shape}]), device={device}, dtype=torch.float32, is_shared={shared})}},
            batch_size=torch.Size([{shape}]),
            device={td_device},
            is_shared={shared})
        """
    )


def test_repr_nested_matches_seed_format():
    td = TensorDict({"a": torch.randn(10, 3), "b": {"c": torch.randn(10, 2)}}, batch_size=[10])
    assert repr(td) == expected(
        """
        TensorDict(
            fields={
                a: Tensor(shape=torch.Size([10, 3]), device=cpu, dtype=torch.float32, is_shared=False),
                b: TensorDict(
                    fields={
                        c: Tensor(shape=torch.Size([10, 2]), device=cpu, dtype=torch.float32, is_shared=False)},
                    batch_size=torch.Size([10]),
                    device=None,
                    is_shared=False)},
            batch_size=torch.Size([10]),
            device=None,
            is_shared=False)
        """
    )


def test_str_is_repr():
    td = TensorDict({"a": torch.zeros(2)}, [2])
    assert str(td) == repr(td)


def test_repr_dtypes_and_multi_dim_batch():
    td = TensorDict(
        {"i": torch.zeros(2, 3, dtype=torch.int64), "m": torch.zeros(2, 3, 4, dtype=torch.bool)},
        batch_size=[2, 3],
    )
    assert repr(td) == expected(
        """
        TensorDict(
            fields={
                i: Tensor(shape=torch.Size([2, 3]), device=cpu, dtype=torch.int64, is_shared=False),
                m: Tensor(shape=torch.Size([2, 3, 4]), device=cpu, dtype=torch.bool, is_shared=False)},
            batch_size=torch.Size([2, 3]),
            device=None,
            is_shared=False)
        """
    )


def test_repr_with_device():
    td = TensorDict({"x": torch.zeros(4)}, [4], device="meta")
    assert repr(td) == one_leaf_repr("4", device="meta", td_device="meta")


def test_repr_cpu_device():
    td = TensorDict({"x": torch.zeros(4)}, [4], device="cpu")
    lines = repr(td).splitlines()
    assert "    device=cpu," in lines


def test_repr_shared():
    td = TensorDict({"x": torch.zeros(4)}, [4]).share_memory_()
    assert repr(td) == one_leaf_repr("4", shared=True)


def test_repr_scalar_batch():
    td = TensorDict({"x": torch.zeros(())}, [])
    assert repr(td) == one_leaf_repr("")


def test_repr_one_line_per_field():
    td = TensorDict({f"k{i}": torch.zeros(3, i + 1) for i in range(5)}, [3])
    lines = repr(td).splitlines()
    field_lines = [line for line in lines if line.lstrip().startswith("k")]
    assert len(field_lines) == 5
    for i, line in enumerate(field_lines):
        assert line.startswith(f"        k{i}: Tensor(shape=torch.Size([3, {i + 1}])")


def test_repr_empty_tensordict():
    text = repr(TensorDict({}, [2]))
    assert text.startswith("TensorDict(")
    assert "batch_size=torch.Size([2])" in text
    assert "device=None" in text
    assert "Tensor(" not in text


def test_repr_non_tensor_field_shows_value():
    td = TensorDict({"x": torch.zeros(2)}, [2])
    td["s"] = "hello"
    lines = repr(td).splitlines()
    field = [line for line in lines if line.lstrip().startswith("s:")]
    assert len(field) == 1
    assert "hello" in field[0]


def test_repr_nested_indentation():
    td = TensorDict({"outer": {"inner": {"leaf": torch.zeros(1)}}}, [1])
    lines = repr(td).splitlines()
    assert "        outer: TensorDict(" in lines
    assert "                inner: TensorDict(" in lines
    leaf = [line for line in lines if "leaf:" in line]
    assert len(leaf) == 1
    assert leaf[0].startswith(" " * 24 + "leaf: Tensor(shape=torch.Size([1])")
