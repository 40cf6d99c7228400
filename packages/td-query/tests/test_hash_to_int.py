import io

import pytest
import torch
from torch import nn

from td_query import HashToInt


def test_first_seen_order():
    h2i = HashToInt()
    assert h2i(torch.tensor([50, 30, 50, 70]), extend=True).tolist() == [0, 1, 0, 2]
    assert h2i(torch.tensor([90, 30, 10, 90]), extend=True).tolist() == [3, 1, 4, 3]
    assert len(h2i) == 5
    assert h2i.hashes.tolist() == [50, 30, 70, 90, 10]


def test_lookup_without_extend_returns_minus_one_and_inserts_nothing():
    h2i = HashToInt()
    assert h2i(torch.tensor([1, 2])).tolist() == [-1, -1]
    assert len(h2i) == 0
    h2i(torch.tensor([7, 8]), extend=True)
    out = h2i(torch.tensor([8, 9, 7, -5]), extend=False)
    assert out.tolist() == [1, -1, 0, -1]
    assert out.dtype == torch.int64
    assert len(h2i) == 2


def test_matches_python_dict_reference():
    gen = torch.Generator().manual_seed(0)
    h2i = HashToInt()
    ref: dict[int, int] = {}
    for _ in range(30):
        batch = torch.randint(
            -200, 200, (int(torch.randint(0, 50, (1,), generator=gen)),), generator=gen
        )
        extend = bool(torch.randint(0, 3, (1,), generator=gen)) != 0
        got = h2i(batch, extend=extend).tolist()
        expected = []
        for v in batch.tolist():
            if extend:
                expected.append(ref.setdefault(v, len(ref)))
            else:
                expected.append(ref.get(v, -1))
        assert got == expected
    assert h2i.hashes.tolist() == list(ref)


def test_extreme_values_and_shapes():
    h2i = HashToInt()
    lo, hi = torch.iinfo(torch.int64).min, torch.iinfo(torch.int64).max
    x = torch.tensor([[hi, lo], [0, hi]])
    out = h2i(x, extend=True)
    assert out.shape == (2, 2)
    assert out.tolist() == [[0, 1], [2, 0]]
    assert h2i(torch.tensor(lo)).item() == 1  # 0-d
    assert h2i(torch.tensor([], dtype=torch.int64), extend=True).shape == (0,)
    assert h2i(torch.tensor([5], dtype=torch.int32), extend=True).tolist() == [3]


def test_state_dict_round_trip_through_torch_save():
    h2i = HashToInt()
    h2i(torch.tensor([11, -3, 11, 42]), extend=True)
    buffer = io.BytesIO()
    torch.save(h2i.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    restored = HashToInt()
    restored(torch.tensor([999]), extend=True)  # prior content is replaced
    restored.load_state_dict(state)
    assert len(restored) == 3
    assert restored(torch.tensor([42, 11, -3, 999])).tolist() == [2, 0, 1, -1]
    assert restored(torch.tensor([5]), extend=True).tolist() == [3]


def test_state_dict_inside_a_parent_module():
    parent = nn.Module()
    parent.table = HashToInt()
    parent.table(torch.tensor([4, 5, 6]), extend=True)
    state = parent.state_dict()
    assert list(state) == ["table.hashes"]
    other = nn.Module()
    other.table = HashToInt()
    other.load_state_dict(state)
    assert other.table(torch.tensor([6])).tolist() == [2]


def test_load_invalid_state_raises():
    h2i = HashToInt()
    with pytest.raises(RuntimeError, match="must not hold a hash twice"):
        h2i.load_state_dict({"hashes": torch.tensor([1, 1])})
    with pytest.raises(RuntimeError, match="int64"):
        h2i.load_state_dict({"hashes": torch.tensor([1.0])})
    with pytest.raises(RuntimeError, match="1-D"):
        h2i.load_state_dict({"hashes": torch.tensor([[1]])})
    with pytest.raises(RuntimeError, match="Missing key"):
        h2i.load_state_dict({})
    assert len(h2i) == 0  # invalid states load nothing
    with pytest.raises(RuntimeError, match="Unexpected key"):
        h2i.load_state_dict({"hashes": torch.tensor([1]), "extra": torch.tensor([2])})
    h2i.load_state_dict({"hashes": torch.tensor([1]), "extra": torch.tensor([2])}, strict=False)
    assert h2i(torch.tensor([1])).tolist() == [0]


def test_clear():
    h2i = HashToInt()
    h2i(torch.tensor([3, 4]), extend=True)
    h2i.clear()
    assert len(h2i) == 0
    assert h2i(torch.tensor([4, 3]), extend=True).tolist() == [0, 1]


def test_bad_input():
    h2i = HashToInt()
    with pytest.raises(TypeError, match="integer tensor"):
        h2i(torch.tensor([1.5]))
    with pytest.raises(TypeError, match="tensor of hashes, got list"):
        h2i([1, 2])


@pytest.mark.parametrize("structured", [False, True], ids=["random", "multiples-of-2**20"])
def test_vectorised_over_elements(structured, lines_run):
    # the Python work grows with the probe length (a few dozen steps), never with
    # the number of elements, even for keys sharing their low bits
    n = 50_000
    base = torch.arange(n) << 20 if structured else torch.randint(-(2**62), 2**62, (n,))
    h2i = HashToInt()
    out, inserted = lines_run(lambda: h2i(base, extend=True))
    assert torch.equal(out, torch.arange(n))
    probe = torch.cat([base, torch.randint(-(2**62), 2**62, (n,))])
    out, looked_up = lines_run(lambda: h2i(probe))
    assert torch.equal(out[:n], torch.arange(n))
    assert int((out[n:] >= 0).sum()) == 0
    assert inserted < 1_000 and looked_up < 500


def test_many_repeats_match_python_dict_reference():
    # large batches full of repeated hashes, inserted into a growing table
    gen = torch.Generator().manual_seed(1)
    h2i = HashToInt()
    ref: dict[int, int] = {}
    for size in (5_000, 20_000, 20_000):
        batch = torch.randint(-3_000, 30_000, (size,), generator=gen) * 7919
        got = h2i(batch, extend=True).tolist()
        assert got == [ref.setdefault(v, len(ref)) for v in batch.tolist()]
    assert h2i.hashes.tolist() == list(ref)
    probe = torch.arange(-4_000, 40_000) * 7919
    assert h2i(probe).tolist() == [ref.get(v, -1) for v in probe.tolist()]


def test_table_stays_in_host_memory():
    h2i = HashToInt()
    h2i(torch.tensor([3, 4]), extend=True)
    assert h2i.to(torch.float64) is h2i  # nothing to convert or move
    assert h2i.hashes.device.type == "cpu" and h2i.hashes.tolist() == [3, 4]
    assert h2i(torch.tensor([4, 5])).tolist() == [1, -1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_table():
    h2i = HashToInt().cuda()
    out = h2i(torch.tensor([5, 6, 5], device="cuda"), extend=True)
    assert out.device.type == "cuda" and out.tolist() == [0, 1, 0]
    assert h2i(torch.tensor([6, 7])).tolist() == [1, -1]  # cpu input, cuda table
