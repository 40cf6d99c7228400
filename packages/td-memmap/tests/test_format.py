import json
import math
import os

import pytest
import torch

from td_core import NonTensorData, TensorDict
from td_memmap import encode_key, load, save

KEYS = [
    "weight",
    "",
    ".",
    "..",
    "../evil",
    "a/b",
    "\x00",
    "%2E",
    "with space",
    "CON",
    "nul",
    "é",
    "\udc80",  # a lone surrogate: not valid UTF-8
    "x" * 500,
    "meta",
    "meta.json",
]


class TestKeyEncoding:
    @pytest.mark.parametrize("key", KEYS)
    def test_encoded_name_is_one_safe_component(self, key):
        name = encode_key(key)
        assert name and name not in (".", "..")
        assert "/" not in name and "\\" not in name and "\x00" not in name and "." not in name
        assert len(name) <= 120
        assert name.upper() not in {"CON", "NUL", "PRN", "AUX"}

    def test_encoding_is_injective_on_distinct_keys(self):
        names = [encode_key(k) for k in KEYS]
        assert len(set(names)) == len(names)
        assert encode_key("a.b") != encode_key("a%2Eb")

    def test_plain_names_are_kept(self):
        assert encode_key("layer_0-weight") == "layer_0-weight"
        assert encode_key("../evil") == "%2E%2E%2Fevil"

    def test_every_key_round_trips_and_stays_in_the_folder(self, tmp_path):
        prefix = tmp_path / "save"
        td = TensorDict({k: torch.full((2,), float(i)) for i, k in enumerate(KEYS)}, batch_size=[2])
        td["A"] = torch.zeros(2)
        # differs from "A" only by case: distinct files on case-insensitive systems too
        td["a"] = torch.ones(2)
        save(td, prefix, layout="files")  # the file names of the files layout (version 1)
        assert sorted(os.listdir(tmp_path)) == ["save"]
        names = os.listdir(prefix)
        assert len({n.lower() for n in names}) == len(names) == len(KEYS) + 3
        back = load(prefix)
        assert list(back.keys()) == list(td.keys())
        for k in td.keys():
            assert torch.equal(back[k], td[k]), k


VALUES = [
    None,
    True,
    0,
    -(2**70),
    1.5,
    math.inf,
    -math.inf,
    "text",
    "",
    b"\x00\xff",
    [1, "a", None],
    (1, (2, 3)),
    {"a": 1, "b": [1, 2]},
    {1: "one", (2, 3): "tuple key"},
    {"$td": "not a tag"},
    1 + 2j,
    [complex(-0.5, 3.0)],
    [],
    {},
    (),
]


class TestNonTensorJSON:
    @pytest.mark.parametrize("value", VALUES, ids=repr)
    def test_value_round_trips_with_its_type(self, tmp_path, value):
        td = TensorDict(batch_size=[])
        td["v"] = NonTensorData(value)  # scalars and lists would otherwise become tensors
        save(td, tmp_path / "s")
        back = load(tmp_path / "s")["v"]
        assert back == value and type(back) is type(value)

    def test_nan_round_trips(self, tmp_path):
        td = TensorDict(batch_size=[])
        td["v"] = NonTensorData([math.nan])
        save(td, tmp_path / "s")
        assert math.isnan(load(tmp_path / "s")["v"][0])

    def test_non_finite_complex_round_trips(self, tmp_path):
        td = TensorDict(batch_size=[])
        td["v"] = NonTensorData(complex(math.nan, -math.inf))
        save(td, tmp_path / "s")
        back = load(tmp_path / "s")["v"]
        assert type(back) is complex and math.isnan(back.real) and back.imag == -math.inf

    def test_metadata_is_strict_json(self, tmp_path):
        td = TensorDict(batch_size=[])
        td["v"] = NonTensorData([math.nan, math.inf])
        save(td, tmp_path / "s")
        text = (tmp_path / "s" / "meta.json").read_text()

        def refuse(name):
            raise AssertionError(f"non-standard constant {name}")

        json.loads(text, parse_constant=refuse)
        assert text.isascii()


class TestShapeField:
    def test_every_folder_records_its_batch_size_as_shape_too(self, tmp_path):
        from td_core import lazy_stack

        td = TensorDict(a=torch.zeros(3, 2), n={"b": torch.ones(3, 2, 4)}, batch_size=[3, 2])
        save(td, tmp_path / "td", layout="files")  # a meta.json per folder (version 1)
        for folder, batch in [("td", [3, 2]), ("td/n", [3, 2])]:
            meta = json.loads((tmp_path / folder / "meta.json").read_text())
            assert meta["shape"] == meta["batch_size"] == batch
        save(lazy_stack([td[0], td[1]]), tmp_path / "stack", layout="files")
        member = json.loads((tmp_path / "stack" / "0" / "meta.json").read_text())
        assert member["shape"] == [2]

    def test_a_shape_that_differs_from_batch_size_is_refused(self, tmp_path):
        from td_memmap import MemmapFormatError

        save(TensorDict(a=torch.zeros(3)), tmp_path)  # batch_size []
        meta = json.loads((tmp_path / "meta.json").read_text())
        meta["shape"] = [3]
        (tmp_path / "meta.json").write_text(json.dumps(meta))
        with pytest.raises(
            MemmapFormatError, match=r"'shape' \[3\] differs from 'batch_size' \[\]"
        ):
            load(tmp_path)
        del meta["shape"]  # older saves have none
        (tmp_path / "meta.json").write_text(json.dumps(meta))
        assert load(tmp_path)["a"].shape == (3,)
