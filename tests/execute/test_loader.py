"""The Loader's contract: sources, batches, encoders, per-sample RNG, prefetch accounting, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import datareel
from datareel import DatareelError, Loader, SampleContextError, TopologyError
from datareel.testing import make_ranks, take_global_batches
from state_edit import edited


def records(n):
    return [{"__key__": f"k{i}", "id": i, "x": float(i)} for i in range(n)]


def test_dict_batches_carry_positions_and_keys():
    loader = Loader(records(10), global_batch_size=4, micro_batch_size=2, shuffle=False, rank=1, world_size=2)
    batch = next(iter(loader))
    assert batch["__positions__"].tolist() == [2, 3]
    assert batch["__key__"] == ["k2", "k3"]
    assert batch["id"].tolist() == [2, 3] and batch["x"].dtype == torch.float64


@pytest.mark.parametrize("kind", ["list", "numpy", "torch", "hf"])
def test_from_sequence_accepts_common_sequences(kind):
    values = list(range(12))
    if kind == "list":
        seq = values
    elif kind == "numpy":
        seq = np.arange(24).reshape(12, 2)
    elif kind == "torch":

        class TorchDs(torch.utils.data.Dataset):
            def __len__(self):
                return 12

            def __getitem__(self, i):
                return torch.tensor([i, -i])

        seq = TorchDs()
    else:
        datasets = pytest.importorskip("datasets")
        seq = datasets.Dataset.from_dict({"id": values, "text": [f"t{i}" for i in values]})
    loader = Loader(datareel.from_sequence(seq, name=kind), global_batch_size=12, micro_batch_size=12, shuffle=False)
    batch = next(iter(loader))
    if kind == "list":
        assert batch.tolist() == values
    elif kind == "numpy":
        assert batch.shape == (12, 2) and batch[:, 0].tolist() == list(range(0, 24, 2))
    elif kind == "torch":
        assert batch[:, 0].tolist() == values
    else:
        assert batch["id"].tolist() == values and batch["text"][3] == "t3"
        assert batch["__positions__"].tolist() == values


def test_from_sequence_refuses_bad_input():
    with pytest.raises(DatareelError, match="__len__ and __getitem__"):
        datareel.from_sequence(iter([1, 2]))
    with pytest.raises(DatareelError, match="empty"):
        datareel.from_sequence([])
    with pytest.raises(DatareelError, match="name"):
        datareel.from_sequence([1], name="")


class Encoder:
    def encode_sample(self, sample):
        return {
            "id": sample["id"],
            "r": float(datareel.sample_rng().random()),
            "r2": float(datareel.sample_rng().random()),
        }

    def batch(self, samples):
        return {"ids": [s["id"] for s in samples], "r": [s["r"] for s in samples], "r2": [s["r2"] for s in samples]}

    def encode_batch(self, batch):
        batch["n"] = len(batch["ids"])
        return batch


def test_task_encoder_hooks_and_sample_rng():
    loader = Loader(records(50), global_batch_size=8, micro_batch_size=4, seed=3, task_encoder=Encoder())
    batch = next(iter(loader))
    assert batch["n"] == 4 and batch["__positions__"].tolist() == [0, 1, 2, 3]
    assert batch["r"] != batch["r2"]  # repeated calls continue one generator
    expected = [
        float(np.random.Generator(np.random.PCG64(np.random.SeedSequence([0x73616D70, 3, p]))).random())
        for p in range(4)
    ]
    assert batch["r"] == expected  # keyed by (seed, position), nothing else


def test_sample_rng_outside_encode_sample_is_refused():
    with pytest.raises(SampleContextError, match="encode_sample"):
        datareel.sample_rng()


def test_partial_encoder_falls_back_to_defaults():
    class OnlyBatch:
        def batch(self, samples):
            return {"ids": torch.tensor([s["id"] for s in samples])}

    loader = Loader(records(6), global_batch_size=3, micro_batch_size=3, shuffle=False, task_encoder=OnlyBatch())
    batch = next(iter(loader))
    assert batch["ids"].tolist() == [0, 1, 2] and batch["__positions__"].tolist() == [0, 1, 2]


def test_collation_failure_names_the_key():
    data = [{"v": torch.zeros(i + 1)} for i in range(4)]
    loader = Loader(data, global_batch_size=2, micro_batch_size=2, shuffle=False)
    with pytest.raises(DatareelError, match="'v'"):
        next(iter(loader))


@pytest.mark.workers
def test_prefetched_batches_are_not_counted():
    loader = Loader(
        records(100), global_batch_size=8, micro_batch_size=2, rank=0, world_size=2, num_workers=2, prefetch_factor=4
    )
    it = iter(loader)
    assert loader.cursor == 0
    next(it)
    assert loader.state_dict()["cursor"] == 4  # one micro-step of m·W = 4, whatever was prefetched
    next(it)
    next(it)
    assert loader.state_dict()["cursor"] == 12
    loader.close()


def test_state_is_small_json_and_identical_on_ranks():
    ranks = make_ranks(records(1000), world_size=4, global_batch_size=16, micro_batch_size=2, seed=9)
    take_global_batches(ranks, 3)
    states = [loader.state_dict() for loader in ranks]
    assert all(s == states[0] for s in states)
    assert len(json.dumps(states[0])) < 1024
    assert states[0]["cursor"] == 48 and states[0]["version"] == 1


def test_load_state_between_iterations_and_stale_iterator():
    loader = Loader(records(40), global_batch_size=4, micro_batch_size=2, seed=1)
    it = iter(loader)
    first = [next(it)["id"].tolist() for _ in range(6)]
    state_after_2 = edited(loader.state_dict(), cursor=4)
    loader.load_state_dict(state_after_2)
    with pytest.raises(DatareelError, match="iter\\(loader\\) again"):
        next(it)
    again = [next(iter(loader))["id"].tolist()]
    assert again == first[2:3]


def test_energon_aliases():
    loader = Loader(records(10), global_batch_size=2, micro_batch_size=2)
    it = iter(loader)
    next(it)
    state = loader.save_state_rank()
    other = Loader(records(10), global_batch_size=2, micro_batch_size=1, rank=1, world_size=2)
    other.restore_state_rank(state)
    assert other.cursor == 2


def test_repeat_false_every_sample_once_and_partial_last_batch():
    n = 23
    ranks = make_ranks(records(n), world_size=3, global_batch_size=24, micro_batch_size=4, repeat=False, seed=5)
    lengths = [len(loader) for loader in ranks]
    batches = take_global_batches(ranks, 10)
    ids = [r["id"] for b in batches for r in b]
    assert sorted(ids) == list(range(n)) and len(batches) == 1
    # the last, partial micro-step (23 - 12 = 11 positions) is split 4, 4, 3
    assert lengths == [2, 2, 2]
    assert all(loader.cursor == n for loader in ranks)
    assert len(set(json.dumps(loader.state_dict()) for loader in ranks)) == 1


def test_repeat_false_rank_with_empty_share():
    # 10 samples, m·W = 8: step 0 is full, step 1 has 2 positions for 4 ranks
    ranks = make_ranks(records(10), world_size=4, global_batch_size=8, micro_batch_size=2, repeat=False)
    got = [[b["__positions__"].tolist() for b in iter(loader)] for loader in ranks]
    assert got == [[[0, 1], [8]], [[2, 3], [9]], [[4, 5]], [[6, 7]]]
    assert all(loader.cursor == 10 for loader in ranks)


def test_restore_beyond_finite_reel_is_refused():
    loader = Loader(records(10), global_batch_size=4, micro_batch_size=4)
    state = edited(loader.state_dict(), cursor=40)
    finite = Loader(records(10), global_batch_size=4, micro_batch_size=4, repeat=False)
    with pytest.raises(TopologyError, match="repeat=True"):
        finite.load_state_dict(state)


def test_len_of_infinite_loader_is_an_error():
    with pytest.raises(TypeError, match="infinite"):
        len(Loader(records(3), global_batch_size=1, micro_batch_size=1))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(seed=-1), "seed=-1"),
        (dict(num_workers=-1), "num_workers=-1"),
        (dict(prefetch_factor=2), "num_workers >= 1"),
        (dict(rank=2, world_size=2), "rank=2"),
        (dict(world_size=2), "pass rank="),
    ],
)
def test_bad_loader_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Loader(records(3), global_batch_size=4, micro_batch_size=1, **kwargs)


@pytest.mark.workers
def test_a_dropped_loader_and_its_workers_are_freed_without_the_garbage_collector():
    import gc
    import weakref

    gc.disable()
    try:
        loader = Loader(records(50), global_batch_size=4, micro_batch_size=2, num_workers=1, persistent_workers=True)
        it = iter(loader)
        next(it)
        ref = weakref.ref(loader)
        del it, loader
        assert ref() is None  # no reference cycle: worker processes stop now, not at the next collection
    finally:
        gc.enable()


@pytest.mark.workers
def test_close_stops_the_workers_of_a_live_iterator():
    """close() promises to stop worker processes: also those of an iterator the caller still holds (left
    running, a later fork would inherit it and torch complains when that child collects it)."""
    loader = Loader(records(50), global_batch_size=4, micro_batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    workers = list(it.inner._workers)
    assert len(workers) == 2 and all(w.is_alive() for w in workers)
    loader.close()
    for worker in workers:
        worker.join(timeout=10)
    assert not any(w.is_alive() for w in workers)
    with pytest.raises(DatareelError, match="call iter\\(loader\\) again"):
        next(it)
    assert next(iter(loader))["__positions__"].tolist() == [2, 3]  # a new iter() starts fresh workers at the cursor
