"""The ContextVar switches, print options and small predicates, against upstream's."""

import contextvars
import threading
import warnings

import pytest
import torch

import td_core as td
from td_core import lazy_stack_enabled, set_lazy_stack
from td_core._core import flags
from td_core._core.flags import SwitchVar
from td_core._ops import structure

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tensordict as up


def test_lazy_legacy_turns_lazy_stacking_on_and_lazy_stack_alone_does_not_make_views():
    items = [td.TensorDict(a=torch.zeros(2)), td.TensorDict(a=torch.ones(2))]
    assert td.lazy_legacy() is False and td.lazy_stack_enabled() is False
    with td.set_lazy_legacy(True):
        assert td.lazy_legacy() and td.lazy_stack_enabled()
        assert isinstance(torch.stack(items), td.LazyStackedTensorDict)
        with td.set_lazy_legacy(False):  # both switches come back on exit
            assert not td.lazy_legacy() and not td.lazy_stack_enabled()
        assert td.lazy_legacy() and td.lazy_stack_enabled()
    with td.set_lazy_stack(True):  # td's stacking switch: shape ops stay dense
        assert td.lazy_stack_enabled() and not td.lazy_legacy()
        assert type(items[0].unsqueeze(0)) is td.TensorDict
    assert type(torch.stack(items)) is td.TensorDict

    @td.set_lazy_legacy(True)
    def stacked():
        return torch.stack(items)

    assert isinstance(stacked(), td.LazyStackedTensorDict)
    assert td.lazy_legacy() is False


@pytest.mark.parametrize(
    "setter, getter, default",
    [
        ("set_lazy_legacy", "lazy_legacy", False),
        ("set_list_to_stack", "list_to_stack", True),
        ("set_capture_non_tensor_stack", "capture_non_tensor_stack", False),
    ],
)
def test_switch_defaults_match_upstream_and_nest(setter, getter, default):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert getattr(up, getter)() is default
    get = getattr(td, getter)
    assert get() is default
    with getattr(td, setter)(not default):
        assert get() is (not default)
        with getattr(td, setter)(default):
            assert get() is default
        assert get() is (not default)
    assert get() is default


@pytest.mark.parametrize(
    "setter, getter",
    [
        ("set_lazy_legacy", "lazy_legacy"),
        ("set_list_to_stack", "list_to_stack"),
        ("set_capture_non_tensor_stack", "capture_non_tensor_stack"),
    ],
)
def test_switch_allow_none_tells_an_unset_switch(setter, getter):
    # as upstream: None until the switch is set, in a block or by `.set()`
    get = getattr(td, getter)
    assert get(allow_none=True) is None
    with getattr(td, setter)(False):
        assert get(allow_none=True) is False
    assert get(allow_none=True) is None

    def body():
        getattr(td, setter)(True).set()
        return get(allow_none=True)

    assert contextvars.copy_context().run(body) is True
    assert get(allow_none=True) is None


def test_switch_is_per_thread():
    seen = []
    with td.set_capture_non_tensor_stack(True):
        thread = threading.Thread(target=lambda: seen.append(td.capture_non_tensor_stack()))
        thread.start()
        thread.join()
    assert seen == [False]


def test_set_applies_for_the_context():
    def body():
        td.set_list_to_stack(False).set()
        return td.list_to_stack()

    assert contextvars.copy_context().run(body) is False
    assert td.list_to_stack() is True


def test_capture_non_tensor_stack_collapses_equal_values():
    out = td.stack([td.TensorDict(s="a"), td.TensorDict(s="a")]).get("s")
    assert isinstance(out, td.NonTensorStack)
    with td.set_capture_non_tensor_stack(True):
        out = td.stack([td.TensorDict(s="a"), td.TensorDict(s="a")]).get("s")
        assert isinstance(out, td.NonTensorData) and out.batch_size == (2,)
        out = td.stack([td.TensorDict(s="a"), td.TensorDict(s="b")]).get("s")
        assert isinstance(out, td.NonTensorStack)


def test_get_defaults_to_none_switch():
    assert td.get_defaults_to_none() is True  # as upstream since v0.7
    with td.set_get_defaults_to_none(False):
        assert td.get_defaults_to_none() is False
        with td.set_get_defaults_to_none(None):  # None counts as False, as upstream
            assert td.get_defaults_to_none() is False
    assert td.get_defaults_to_none() is True


# ------------------------------------------------------------- print options
def test_printoptions_match_upstream_detailed_form():
    def make(m):
        return m.TensorDict(
            a=torch.zeros(3, 4),
            b=m.TensorDict(c=torch.ones(3, 2, dtype=torch.long), batch_size=[3]),
            batch_size=[3],
        )

    with up.set_printoptions(compact=False, verbose=False):
        theirs = repr(make(up))
    with td.set_printoptions(verbose=False):
        ours = repr(make(td))
    assert ours == theirs
    with up.set_printoptions(compact=False, show_dtype=False, show_is_shared=False):
        theirs = repr(make(up))
    with td.set_printoptions(show_dtype=False, show_is_shared=False):
        ours = repr(make(td))
    assert ours == theirs


def test_printoptions_scoped_decorator_and_errors():
    assert td.get_printoptions()["show_dtype"] is True
    assert set(td.get_printoptions()) == set(up.get_printoptions())

    @td.set_printoptions(show_dtype=False)
    def options():
        return td.get_printoptions()["show_dtype"]

    assert options() is False and td.get_printoptions()["show_dtype"] is True
    with pytest.raises(TypeError, match="Unknown printoptions"):
        td.set_printoptions(nope=True)
    td.get_printoptions()["show_dtype"] = False  # a copy: no effect
    assert td.get_printoptions()["show_dtype"] is True


def test_sort_keys_none_keeps_insertion_order():
    x = td.TensorDict(b=torch.zeros(1), a=torch.zeros(1))
    with td.set_printoptions(sort_keys=None):
        text = repr(x)
    assert text.index("b:") < text.index("a:")


# ---------------------------------------------------------------- predicates
@pytest.mark.parametrize("name", ["is_bool", "is_floating", "is_inexact", "is_integer"])
@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.uint8, torch.int64, torch.float16, torch.float32, torch.complex64]
)
def test_dtype_predicates_match_upstream(name, dtype):
    t = torch.zeros(2, dtype=dtype)
    assert getattr(td, name)(t) == getattr(up, name)(t)
    assert getattr(td, name)("key", t) == getattr(up, name)("key", t)


@pytest.mark.parametrize("key", ["a", ("a", ("b", ("c",))), ("a", 1), 1, (), (("a",),)])
def test_unravel_key_to_tuple_matches_upstream(key):
    assert td.unravel_key_to_tuple(key) == up.unravel_key_to_tuple(key)


def test_key_separator():
    assert td.KEY_SEPARATOR == up.KEY_SEPARATOR


def test_get_defaults_to_none_makes_get_return_none():
    data = td.TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, [2])
    lazy = td.lazy_stack([data, data.clone()], 0)
    for container in (data, lazy, data[0]):
        assert container.get("missing") is None  # the default, as upstream since v0.7
        assert container.get(("n", "missing")) is None
        assert container.get(("missing", "deeper")) is None
        assert container.get("missing", 3) == 3  # an explicit default still wins
        with pytest.raises(KeyError, match="missing"):  # td[key] always raises
            container["missing"]
        with td.set_get_defaults_to_none(False):
            with pytest.raises(KeyError, match="missing"):
                container.get("missing")
            with pytest.raises(KeyError, match="missing"):
                container.get(("n", "missing"))
            assert container.get("missing", 3) == 3


def test_strtobool_reads_flag_strings():
    from td_core import strtobool

    assert [strtobool(v) for v in ("y", "YES", "t", "True", "on", "1")] == [1] * 6
    assert [strtobool(v) for v in ("n", "No", "f", "FALSE", "off", "0")] == [0] * 6
    with pytest.raises(ValueError, match="invalid truth value 'maybe'"):
        strtobool("maybe")


def test_switch_var_keeps_the_value_compiled_code_reads_in_step() -> None:
    """Before torch 2.15, code being compiled reads `SwitchVar._last` (torch.compile cannot
    trace a ContextVar there): it follows every set and reset, blocks included."""
    var = SwitchVar("td_test_switch", False)
    token = var.set(True)
    assert var.get() is True and var._last is True
    var.reset(token)
    assert var.get() is False and var._last is False
    with set_lazy_stack(True):
        assert flags._LAZY._last is True and lazy_stack_enabled()
    assert flags._LAZY._last is False


def test_switch_var_read_while_compiling_is_the_last_value_set(monkeypatch) -> None:
    var = SwitchVar("td_test_switch", "eager")
    var.set("set")
    monkeypatch.setattr(flags, "is_compiling", lambda: True)
    assert var._get() == "set"  # the attribute torch.compile guards on
    monkeypatch.setattr(flags, "is_compiling", lambda: False)
    assert var._get() == "set"


def test_a_switch_read_inside_a_compiled_function_follows_the_switch() -> None:
    @torch.compile(fullgraph=True, backend="eager")
    def stacked(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if lazy_stack_enabled() else x - 1

    x = torch.zeros(2)
    assert stacked(x).tolist() == [-1.0, -1.0]
    with set_lazy_stack(True):
        assert stacked(x).tolist() == [1.0, 1.0]


def test_exclude_takes_the_path_older_torch_compile_traces(monkeypatch) -> None:
    """Before torch 2.15, code being compiled copies the entries with `dict(items)` (that
    torch.compile cannot trace a dict view's `mapping`): the same result."""
    tensordict = td.TensorDict(a=torch.zeros(2), b=torch.ones(2), c={"d": torch.ones(2)})
    monkeypatch.setattr(structure, "OLD_DYNAMO", True)
    monkeypatch.setattr(structure, "is_compiling", lambda: True)
    out = tensordict.exclude("b")
    assert set(out.keys()) == {"a", "c"} and out["c", "d"] is tensordict["c", "d"]
