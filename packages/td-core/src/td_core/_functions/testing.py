"""`assert_close`: compare two TensorDicts leaf by leaf, for tests."""

from __future__ import annotations

from typing import Any

import torch

from td_core._core.traverse import is_nt, is_td

__all__ = ["assert_close", "assert_allclose_td"]

Tensor = torch.Tensor


def assert_close(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
    intersection: bool = False,
    msg: str = "",
    prefix: Any = (),
) -> bool:
    """Assert that two TensorDicts have the same keys and close tensor values.

    Each pair of tensors goes through `torch.testing.assert_close` (which
    also checks dtype, shape and device); sub-TensorDicts are compared entry
    by entry; non-tensor leaves are not compared. Works on every kind (lazy
    stacks, tensorclasses). `assert_allclose_td` is the same function.

    Args:
        actual: the container to check.
        expected: the container holding the expected values.
        rtol: relative tolerance (`None`: torch's default for the dtype).
        atol: absolute tolerance (`None`: torch's default for the dtype).
        equal_nan: whether two NaNs compare equal.
        intersection: compare only the keys both hold, instead of raising
            `KeyError` when the key sets differ.
        msg: appended to the error message.
        prefix: a key prepended to the keys named in error messages.

    Returns:
        `True` when the check passes.

    Raises:
        TypeError: if an input is not a TensorDict-like container.
        KeyError: if the keys differ and `intersection` is False.
        AssertionError: if two leaves differ; the message names the key and
            the root mean squared error.

    Examples:
        >>> import torch
        >>> from td_core import TensorDict, assert_close
        >>> a = TensorDict(x=torch.zeros(3))
        >>> assert_close(a, a.clone())
        True
    """
    if not is_td(actual) or not is_td(expected):
        raise TypeError(
            f"assert_close inputs must be TensorDicts (or tensorclasses), got "
            f"{type(actual).__name__} and {type(expected).__name__}"
        )
    prefix = (prefix,) if isinstance(prefix, str) else tuple(prefix)
    opts: dict[str, Any] = {
        "rtol": rtol,
        "atol": atol,
        "equal_nan": equal_nan,
        "intersection": intersection,
    }
    # a tensorclass compares as the TensorDict it holds (a lazy stack, member by member)
    actual, expected = _held(actual), _held(expected)
    members = _members(actual, expected)
    if members is not None:  # two lazy stacks: member by member (ragged members cannot stack)
        for sub1, sub2 in members:
            assert_close(sub1, sub2, msg=msg, prefix=prefix, **opts)
        return True
    keys1, keys2 = set(actual._keys_str()), set(expected._keys_str())
    if keys1 != keys2:
        if not intersection:
            raise KeyError(
                f"keys in tensordicts mismatch at {prefix or 'the root'!r}: the first has "
                f"{sorted(keys1 - keys2)} that the second lacks, the second has "
                f"{sorted(keys2 - keys1)} that the first lacks"
            )
        keys1 &= keys2
    for key in sorted(keys1):
        value1, value2 = actual._get_str(key), expected._get_str(key)
        full = (*prefix, key)
        if is_nt(value1):
            continue
        if is_td(value1):
            assert_close(value1, value2, msg=msg, prefix=full, **opts)
            continue
        if not isinstance(value1, Tensor):
            continue
        _compare(value1, value2, full, rtol, atol, equal_nan, msg)
    return True


def _held(td: Any) -> Any:
    return td._tensordict if getattr(type(td), "_td_tensorclass", False) else td


def _members(actual: Any, expected: Any) -> list[tuple[Any, Any]] | None:
    m1, m2 = getattr(actual, "tensordicts", None), getattr(expected, "tensordicts", None)
    if m1 is None or m2 is None or actual.batch_size != expected.batch_size:
        return None
    if actual.stack_dim != expected.stack_dim:
        m2 = expected.unbind(actual.stack_dim)
    return list(zip(m1, m2))


def _compare(
    a: Tensor,
    b: Any,
    key: tuple[str, ...],
    rtol: float | None,
    atol: float | None,
    equal_nan: bool,
    msg: str,
) -> None:
    if not isinstance(b, Tensor):
        raise AssertionError(
            f"key {key} does not match: a tensor in the first, a {type(b).__name__} in the second"
        )
    if a.is_nested:
        a, b = a.values(), b.values()
    try:
        diff = (a.to(torch.float) - b.to(torch.float)).pow(2).sum()
    except RuntimeError as err:
        raise RuntimeError(
            f"failed to compare key {key}: shapes {list(a.shape)} and {list(b.shape)}: {err}"
        ) from err
    rmse = diff.div(max(a.numel(), 1)).sqrt().item()
    local = f"key {key} does not match, got mse = {rmse:4.4f}"
    text = ",\t".join([local, msg]) if msg else local
    torch.testing.assert_close(
        a,
        b,
        rtol=rtol,
        atol=atol,
        equal_nan=equal_nan,
        msg=lambda torch_msg: f"{text}\n{torch_msg}",
    )


assert_allclose_td = assert_close
