import pytest
import torch

from td_core import LazyStackedTensorDict, TensorDict, TensorDictParams


def double(chunk):
    return chunk.apply(lambda x: x * 2)


def process_data(data):
    # the README seed's example: update the chunk in place, return nothing
    images = data.get("images").flip(-2).clone()
    labels = data.get("labels") // 10
    data.set_("images", images)
    data.set_("labels", labels)


def boom(chunk):
    raise ValueError(f"bad chunk of size {chunk.batch_size[0]}")


def dataset(n=12):
    return TensorDict(
        {
            "images": torch.arange(n * 4, dtype=torch.float32).view(n, 2, 2),
            "labels": torch.arange(n) * 7,
        },
        [n],
    )


@pytest.mark.parametrize(
    ("chunksize", "num_chunks"), [(None, None), (5, None), (None, 3), (0, None)]
)
def test_map_gathers_results(chunksize, num_chunks):
    data = dataset()
    out = data.map(double, num_workers=2, chunksize=chunksize, num_chunks=num_chunks)
    assert out.batch_size == data.batch_size
    assert torch.equal(out["images"], data["images"] * 2)
    assert torch.equal(out["labels"], data["labels"] * 2)


def test_map_in_place_updates_reach_the_original():
    data = dataset()
    expected_images = data["images"].flip(-2)
    expected_labels = data["labels"] // 10
    out = data.map(process_data, num_workers=2, chunksize=0, pbar=False)
    assert torch.equal(data["images"], expected_images)
    assert torch.equal(data["labels"], expected_labels)
    assert torch.equal(out["labels"], expected_labels)


def test_map_progress_bar(capsys):
    data = dataset()
    data.map(double, num_workers=2, chunksize=4, pbar=True)
    assert "3/3" in capsys.readouterr().err


def test_map_raises_worker_errors_of_their_class_with_the_worker_traceback():
    with pytest.raises(ValueError, match="bad chunk of size 6") as info:
        dataset().map(boom, num_workers=2)
    assert "in boom" in str(info.value.__cause__)  # the worker's traceback


def test_map_writes_into_out_and_returns_it():
    data = dataset()
    out = data.empty().set("images", torch.zeros(12, 2, 2)).set("labels", torch.zeros(12))
    got = data.map(double, num_workers=2, out=out, num_chunks=3)
    assert got is out
    assert torch.equal(out["images"], data["images"] * 2)
    rows = TensorDict({"labels": torch.zeros(12)}, [12])
    data.map(label_only, num_workers=2, chunksize=0, out=rows)  # elements, written one by one
    assert torch.equal(rows["labels"], data["labels"] + 1)


def label_only(element):
    return TensorDict({"labels": element["labels"] + 1}, [])


def draw(chunk):
    return TensorDict({"r": torch.rand(chunk.batch_size[0])}, chunk.batch_size)


def test_map_seeds_the_workers_from_the_generator():
    data = dataset(4)

    def run(seed, **kwargs):
        gen = torch.Generator().manual_seed(seed)
        return data.map(draw, num_workers=1, chunksize=1, generator=gen, **kwargs)["r"]

    assert torch.equal(run(1), run(1)) and not torch.equal(run(1), run(2))
    # a worker replaced after each chunk starts with a new rank (seed + i), not waiting for one
    replaced = run(1, max_tasks_per_child=1)
    assert replaced.shape == (4,) and len(set(replaced.tolist())) == 4


def test_map_on_parameters_is_refused():
    params = TensorDictParams(TensorDict({"w": torch.zeros(4)}, [4]))
    for call in (lambda: params.map(double, num_workers=1), lambda: params.map_iter(double)):
        with pytest.raises(RuntimeError, match="Cannot call map on a TensorDictParams"):
            call()


def test_map_argument_errors():
    with pytest.raises(ValueError, match="not both"):
        dataset().map(double, num_workers=1, chunksize=2, num_chunks=2)
    with pytest.raises(ValueError, match="num_workers"):
        dataset().map(double, num_workers=0)


def test_map_after_multithreaded_work_in_the_parent():
    # a large op warms the parent's OpenMP pool; forked workers must not deadlock on theirs
    data = TensorDict({"x": torch.randn(2000, 3, 16, 16)}, [2000])
    (data["x"] * 2).sum()
    out = data.map(double, num_workers=2, num_chunks=4)
    assert torch.equal(out["x"], data["x"] * 2)


def add_two(element):
    return element.set("2", torch.tensor(2))


def test_map_over_elements_of_different_keys_stacks_them_lazily():
    data = LazyStackedTensorDict.lazy_stack(
        [TensorDict({"0": torch.tensor(0)}, []), TensorDict({"1": torch.tensor(1)}, [])]
    )
    out = data.map(add_two, chunksize=0, num_workers=2)
    assert isinstance(out, LazyStackedTensorDict)
    assert out[0]["0"] == 0 and out[1]["1"] == 1 and out["2"].tolist() == [2, 2]
