"""The block (locality) shuffle through the loader: every guarantee of the full shuffle (restore at every step
on another topology, each epoch exactly once, mixing, packing, schedules, one pass) and a saved state that
names the mode: a state of the full shuffle, or of other block options, is refused naming ``locality``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import BlockShuffle
from datareel.errors import OptionError, StateMismatchError
from datareel.testing import Topology, check_restore_everywhere
from encoders import NoisyEncoder, Packer, lengths_dataset
from profiles import examples


def ids(n: int, name: str = "ids"):
    return datareel.from_sequence([{"id": i} for i in range(n)], name=name)


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 3000), label="dataset size")
    W, W2 = draw(st.integers(1, 4), label="W"), draw(st.integers(1, 4), label="W'")
    m, m2 = draw(st.integers(1, 4), label="m"), draw(st.integers(1, 4), label="m'")
    G = math.lcm(m * W, m2 * W2) * draw(st.integers(1, 2), label="G factor")
    batches = max(1, min(4, 30 // (G // (m * W))))
    epoch = draw(st.integers(0, 2), label="epoch boundary to cross")
    start = max(0, (epoch * n - draw(st.integers(0, batches * G), label="before it")) // G * G)
    shuffle = BlockShuffle(block=draw(st.integers(1, 8), label="k"), window=draw(st.integers(1, 2), label="w"))
    seed = draw(st.integers(0, 2**32), label="seed")
    return dict(
        n=n,
        G=G,
        before=Topology(W, 0, m),
        after=Topology(W2, 0, m2),
        batches=batches,
        start=start,
        seed=seed,
        shuffle=shuffle,
    )


@settings(max_examples=examples(0.5))
@given(s=scenarios())
def test_restores_everywhere_and_reads_each_epoch_once(s):
    data = ids(s["n"])
    report = check_restore_everywhere(
        data,
        global_batch_size=s["G"],
        before=s["before"],
        after=s["after"],
        start=s["start"],
        global_batches=s["batches"],
        seed=s["seed"],
        task_encoder=NoisyEncoder(),
        shuffle=s["shuffle"],
    )
    assert report["restored"] >= 1
    n, G = s["n"], s["G"]
    loader = datareel.Loader(data, global_batch_size=G, micro_batch_size=G, seed=s["seed"], shuffle=s["shuffle"])
    seen: dict[int, list[int]] = {}
    it = iter(loader)
    while loader.cursor < 2 * n + G:
        batch = next(it)
        for p, i in zip(batch["__positions__"].tolist(), batch["id"].tolist()):
            seen.setdefault(p // n, []).append(i)
    assert sorted(seen[0]) == list(range(n)) and sorted(seen[1]) == list(range(n))


def test_the_order_differs_from_the_full_shuffle_and_reads_blocks():
    data = ids(4096)
    full = datareel.Loader(data, global_batch_size=64, micro_batch_size=64, seed=3)
    blocked = datareel.Loader(
        data, global_batch_size=64, micro_batch_size=8, world_size=8, rank=2, seed=3, shuffle=BlockShuffle(block=16)
    )
    a, it = next(iter(full))["id"].tolist(), iter(blocked)
    rank_ids = [i for _ in range(16) for i in next(it)["id"].tolist()]  # 16 global batches of rank 2
    assert a != sorted(a)
    blocks = {i // 16 for i in rank_ids}
    assert len(rank_ids) == 128 and len(blocks) == 8  # 8 offsets, each one whole block over 16 periods
    assert all(sorted(i for i in rank_ids if i // 16 == b) == list(range(16 * b, 16 * b + 16)) for b in blocks)


@pytest.mark.parametrize(
    "case",
    ["mixed", "packed", "ramp-up", "one pass", "window"],
)
def test_restores_everywhere_with_mixing_packing_schedules_and_one_pass(case):
    a, b = ids(700, "a"), ids(1100, "b")
    common: dict = dict(
        global_batch_size=24,
        before=Topology(2, 0, 3),
        after=Topology(3, 0, 4),
        global_batches=4,
        task_encoder=NoisyEncoder(),
        shuffle=BlockShuffle(block=4),
    )
    data = datareel.mix([(a, 1), (b, 2)])
    if case == "packed":
        data, length = lengths_dataset([1 + i % 13 for i in range(700)])
        common["packing"] = datareel.Packing(max_length=40, length=length, window=64)
        common["task_encoder"] = Packer()
    elif case == "ramp-up":
        common["global_batch_size"] = datareel.RampUp(start=12, increment=12, ramp_samples=96, final=48)
        common["before"], common["after"] = Topology(2, 0, 3), Topology(4, 0, 3)
    elif case == "one pass":
        data = datareel.mix_epochized([(a, 1), (b, 1)])
        common.update(repeat=False, start=1776, global_batches=3)
    elif case == "window":
        common["shuffle"] = BlockShuffle(block=3, window=2, period=12)
    report = check_restore_everywhere(data, seed=5, **common)
    assert report["restored"] >= 1


@pytest.mark.workers
def test_workers_give_the_batches_of_no_workers():
    data = ids(900)
    kw = dict(global_batch_size=32, micro_batch_size=4, world_size=2, rank=1, seed=2, shuffle=BlockShuffle(block=8))
    plain = [b["id"].tolist() for _, b in zip(range(12), datareel.Loader(data, **kw))]
    loader = datareel.Loader(data, num_workers=2, **kw)
    try:
        assert [b["id"].tolist() for _, b in zip(range(12), loader)] == plain
    finally:
        loader.close()


def test_a_state_of_another_mode_or_block_is_refused_naming_locality():
    data = ids(500)
    kw = dict(global_batch_size=16, micro_batch_size=4, seed=1)
    blocked = datareel.Loader(data, shuffle=BlockShuffle(block=8), **kw)
    next(iter(blocked))
    state = blocked.state_dict()
    assert state["spec"]["locality"] == {"block": 8, "period": 16, "window": 1}
    full = datareel.Loader(data, **kw)
    with pytest.raises(StateMismatchError, match="locality"):
        full.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="locality"):
        datareel.Loader(data, shuffle=BlockShuffle(block=8), **kw).load_state_dict(full.state_dict())
    for other in (BlockShuffle(block=4), BlockShuffle(block=8, window=2), BlockShuffle(block=8, period=8)):
        with pytest.raises(StateMismatchError, match="locality"):
            datareel.Loader(data, shuffle=other, **kw).load_state_dict(state)
    # the same options on another topology continue it
    again = datareel.Loader(
        data, shuffle=BlockShuffle(block=8), global_batch_size=16, micro_batch_size=2, world_size=2, rank=0, seed=1
    )
    again.load_state_dict(state)
    assert again.cursor == 4
    assert "locality" not in full.state_dict()["spec"]  # the full shuffle's states keep their bytes


def test_shuffle_false_and_over_epochs_combinations():
    data = ids(100)
    with pytest.raises(OptionError, match="shuffle_over_epochs_multiplier"):
        from datareel.sources.view import SourceView

        datareel.Loader(
            SourceView(data, over_epochs=2), global_batch_size=4, micro_batch_size=4, shuffle=BlockShuffle(block=4)
        )
    loader = datareel.Loader(data, global_batch_size=4, micro_batch_size=4, shuffle=BlockShuffle(block=4))
    assert loader.shuffle is True and np.unique(next(iter(loader))["id"].numpy() // 4).size == 4


@pytest.mark.parametrize(
    "bad",
    [{"block": 0, "period": 16, "window": 1}, {"block": 8}, [8, 16, 1], {"block": 8, "period": 16, "window": True}],
)
def test_a_damaged_locality_field_is_refused_as_damaged(bad):
    from datareel.errors import StateDamagedError
    from state_edit import edited

    kw = dict(global_batch_size=16, micro_batch_size=4, seed=1, shuffle=BlockShuffle(block=8))
    loader = datareel.Loader(ids(100), **kw)
    state = loader.state_dict()
    spec = {**state["spec"], "locality": bad}
    with pytest.raises(StateDamagedError, match="locality"):
        datareel.Loader(ids(100), **kw).load_state_dict(edited(state, spec=spec))
