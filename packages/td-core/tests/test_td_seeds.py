"""Every td-core example of the seeds (README and overview), with its asserts.

CUDA device lines are replaced by "meta" so the tests run on any machine.
"""

import torch

from td_core import TensorDict

# ---------------------------------------------------------------- README: General


def test_readme_general_batch_size_and_entries():
    data = TensorDict(
        {
            "key 1": torch.ones(3, 4, 5),
            "key 2": torch.zeros(3, 4, 5, dtype=torch.bool),
        },
        batch_size=[3, 4],
    )
    assert data.batch_size == torch.Size([3, 4])
    assert data.shape == torch.Size([3, 4])
    assert data["key 1"].shape == torch.Size([3, 4, 5])
    assert data["key 2"].dtype == torch.bool


def test_readme_general_device():
    # the seed uses "cuda:0"; "meta" exercises the same move-on-write behaviour
    data = TensorDict(
        {
            "key 1": torch.ones(3, 4, 5),
            "key 2": torch.zeros(3, 4, 5, dtype=torch.bool),
        },
        batch_size=[3, 4],
        device="meta",
    )
    data["key 3"] = torch.randn(3, 4, device="cpu")
    assert data["key 3"].device == torch.device("meta")
    assert data["key 1"].device == torch.device("meta")


def test_readme_general_nested_and_unravelled_keys():
    data = TensorDict(
        {
            "key 1": torch.ones(3, 4, 5),
            "key 2": torch.zeros(3, 4, 5, dtype=torch.bool),
        },
        batch_size=[3, 4],
    )
    data["nested", "key"] = torch.zeros(3, 4)  # the batch-size must match
    assert (data["nested", "key"] == 0).all()
    data["nested", ("supernested", ("key",))] = torch.zeros(3, 4)
    assert (data["nested", "supernested", "key"] == 0).all()
    assert (("nested",), "supernested", (("key",),)) in data.keys(include_nested=True)


def test_readme_general_non_tensor():
    data = TensorDict({"a-tensor": torch.randn(1, 2)}, batch_size=[1, 2])
    data["non-tensor"] = "a string!"
    assert data["non-tensor"] == "a string!"


# ---------------------------------------------------------------- README: Tensor-like features


def readme_data():
    return TensorDict(
        {
            "key 1": torch.ones(3, 4, 5),
            "key 2": torch.zeros(3, 4, 5, dtype=torch.bool),
        },
        batch_size=[3, 4],
    )


def test_readme_indexing():
    data = readme_data()
    sub_tensordict = data[..., :2]
    assert sub_tensordict.shape == torch.Size([3, 2])
    assert sub_tensordict["key 1"].shape == torch.Size([3, 2, 5])


def test_readme_stack_and_cat():
    tensordicts = [readme_data() for _ in range(2)]
    stack_tensordict = torch.stack(tensordicts, 1)
    assert stack_tensordict.shape == torch.Size([3, 2, 4])
    assert stack_tensordict["key 1"].shape == torch.Size([3, 2, 4, 5])
    cat_tensordict = torch.cat(tensordicts, 0)
    assert cat_tensordict.shape == torch.Size([6, 4])
    assert cat_tensordict["key 1"].shape == torch.Size([6, 4, 5])


def test_readme_reshape_view_squeeze():
    data = readme_data()
    assert data.view(-1).shape == torch.Size([12])
    assert data.reshape(-1).shape == torch.Size([12])
    assert data.unsqueeze(-1).shape == torch.Size([3, 4, 1])
    assert data.unsqueeze(-1).squeeze(-1).shape == torch.Size([3, 4])


def test_readme_apply_uniform():
    data = readme_data().float()
    tensordict_uniform = data.apply(lambda tensor: tensor.uniform_())
    assert tensordict_uniform.shape == data.shape
    for key in ["key 1", "key 2"]:
        values = tensordict_uniform[key]
        assert ((values >= 0) & (values < 1)).all()


def test_readme_apply_filter():
    data = TensorDict(
        {"a": torch.tensor(1.0, dtype=torch.float), "b": torch.tensor(1, dtype=torch.int64)}, []
    )
    data_float = data.apply(lambda x: x if x.dtype == torch.float else None)
    assert "b" not in data_float
    assert "a" in data_float


def test_readme_functional_weights_unflatten_keys():
    layer1 = torch.nn.Linear(3, 4)
    weights1 = TensorDict(layer1.state_dict(), []).unflatten_keys(".")
    assert set(weights1.keys()) == {"weight", "bias"}
    assert torch.equal(weights1["weight"], layer1.weight.detach())
    weights = TensorDict({"0": weights1, "1": weights1.clone()}, [])
    assert (weights == TensorDict({"0": weights1, "1": weights1}, [])).all()


# ---------------------------------------------------------------- README: Lazy preallocation


def foo():
    data = TensorDict({}, batch_size=[])
    data["a"] = torch.randn(3)
    data["b"] = TensorDict({"c": torch.zeros(2)}, batch_size=[])
    return data


def test_readme_lazy_preallocation_matches_stack():
    N = 10
    stacked = torch.stack([foo() for _ in range(N)])
    data = TensorDict({}, batch_size=[N])
    rows = [foo() for _ in range(N)]
    for i in range(N):
        data[i] = rows[i]
    for result in (stacked, data):
        assert result.batch_size == torch.Size([10])
        assert result["a"].shape == torch.Size([10, 3])
        assert result["a"].dtype == torch.float32
        assert isinstance(result["b"], TensorDict)
        assert result["b"].batch_size == torch.Size([10])
        assert result["b", "c"].shape == torch.Size([10, 2])
        assert result.device is None
        assert not result.is_shared()
    assert torch.equal(data["a"], torch.stack([r["a"] for r in rows]))


def test_readme_lazy_preallocation_shuffled():
    N = 10
    rows = [foo() for _ in range(N)]
    data = TensorDict({}, batch_size=[N])
    for i in torch.randperm(N, generator=torch.Generator().manual_seed(0)).tolist():
        data[i] = rows[i]
    assert torch.equal(data["a"], torch.stack([r["a"] for r in rows]))
    assert (data["b", "c"] == 0).all()


# ---------------------------------------------------------------- README: Nesting TensorDicts


def test_readme_nesting_flatten_keys():
    data = TensorDict(
        {
            "key 1": torch.ones(3, 4, 5),
            "key 2": TensorDict({"sub-key": torch.randn(3, 4, 5, 6)}, batch_size=[3, 4, 5]),
        },
        batch_size=[3, 4],
    )
    tensordict_flatten = data.flatten_keys(separator=".")
    assert set(tensordict_flatten.keys()) == {"key 1", "key 2.sub-key"}
    assert tensordict_flatten.batch_size == torch.Size([3, 4])
    sub_value = data["key 2", "sub-key"]
    assert sub_value.shape == torch.Size([3, 4, 5, 6])
    assert torch.equal(tensordict_flatten["key 2.sub-key"], sub_value)
    assert data["key 2"].batch_size == torch.Size([3, 4, 5])


# ---------------------------------------------------------------- overview


def test_overview_unbind():
    td = TensorDict({"a": torch.randn(3, 11), "b": torch.randn(3, 3)}, batch_size=3)
    td0, td1, td2 = td.unbind(0)
    assert td0.batch_size == torch.Size([])
    assert torch.equal(td1["a"], td["a"][1])
    assert torch.equal(td2["b"], td["b"][2])


def test_overview_unbind_nested():
    td = TensorDict({"a": {"c": torch.randn(3, 11)}, "b": torch.randn(3, 3)}, batch_size=3)
    td0, td1, td2 = td.unbind(0)
    for i, part in enumerate((td0, td1, td2)):
        assert torch.equal(part["a", "c"], td["a", "c"][i])
        assert torch.equal(part["b"], td["b"][i])


def test_overview_features():
    tensordict = TensorDict(
        {"zeros": torch.zeros(2, 3, 4), "ones": torch.ones(2, 3, 4, 5)},
        batch_size=[2, 3],
    )
    zeros = tensordict["zeros"]
    assert torch.equal(zeros, torch.zeros(2, 3, 4))
    tensordict["twos"] = 2 * torch.ones(2, 3)
    assert (tensordict["twos"] == 2).all()
    sub_tensordict = tensordict[..., :2]
    assert sub_tensordict.batch_size == torch.Size([2, 2])
    assert sub_tensordict["ones"].shape == torch.Size([2, 2, 4, 5])
    # the seed moves to "cuda:0"; "meta" exercises the same path
    on_meta = tensordict.to("meta")
    assert on_meta["ones"].device == torch.device("meta")
    tensordict = tensordict.reshape(6)
    assert tensordict.batch_size == torch.Size([6])
    assert tensordict["ones"].shape == torch.Size([6, 4, 5])


def test_overview_set_inplace_and_set_():
    tensordict = TensorDict({"zeros": torch.zeros(2, 3, 4)}, batch_size=[2, 3])
    zeros = tensordict["zeros"]
    tensordict.set("zeros", torch.ones(2, 3, 4), inplace=True)
    assert (zeros == 1).all()
    tensordict.set_("zeros", torch.full((2, 3, 4), 2.0))
    assert (zeros == 2).all()
    tensordict.set("fresh", torch.ones(2, 3), inplace=True)
    assert "fresh" in tensordict.keys()


def test_overview_nested_tensordicts():
    tensordict = TensorDict(
        {
            "inputs": {
                "image": torch.rand(100, 28, 28),
                "mask": torch.randint(2, (100, 28, 28), dtype=torch.uint8),
            },
            "outputs": {"logits": torch.randn(100, 10)},
        },
        batch_size=[100],
    )
    assert isinstance(tensordict["inputs"], TensorDict)
    assert tensordict["inputs"].batch_size == torch.Size([100])
    image = tensordict["inputs", "image"]
    assert image.shape == torch.Size([100, 28, 28])
    logits = tensordict.get(("outputs", "logits"))
    assert logits.shape == torch.Size([100, 10])
    tensordict["outputs", "probabilities"] = torch.sigmoid(logits)
    assert torch.equal(tensordict["outputs"]["probabilities"], torch.sigmoid(logits))
    assert tensordict["inputs", "mask"].dtype == torch.uint8


def test_overview_lazy_preallocation():
    N = 7

    def make():
        return TensorDict({"x": torch.randn(4), "y": {"z": torch.ones(2, dtype=torch.int32)}}, [])

    rows = [make() for _ in range(N)]
    tensordict = TensorDict({}, batch_size=[N])
    for i in range(N):
        tensordict[i] = rows[i]
    assert tensordict["x"].shape == torch.Size([N, 4])
    assert tensordict["y", "z"].dtype == torch.int32
    assert torch.equal(tensordict["x"], torch.stack([r["x"] for r in rows]))
