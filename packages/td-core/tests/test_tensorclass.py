import inspect
import pickle

import pytest
import torch

from td_core import TensorDict, is_tensorclass, lazy_stack, tensorclass


@tensorclass
class MyData:
    image: torch.Tensor
    mask: torch.Tensor
    label: torch.Tensor

    def mask_image(self):
        return self.image[self.mask.expand_as(self.image)].view(*self.batch_size, -1)

    def select_label(self, label):
        return self[self.label == label]


@tensorclass
class Episode:
    obs: torch.Tensor
    name: str
    inner: MyData = None


def seed_data():
    torch.manual_seed(0)
    images = torch.randn(100, 3, 64, 64)
    label = torch.randint(10, (100,))
    mask = torch.zeros(1, 64, 64, dtype=torch.bool).bernoulli_().expand(100, 1, 64, 64)
    return MyData(images, mask, label=label, batch_size=[100]), images, mask, label


def test_readme_seed():
    data, _, mask, label = seed_data()
    picked = data.select_label(1)
    n = int((label == 1).sum())
    assert isinstance(picked, MyData) and picked.batch_size == torch.Size([n])
    text = repr(picked)
    assert text.startswith(f"MyData(\n    image=Tensor(shape=torch.Size([{n}, 3, 64, 64])")
    assert "label=Tensor" in text and "mask=Tensor" in text and text.endswith("is_shared=False)")
    assert data.mask_image().shape == torch.Size([100, int(mask[0].sum()) * 3])
    reshaped = data.reshape(10, 10)
    assert isinstance(reshaped, MyData) and reshaped.image.shape == torch.Size([10, 10, 3, 64, 64])


def test_fields_and_constructor():
    data, images, _, label = seed_data()
    assert data.image is images and data.label is label
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'label'"):
        MyData(images, images, batch_size=[100])
    with pytest.raises(TypeError, match="missing 2 required positional arguments: 'mask' and"):
        MyData(images, batch_size=[100])
    with pytest.raises(TypeError, match="'colour'"):
        MyData(images, images, label, colour=1, batch_size=[100])
    with pytest.raises(RuntimeError, match="'label'"):
        MyData(images, images, torch.zeros(7), batch_size=[100])
    data.label = torch.zeros(100, dtype=torch.long)
    assert (data.label == 0).all()
    assert is_tensorclass(data) and is_tensorclass(MyData) and not is_tensorclass(TensorDict())


def test_constructor_stores_fields_in_order_as_set_would():
    # tensors go straight into the entries; other values through set(): one order, one check
    x, y = torch.zeros(3, 2), torch.ones(3)
    ep = Episode(x, "walk", MyData(y, y, y, batch_size=[3]), batch_size=[3])
    assert list(ep._tensordict.keys()) == ["obs", "name", "inner"]
    assert ep.obs is x and ep.name == "walk" and ep.inner.label is y
    scalar = Episode(torch.tensor(1.0), "s")  # no batch dims, no device: any tensor as it is
    assert scalar.batch_size == torch.Size([]) and scalar.obs.shape == torch.Size([])
    on_meta = Episode(x, "m", batch_size=[3], device="meta")  # moved to the device, as set does
    assert on_meta.obs.device.type == "meta" and x.device.type == "cpu"
    with pytest.raises(RuntimeError, match="'obs'"):
        Episode(torch.zeros(4), "bad", batch_size=[3])
    assert Episode(x, "check", batch_size=[3]).obs is x


def test_setting_a_tensor_field_checks_it_as_set_does():
    x = torch.zeros(3, 2)
    ep = Episode(x, "walk", batch_size=[3])
    ep.obs = torch.ones(3, 5)  # a new tensor of the right batch replaces the old one
    assert ep.obs.shape == torch.Size([3, 5])
    with pytest.raises(RuntimeError, match="'obs'"):
        ep.obs = torch.ones(4)
    assert ep.obs.shape == torch.Size([3, 5])  # the failed write changed nothing
    ep.lock_()
    with pytest.raises(RuntimeError, match="lock"):
        ep.obs = torch.zeros(3)
    assert ep.obs.shape == torch.Size([3, 5])


def test_every_op_returns_the_class():
    data, *_ = seed_data()
    small = data[:4]
    results = [
        small.clone(),
        small.apply(lambda x: x),
        small.to(torch.float64),
        small.unsqueeze(0),
        torch.stack([small, small]),
        torch.cat([small, small]),
        small == small,
        small.detach(),
        small[torch.tensor([True, False, True, False])],
        lazy_stack([small, small]).contiguous(),
    ]
    for result in results:
        assert isinstance(result, MyData), type(result)
    assert torch.stack([small, small]).batch_size == torch.Size([2, 4])
    assert (small == small).all()


def test_non_tensor_and_nested_fields():
    data, *_ = seed_data()
    episode = Episode(torch.zeros(4, 2), "run-1", inner=data[:4], batch_size=[4])
    assert episode.name == "run-1"
    assert isinstance(episode.inner, MyData)
    sub = episode[1:3]
    assert (
        sub.name == "run-1"
        and isinstance(sub.inner, MyData)
        and sub.inner.batch_size == torch.Size([2])
    )
    stacked = torch.stack([episode, episode])
    assert stacked.name == [["run-1"] * 4] * 2
    no_inner = Episode(torch.zeros(4, 2), "x", batch_size=[4])
    assert no_inner.inner is None


def test_inside_a_tensordict_and_pytree():
    data, *_ = seed_data()
    td = TensorDict({"d": data}, [100])
    assert isinstance(td[:3]["d"], MyData)
    out = torch.vmap(lambda d: d.label * 2)(data[:5])
    assert torch.equal(out, data.label[:5] * 2)


def test_pickle_round_trip():
    data, *_ = seed_data()
    back = pickle.loads(pickle.dumps(data[:3]))
    assert isinstance(back, MyData) and torch.equal(back.image, data.image[:3])


def test_reserved_field_names():
    with pytest.raises(AttributeError, match="'batch_size'"):

        @tensorclass
        class Bad:
            batch_size: torch.Tensor


# ------------------------------------------------ dataclass semantics (issue 14)
def test_a_tensorclass_is_a_real_dataclass():
    import dataclasses

    @tensorclass
    class Sample:
        obs: torch.Tensor
        label: torch.Tensor
        tag: str = "train"
        note: str = dataclasses.field(default_factory=lambda: "none")

    assert dataclasses.is_dataclass(Sample)
    data = Sample(torch.zeros(2, 3), torch.zeros(2), batch_size=[2])
    assert dataclasses.is_dataclass(data)
    fields = dataclasses.fields(Sample)
    assert [f.name for f in fields] == ["obs", "label", "tag", "note"]
    assert fields[2].default == "train"
    assert fields[3].default_factory() == "none"
    assert fields[0].default is dataclasses.MISSING


def test_setting_a_non_field_attribute_raises_naming_it():
    @tensorclass
    class Sample:
        obs: torch.Tensor

        @property
        def doubled(self):
            return self.obs * 2

        @doubled.setter
        def doubled(self, value):
            self.obs = value / 2

    data = Sample(torch.zeros(2), batch_size=[2])
    with pytest.raises(AttributeError, match="'obz'"):
        data.obz = torch.ones(2)
    assert "obz" not in data.__dict__
    data.doubled = torch.full((2,), 4.0)  # a property setter still works
    assert data.obs.tolist() == [2.0, 2.0]
    data.batch_size = [2]


@tensorclass
class Positive:
    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self):
        if not (self.x > 0).all():
            raise ValueError("x must be positive")
        self.y = self.y.abs()


def test_post_init_runs_after_the_fields_are_set():
    data = Positive(x=torch.ones(3), y=-torch.ones(3), batch_size=[3])
    assert (data.y == 1).all()
    with pytest.raises(ValueError, match="positive"):
        Positive(x=-torch.ones(2), y=torch.ones(2), batch_size=[2])
    built = Positive.from_tensordict(TensorDict(x=torch.ones(2), y=-torch.ones(2), batch_size=[2]))
    assert (built.y == 1).all()
    with pytest.raises(ValueError, match="positive"):
        Positive.from_tensordict(TensorDict(x=-torch.ones(2), y=torch.ones(2), batch_size=[2]))


def test_post_init_does_not_run_on_op_results():
    calls = []

    @tensorclass
    class Counted:
        x: torch.Tensor

        def __post_init__(self):
            calls.append(1)

    data = Counted(x=torch.ones(4), batch_size=[4])
    data[:2].clone().reshape(2)
    assert len(calls) == 1


def test_signature_lists_the_fields_then_batch_size_device_names():
    assert list(inspect.signature(MyData).parameters) == [
        "image",
        "mask",
        "label",
        "batch_size",
        "device",
        "names",
    ]
    assert list(inspect.signature(Episode).parameters)[:3] == ["obs", "name", "inner"]
    assert inspect.signature(Episode).parameters["inner"].default is None
    data = MyData(
        torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2), batch_size=[2], names=["time"]
    )
    assert data.names == ["time"]


def test_stacking_different_tensorclasses_is_refused():
    @tensorclass
    class Other:
        obs: torch.Tensor
        name: str
        inner: MyData = None

    a = Episode(obs=torch.zeros(2), name="a", batch_size=[2])
    b = Other(obs=torch.zeros(2), name="b", batch_size=[2])
    with pytest.raises(TypeError, match=r"no implementation found .*\['Episode', 'Other'\]"):
        torch.stack([a, b])
    with pytest.raises(TypeError, match="no implementation found"):
        torch.cat([a, b])
    nested = Episode(
        obs=torch.zeros(2),
        name="a",
        inner=MyData(torch.zeros(2), torch.zeros(2), torch.zeros(2), batch_size=[2]),
        batch_size=[2],
    )
    flat = TensorDict(obs=torch.zeros(2), name="a", inner=torch.zeros(2), batch_size=[2])
    with pytest.raises(TypeError, match="'inner',\\) is a TensorDict in some inputs"):
        torch.stack([nested.to_tensordict(), flat])
    assert type(torch.stack([a, a])) is Episode


def test_device_cannot_be_assigned():
    ep = Episode(obs=torch.zeros(2), name="a", batch_size=[2], device="cpu")
    with pytest.raises(RuntimeError, match=r"device cannot be set using tensorclass\.device"):
        ep.device = torch.device("cpu")
    assert ep.to("cpu").device == torch.device("cpu")


def test_setting_an_unknown_attribute_says_so_in_upstreams_words():
    @tensorclass
    class _Point:
        x: torch.Tensor

    p = _Point(x=torch.zeros(2), batch_size=[2])
    with pytest.raises(AttributeError, match="Cannot set the attribute 'newattr'"):
        p.newattr = 1


def test_get_of_missing_fields_and_attributes():
    ep = Episode(obs=torch.zeros(2, 3), name="run", batch_size=[2])
    assert ep.get("missing") is None and ep.get(("missing", "deeper")) is None
    assert ep.get(("obs", "x"), "fallback") == "fallback"
    with pytest.raises(ValueError, match=r"\('obs',\) is a leaf"):
        ep.get(("obs", "x"))
    with pytest.raises(KeyError, match="'missing'"):
        ep["missing"]
    assert ep.get("batch_size") == torch.Size([2]) and ep.get("shape") == torch.Size([2])
    assert ep.get("device") is None and torch.equal(ep.get("obs"), torch.zeros(2, 3))
