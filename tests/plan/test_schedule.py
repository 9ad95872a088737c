"""Global batch size schedules: Megatron's ramp-up, piecewise sizes, and restarts that change the size.

- the ramp-up gives the sizes Megatron-LM's rule gives (the rule written here, from its source);
- for random schedules, topologies, worker counts and checkpoints at every micro-step, elastic
  restore reproduces the uninterrupted run's global batches, and all global batches together are
  exactly the reel prefix;
- a restart with another size at a global-batch boundary (``allow_batch_size_change=True``)
  continues the identical sample sequence, plain and packed; mid-batch, or without the flag, it is
  refused naming the reason and the fix.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import RampUp, StateMismatchError, TopologyError
from datareel import energon as den
from datareel.plan.schedule import BatchSchedule
from datareel.testing import (
    Topology,
    check_restore_everywhere,
    make_ranks,
    run_local,
    take_global_batches,
    take_micro_step,
)
from encoders import Keys, Knapsack, NoisyEncoder, Packer, lengths_dataset
from profiles import examples
from state_edit import edited


def megatron_sizes(start: int, increment: int, ramp_samples: int, final: int, steps: int) -> list[int]:
    """Megatron-LM's global batch sizes for ``steps`` iterations of ``--rampup-batch-size start increment
    ramp_samples --global-batch-size final``, as its training loop computes them: before each iteration
    ``update(consumed_samples)`` (num_microbatches_calculator.py: ``final`` past ``ramp_samples``, else
    ``start + increment * int(consumed / (ramp_samples / increments))``), after it ``consumed += size``."""
    increments = (final - start) // increment
    per_increment = ramp_samples / increments
    consumed, sizes = 0, []
    for _ in range(steps):
        size = final if consumed > ramp_samples else start + int(consumed / per_increment) * increment
        sizes.append(size)
        consumed += size
    return sizes


def ids(n: int, name: str = "ids") -> datareel.Source:
    return datareel.from_sequence([{"id": i} for i in range(n)], name=name)


# -- the ramp-up against Megatron's rule -------------------------------------------------------------------
MEGATRON_SETTINGS = [
    (32, 32, 1000, 256),
    (256, 128, 50_000_000, 1024),  # NeMo's documented example
    (16, 16, 5_859_375, 1536),  # GPT-3 175B in Megatron-LM's examples
    (1, 1, 10, 7),
    (7, 3, 100, 22),  # 100 / 5 samples per increment: float boundaries land on integers
    (3, 2, 1, 9),  # the whole ramp inside the first batch
    (8, 8, 99_991, 64),  # a prime ramp length: boundaries between integers
]


@pytest.mark.parametrize("setting", MEGATRON_SETTINGS)
def test_ramp_up_sizes_are_megatrons(setting):
    start, increment, ramp_samples, final = setting
    steps = ramp_samples // start + 64  # past the end of the ramp
    expected = megatron_sizes(*setting, steps=steps)
    assert expected[-1] == final
    loader = datareel.Loader(ids(10), global_batch_size=RampUp(*setting), micro_batch_size=1)
    schedule = loader.schedule
    assert [loader.global_batch_size_at(b) for b in range(steps)] == expected
    starts = [0, *itertools.accumulate(expected)]
    assert [schedule.start(b) for b in range(steps)] == starts[:-1]
    # every position lies in the batch the sums say, and every batch ends where the next starts
    for b in range(0, steps, max(1, steps // 50)):
        assert schedule.batch_at(starts[b]) == b and schedule.batch_at(starts[b + 1] - 1) == b
    # far beyond the ramp, O(pieces): batch 10^12 starts where the arithmetic says
    last = steps - 1
    assert schedule.start(10**12) == starts[last] + (10**12 - last) * final


@settings(max_examples=examples(1.5))
@given(
    start=st.integers(1, 64),
    increment=st.integers(1, 64),
    increments=st.integers(1, 12),
    ramp_samples=st.integers(1, 5000),
)
def test_ramp_up_sizes_are_megatrons_for_random_settings(start, increment, increments, ramp_samples):
    final = start + increments * increment
    steps = ramp_samples // start + 8
    expected = megatron_sizes(start, increment, ramp_samples, final, steps)
    schedule = BatchSchedule.of(RampUp(start, increment, ramp_samples, final))
    assert [schedule.size(b) for b in range(steps)] == expected
    assert len(schedule.sizes) <= increments + 1  # resolved in O(increments), not per batch


def test_accumulation_steps_follow_the_ramp():
    """Megatron's get_num_microbatches(): G_b / (m W), per global batch, and as the loader moves."""
    ranks = make_ranks(ids(500), world_size=2, micro_batch_size=4, global_batch_size=RampUp(8, 8, 40, 32))
    sizes = megatron_sizes(8, 8, 40, 32, 12)
    assert [ranks[0].accumulation_steps_at(b) for b in range(12)] == [s // 8 for s in sizes]
    iterators = [iter(loader) for loader in ranks]
    for b, size in enumerate(sizes):
        assert ranks[0].global_batch == b and ranks[0].global_batch_size == size and ranks[0].at_global_batch_boundary
        assert ranks[0].accumulation_steps == size // 8
        for a in range(size // 8):
            take_micro_step(iterators)
            assert ranks[0].at_global_batch_boundary == (a == size // 8 - 1)


# -- elastic restore under random schedules --------------------------------------------------------------
@st.composite
def schedules(draw, unit: int):
    """A ramp-up or a piecewise schedule whose sizes are multiples of ``unit``."""
    if draw(st.booleans(), label="ramp-up"):
        start = unit * draw(st.integers(1, 3))
        increment = unit * draw(st.integers(1, 2))
        final = start + increment * draw(st.integers(1, 3))
        return RampUp(start, increment, draw(st.integers(1, 6 * final)), final)
    count = draw(st.integers(1, 4))
    firsts = sorted(draw(st.sets(st.integers(1, 8), min_size=count - 1, max_size=count - 1)))
    return [(first, unit * draw(st.integers(1, 3))) for first in [0, *firsts]]


@st.composite
def scenarios(draw, max_workers: int):
    W, W2 = draw(st.integers(1, 3), label="W"), draw(st.integers(1, 3), label="W'")
    m, m2 = draw(st.integers(1, 3), label="m"), draw(st.integers(1, 3), label="m'")
    N, N2 = draw(st.integers(0, max_workers), label="N"), draw(st.integers(0, max_workers), label="N'")
    schedule = draw(schedules(math.lcm(m * W, m2 * W2)), label="schedule")
    resolved = BatchSchedule.of(schedule)
    first = draw(st.integers(0, 10), label="first global batch")
    return dict(
        n=draw(st.integers(1, 300), label="dataset size"),
        schedule=schedule,
        before=Topology(W, N, m),
        after=Topology(W2, N2, m2),
        start=resolved.start(first),
        batches=draw(st.integers(1, 4), label="global batches"),
        seed=draw(st.integers(0, 2**32), label="seed"),
    )


def _run(s):
    report = check_restore_everywhere(
        ids(s["n"]),
        global_batch_size=s["schedule"],
        before=s["before"],
        after=s["after"],
        start=s["start"],
        global_batches=s["batches"],
        seed=s["seed"],
        task_encoder=NoisyEncoder(),
    )
    assert report["restored"] >= 1  # at least every global-batch boundary restores


@settings(max_examples=examples(1.2))
@given(s=scenarios(max_workers=0))
def test_schedules_restore_everywhere_in_process(s):
    _run(s)


@pytest.mark.workers
@settings(max_examples=examples(0.1))
@given(s=scenarios(max_workers=2))
def test_schedules_restore_everywhere_with_worker_processes(s):
    _run(s)


@settings(max_examples=examples(0.6))
@given(
    schedule=schedules(unit=1),
    W=st.integers(1, 3),
    m=st.integers(1, 3),
    n=st.integers(1, 200),
    seed=st.integers(0, 2**32),
)
def test_global_batches_have_the_schedules_sizes_and_cover_the_reel_prefix(schedule, W, m, n, seed):
    """The global batches of a run are, in order, the schedule's sizes, and together the reel prefix
    (what an uninterrupted single-rank, one-sample-per-step run reads)."""
    S = m * W
    scaled = (
        RampUp(schedule.start * S, schedule.increment * S, schedule.ramp_samples, schedule.final * S)
        if isinstance(schedule, RampUp)
        else [(first, size * S) for first, size in schedule]
    )
    resolved = BatchSchedule.of(scaled)
    ranks = make_ranks(ids(n), world_size=W, micro_batch_size=m, global_batch_size=scaled, seed=seed)
    batches = take_global_batches(ranks, 6)
    assert [len(batch) for batch in batches] == [resolved.size(b) for b in range(6)]
    reference = datareel.Loader(ids(n), global_batch_size=scaled, micro_batch_size=1, seed=seed)
    it = iter(reference)
    prefix = [next(it)["id"].item() for _ in range(resolved.start(6))]
    assert [record["id"] for batch in batches for record in batch] == prefix
    assert [record["__positions__"] for batch in batches for record in batch] == list(range(resolved.start(6)))


@st.composite
def shifting(draw):
    """Two topologies and a schedule whose early sizes only the first divides: restores on the second
    are refused until those sizes are past, then continue on a micro-step grid that is not a multiple
    of its m·W from position 0 (global batches start off it)."""
    W, W2 = draw(st.integers(1, 2), label="W"), draw(st.integers(1, 3), label="W'")
    m, m2 = draw(st.integers(1, 2), label="m"), draw(st.integers(1, 3), label="m'")
    u, L = m * W, math.lcm(m * W, m2 * W2)
    early = [u * draw(st.integers(1, 5), label="early size") for _ in range(draw(st.integers(1, 3)))]
    late = [L * draw(st.integers(1, 2), label="late size") for _ in range(draw(st.integers(1, 2)))]
    # the size changes fall in global batches 1..5 and the window is 7 long (it was 1..9 and 12: the same
    # refusals and off-grid restores, in a window whose every-step restores cost a third as much)
    firsts = sorted(draw(st.sets(st.integers(1, 5), min_size=len(early) + len(late) - 1,
                                 max_size=len(early) + len(late) - 1)))  # fmt: skip
    return dict(schedule=list(zip([0, *firsts], early + late)), before=(W, m), after=(W2, m2))


@settings(max_examples=examples(0.5))
@given(s=shifting(), n=st.integers(1, 120), seed=st.integers(0, 2**32), kind=st.sampled_from(["plain", "packing"]))
def test_restores_past_sizes_the_new_topology_cannot_split_continue_off_the_grid(s, n, seed, kind):
    (W, m), (W2, m2) = s["before"], s["after"]
    if kind == "plain":
        dataset, options = ids(n), {"task_encoder": NoisyEncoder()}
    else:
        dataset, length = lengths_dataset([(i * 5) % 7 + 1 for i in range(n)])
        options = _packed_options("packing", length)
    report = check_restore_everywhere(
        dataset, global_batch_size=s["schedule"], before=Topology(W, 0, m), after=Topology(W2, 0, m2),
        global_batches=7, seed=seed, **options,
    )  # fmt: skip
    assert report["restored"] >= 1


@settings(max_examples=examples(0.4))
@given(
    old=schedules(unit=1),
    new=schedules(unit=6),
    boundary=st.integers(1, 9),
    after=st.sampled_from([(1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2), (1, 6), (6, 1)]),
    seed=st.integers(0, 2**32),
)
def test_after_a_change_every_micro_step_restores_everywhere(old, new, boundary, after, seed):
    """The run after a change (its schedule anchored where the old one stopped, often off the new m·W
    grid) saves at every micro-step and restores on another topology with identical global batches."""
    P = BatchSchedule.of(old).start(boundary)
    anchored = BatchSchedule(BatchSchedule.of(new).rule, (boundary, P))
    report = check_restore_everywhere(
        ids(150), global_batch_size=anchored, before=Topology(2, 0, 3), after=Topology(after[0], 0, after[1]),
        start=P, global_batches=3, seed=seed, task_encoder=NoisyEncoder(),
    )  # fmt: skip
    assert report["restored"] >= 1


def test_the_end_of_a_pass_and_sizes_it_never_reaches():
    # a pass that ends inside a global batch: the batch is done, and a size change there is not "mid-batch"
    loader = datareel.Loader(ids(13), global_batch_size=4, micro_batch_size=1, repeat=False)
    groups = [len(list(group)) for group in loader.global_batches()]
    assert groups == [4, 4, 4, 1] and loader.global_batch == 4 and loader.at_global_batch_boundary
    other = datareel.Loader(ids(13), global_batch_size=6, micro_batch_size=2, repeat=False)
    other.load_state_dict(loader.state_dict(), allow_batch_size_change=True)
    assert (
        list(other) == []
        and other.global_batch == 4
        and other.state_dict()["spec"]["global_batch_size"]
        == {
            "from": [4, 13],
            "rule": 6,
        }
    )
    # sizes past the end of a finite pass are not refused: global batch 2 starts at 8, the end of the pass
    short = datareel.Loader(ids(8), global_batch_size=[(0, 4), (2, 2), (3, 4)], micro_batch_size=4, repeat=False)
    assert [len(batch["id"]) for batch in short] == [4, 4]
    longer = datareel.Loader(ids(9), global_batch_size=[(0, 4), (2, 2), (3, 4)], micro_batch_size=4, repeat=False)
    with pytest.raises(TopologyError, match=r"global batch 2 .*global_batch_size=2"):
        iter(longer)
    with pytest.raises(TopologyError, match=r"global batch 2 .*global_batch_size=2"):
        longer.accumulation_steps_at(2)  # never a silently rounded count


def test_a_mid_batch_refusal_suggests_only_sizes_that_restore():
    schedule = [(0, 12), (1, 8), (2, 24)]
    saving = datareel.Loader(ids(100), global_batch_size=schedule, micro_batch_size=1)
    it = iter(saving)
    for _ in range(3):
        next(it)  # 3 samples into global batch 0: 3 divides the rest (9), not global batch 1 (8)
    with pytest.raises(TopologyError, match=r"in \[1\]") as refused:
        datareel.Loader(ids(100), global_batch_size=schedule, micro_batch_size=2).load_state_dict(saving.state_dict())
    assert "3" not in refused.value.args[0].split("in [")[-1]


# -- the loop-facing API ----------------------------------------------------------------------------------
def test_global_batches_groups_micro_batches_by_optimizer_step():
    loader = datareel.Loader(ids(100), global_batch_size=[(0, 4), (2, 8), (3, 2)], micro_batch_size=2)
    groups = []
    for group in loader.global_batches():
        groups.append((group.index, group.size, group.accumulation_steps, [b["id"].tolist() for b in group]))
        if len(groups) == 5:
            break
    assert [g[:3] for g in groups] == [(0, 4, 2), (1, 4, 2), (2, 8, 4), (3, 2, 1), (4, 2, 1)]
    assert [len(g[3]) for g in groups] == [2, 2, 4, 1, 1]
    # a group left half-read is refused, not silently carried into the next optimizer step
    fresh = datareel.Loader(ids(100), global_batch_size=[(0, 4), (2, 8), (3, 2)], micro_batch_size=2)
    groups_iter = fresh.global_batches()
    group = next(groups_iter)
    next(group)  # 1 of its 2 micro-batches
    with pytest.raises(datareel.DatareelError, match="not consumed to its end"):
        next(groups_iter)


def test_global_batches_end_with_a_finite_pass_and_resume_mid_batch():
    loader = datareel.Loader(ids(13), global_batch_size=[(0, 2), (3, 4)], micro_batch_size=2, repeat=False)
    sizes = [sum(len(b["id"]) for b in group) for group in loader.global_batches()]
    assert sizes == [2, 2, 2, 4, 3] and loader.cursor == 13 and loader.at_global_batch_boundary
    again = datareel.Loader(ids(13), global_batch_size=[(0, 2), (3, 4)], micro_batch_size=2, repeat=False)
    it = iter(again)
    for _ in range(4):
        next(it)  # 3 batches of 2, then the first half of batch 3
    assert again.global_batch == 3 and not again.at_global_batch_boundary
    restored = datareel.Loader(ids(13), global_batch_size=[(0, 2), (3, 4)], micro_batch_size=1, repeat=False)
    restored.load_state_dict(again.state_dict())
    groups = [(g.index, [b["id"].item() for b in g]) for g in restored.global_batches()]
    assert [index for index, _ in groups] == [3, 4] and [len(batch) for _, batch in groups] == [2, 3]


def test_sizes_the_topology_cannot_split_are_named_up_front_and_skipped_by_a_restore_past_them():
    ramp = RampUp(4, 4, 100, 16)  # 4, 8, 12, 16: m W = 8 divides only the final size of 16 and 8
    loader = datareel.Loader(ids(1000), global_batch_size=ramp, micro_batch_size=4, world_size=2, rank=0)
    with pytest.raises(TopologyError, match=r"global batch 0 .* global_batch_size=4.* = 8 does not divide"):
        iter(loader)
    with pytest.raises(TopologyError, match="is not divisible"):  # the size it settles at must divide
        datareel.Loader(ids(10), global_batch_size=RampUp(4, 4, 100, 12), micro_batch_size=8)
    # a run that passed the ramp on one rank restores on 2 ranks of 4 (Megatron checks only current sizes)
    one = datareel.Loader(ids(1000), global_batch_size=ramp, micro_batch_size=4)
    it = iter(one)
    while one.schedule.size(one.global_batch) != 16:
        next(it)
    with pytest.raises(TopologyError, match="global batch 0"):
        loader.load_state_dict(datareel.Loader(ids(1000), global_batch_size=ramp, micro_batch_size=4).state_dict())
    loader.load_state_dict(one.state_dict())
    assert loader.global_batch_size == 16 and next(iter(loader))["__positions__"].tolist()[0] == one.cursor


def test_bad_schedules_are_refused_naming_the_value_and_the_fix():
    cases = [
        ([(1, 8)], "must start at global batch 0"),
        ([(0, 8), (0, 4)], "not after the previous"),
        ([(0, 8), (2, 0)], "must be a positive integer"),
        ([], "is empty"),
        ([(0, 8, 1)], "must be a pair"),
    ]
    for schedule, message in cases:
        with pytest.raises(datareel.OptionError, match=message):
            datareel.Loader(ids(10), global_batch_size=schedule, micro_batch_size=1)
    with pytest.raises(TopologyError, match="global_batch_size=0"):  # an int out of range: as before schedules
        datareel.Loader(ids(10), global_batch_size=0, micro_batch_size=1)
    with pytest.raises(datareel.OptionError, match="not a multiple of increment"):
        RampUp(8, 3, 100, 16)
    with pytest.raises(datareel.OptionError, match="at least the start"):
        RampUp(16, 8, 100, 8)
    with pytest.raises(datareel.OptionError, match="ramp_samples=0"):
        RampUp(8, 8, 0, 16)
    # a ramp that does not ramp, and pieces of one size, are the constant they mean
    for same in (RampUp(8, 8, 100, 8), [(0, 8), (5, 8)], 8):
        assert (
            datareel.Loader(ids(10), global_batch_size=same, micro_batch_size=1).state_dict()["spec"][
                "global_batch_size"
            ]
            == 8
        )


# -- changing the batch size at a restart --------------------------------------------------------------------
def _stream(loader, count):
    it = iter(loader)
    return [p for _ in range(count) for p in next(it)["__positions__"].tolist()]


@settings(max_examples=examples(0.4))
@given(
    old=schedules(unit=2),
    new=schedules(unit=2),
    boundary=st.integers(0, 12),
    W2=st.integers(1, 2),
    seed=st.integers(0, 2**32),
)
def test_a_size_change_at_a_boundary_continues_the_same_sample_sequence(old, new, boundary, W2, seed):
    """Save at global-batch boundary ``boundary`` of ``old``, restore with ``new`` (flag on): the samples
    that follow are the uninterrupted run's, cut into ``new``'s sizes from global batch ``boundary`` on;
    a state saved after the change restores with ``new`` and no flag, and cuts the same batches."""
    data = ids(97)
    P = BatchSchedule.of(old).start(boundary)
    walker = datareel.Loader(data, global_batch_size=old, micro_batch_size=1, seed=seed)
    reference = _ids(walker, 24)  # the uninterrupted run under the old sizes: its first samples, read ...
    reference += walker.plan.resolve(np.arange(24, P + 400))[1].tolist()  # ... and the rest from its plan (id = index)
    state = edited(walker.state_dict(), cursor=P)  # the old run's state at its global-batch boundary P

    ranks = make_ranks(data, world_size=W2, micro_batch_size=1, global_batch_size=new, seed=seed)
    if BatchSchedule.of(old).rule != BatchSchedule.of(new).rule:
        with pytest.raises(StateMismatchError, match="allow_batch_size_change=True"):
            ranks[0].load_state_dict(state)
    for loader in ranks:
        loader.load_state_dict(state, allow_batch_size_change=True)
    assert ranks[0].global_batch == boundary and ranks[0].cursor == P
    batches = take_global_batches(ranks, 5)
    resolved = ranks[0].schedule
    assert [len(batch) for batch in batches] == [resolved.size(boundary + k) for k in range(5)]
    assert resolved.start(boundary) == P
    got = [record["id"] for batch in batches for record in batch]
    assert [record["__positions__"] for batch in batches for record in batch] == list(range(P, P + len(got)))
    assert got == reference[P : P + len(got)]
    # the state after the change records the new rule and where it began: it restores without the flag
    after = ranks[0].state_dict()
    again = datareel.Loader(data, global_batch_size=new, micro_batch_size=1, seed=seed)
    again.load_state_dict(json.loads(json.dumps(after)))
    assert again.schedule == resolved and again.global_batch == ranks[0].global_batch
    cursor = again.cursor
    assert _ids(again, 30) == reference[cursor : cursor + 30]


def _ids(loader, count):
    it = iter(loader)
    return [next(it)["id"].item() for _ in range(count)]


def test_a_size_change_mid_batch_or_without_the_flag_is_refused_naming_why_and_the_fix():
    data = ids(200)
    saved = datareel.Loader(data, global_batch_size=8, micro_batch_size=2)
    it = iter(saved)
    for _ in range(5):
        next(it)  # 10 samples: 2 into global batch 1
    state = saved.state_dict()
    smaller = datareel.Loader(data, global_batch_size=4, micro_batch_size=2)
    with pytest.raises(StateMismatchError, match=r"global_batch_size: saved 8, now 4.*allow_batch_size_change=True"):
        smaller.load_state_dict(state)
    with pytest.raises(TopologyError, match=r"2 samples into global batch 1 \(of 8\).*between global batches"):
        smaller.load_state_dict(state, allow_batch_size_change=True)
    # other spec fields stay checked when the size may change
    other_seed = datareel.Loader(data, global_batch_size=4, micro_batch_size=2, seed=9)
    next(it)
    with pytest.raises(StateMismatchError, match="seed"):
        other_seed.load_state_dict(saved.state_dict(), allow_batch_size_change=True)
    # at a boundary (16 = global batch 2) the change is taken; changing back needs the flag again
    next(it), next(it)
    smaller.load_state_dict(saved.state_dict(), allow_batch_size_change=True)
    assert smaller.global_batch == 2 and smaller.global_batch_size == 4 and smaller.schedule.start(3) == 20
    back = datareel.Loader(data, global_batch_size=8, micro_batch_size=2)
    with pytest.raises(StateMismatchError, match="allow_batch_size_change"):
        back.load_state_dict(smaller.state_dict())
    back.load_state_dict(smaller.state_dict(), allow_batch_size_change=True)
    assert back.cursor == 16 and back.global_batch == 2 and back.schedule.start(3) == 24


def _packed_options(kind: str, length) -> dict:
    if kind == "packing":
        return {"task_encoder": Packer(), "packing": datareel.Packing(max_length=16, length=length, window=8)}
    return {"task_encoder": Knapsack(), "stage": datareel.WindowedStage(window=8, pack=True)}


@pytest.mark.parametrize("kind", ["packing", pytest.param("online", marks=pytest.mark.workers)])
def test_a_size_change_with_packing_continues_the_same_packs(kind):
    """The same holds for packs: the cursor counts packs, and the packs after it are the saved run's.
    RampUp(2, 2, 12, 6) cuts 2, 2, 2, 4, 4, 6, ...: 4 batches end at pack 10, which 2 ranks of 3
    (6 packs a micro-step) continue from, cutting 12 packs per global batch."""
    data, length = lengths_dataset([(i * 7) % 11 + 1 for i in range(300)])
    ramp = RampUp(2, 2, 12, 6)
    reference = take_global_batches(
        [datareel.Loader(data, global_batch_size=ramp, micro_batch_size=2, seed=3, **_packed_options(kind, length))], 12
    )
    flat = [record for batch in reference for record in batch]
    saved = datareel.Loader(data, global_batch_size=ramp, micro_batch_size=2, seed=3, **_packed_options(kind, length))
    take_global_batches([saved], 4)
    state = saved.state_dict()
    assert state["cursor"] == 10 and saved.at_global_batch_boundary
    options = _packed_options(kind, length)
    ranks = make_ranks(data, world_size=2, micro_batch_size=3, global_batch_size=12, seed=3, **options)
    for loader in ranks:
        loader.load_state_dict(state, allow_batch_size_change=True)
    assert ranks[0].global_batch == 4 and ranks[0].accumulation_steps == 2
    rest = take_global_batches(ranks, 3)
    assert [len(batch) for batch in rest] == [12, 12, 12]
    assert len(flat) >= 46 and [record for batch in rest for record in batch] == flat[10:46]
    for loader in [saved, *ranks]:
        loader.close()


@pytest.mark.workers
@settings(max_examples=examples(0.25))
@given(
    W=st.integers(1, 2),
    W2=st.integers(1, 2),
    m=st.integers(1, 2),
    m2=st.integers(1, 2),
    kind=st.sampled_from(["packing", "online"]),
    lengths=st.lists(st.integers(1, 12), min_size=3, max_size=60),
    data=st.data(),
)
def test_packed_schedules_restore_everywhere(W, W2, m, m2, kind, lengths, data):
    schedule = data.draw(schedules(math.lcm(m * W, m2 * W2)), label="schedule")
    dataset, length = lengths_dataset(lengths)
    report = check_restore_everywhere(
        dataset,
        global_batch_size=schedule,
        before=Topology(W, 0, m),
        after=Topology(W2, 0, m2),
        global_batches=4,
        seed=data.draw(st.integers(0, 2**32), label="seed"),
        **_packed_options(kind, length),
    )
    assert report["restored"] >= 1


# -- the Energon facade, driven as Megatron drives it ------------------------------------------------------------
def _facade_ranks(root, W, m, global_batch_size, **kwargs):
    loaders = []
    for rank in range(W):
        config = den.WorkerConfig(rank=rank, world_size=W, num_workers=0, seed_offset=5)
        dataset = den.get_train_dataset(
            str(root), worker_config=config, batch_size=m, task_encoder=Keys(), global_batch_size=global_batch_size,
            shuffle_buffer_size=100, max_samples_per_sequence=100, **kwargs,
        )  # fmt: skip
        loaders.append(den.get_savable_loader(dataset))
    return loaders


def _megatron_iterations(loaders, iterators, consumed, count, ramp):
    """Megatron's loop: before each iteration the size from its rule, then that many micro-batches per rank
    (get_num_microbatches()); -> the global batches' keys, and the samples consumed after them."""
    batches = []
    for _ in range(count):
        size = ramp.final if consumed > ramp.ramp_samples else megatron_sizes_after(ramp, consumed)
        micro = size // (loaders[0].micro_batch_size * len(loaders))
        assert loaders[0].accumulation_steps == micro and loaders[0].global_batch_size == size
        keys = []
        for _step in range(micro):
            keys += [key for it in iterators for key in next(it)]
        assert all(loader.at_global_batch_boundary for loader in loaders) and len(keys) == size
        batches.append(keys)
        consumed += size
    return batches, consumed


def megatron_sizes_after(ramp, consumed):
    per_increment = ramp.ramp_samples / ((ramp.final - ramp.start) // ramp.increment)
    return ramp.start + int(consumed / per_increment) * ramp.increment


def test_a_megatron_loop_with_ramp_up_through_the_facade_and_a_restart_with_another_size(texts):
    """``--rampup-batch-size 4 4 40 --global-batch-size 12`` on 2 ranks of micro-batch 2: each iteration
    pulls get_num_microbatches() micro-batches and they are the global batch datareel cut; the
    checkpoint after iteration 7 restarts on 1 rank of 4 with a constant 16 (allowed by the flag)."""
    ramp = RampUp(4, 4, 40, 12)
    reference_ranks = _facade_ranks(texts, 1, 4, ramp)
    reference, _ = _megatron_iterations(reference_ranks, [iter(r) for r in reference_ranks], 0, 12, ramp)
    flat = [key for batch in reference for key in batch]

    ranks = _facade_ranks(texts, 2, 2, ramp)
    iterators = [iter(loader) for loader in ranks]
    first, consumed = _megatron_iterations(ranks, iterators, 0, 7, ramp)
    assert first == reference[:7]
    state = ranks[0].save_state_rank()
    assert state["cursor"] == consumed and state["spec"]["global_batch_size"] == {"ramp_up": [4, 4, 40, 12]}

    with pytest.raises(StateMismatchError, match="allow_batch_size_change"):
        _facade_ranks(texts, 1, 4, 16)[0].restore_state_rank(state)
    (resumed,) = _facade_ranks(texts, 1, 4, 16, allow_batch_size_change=True)
    resumed.restore_state_rank(state)
    it = iter(resumed)
    assert resumed.global_batch == 7 and resumed.accumulation_steps == 4
    rest = [key for _ in range(8) for key in next(it)]
    assert rest == flat[consumed : consumed + 32] and resumed.global_batch == 9


# -- real processes: a ramp-up on 2 gloo ranks, restarted on 3 with another size ------------------------------------
def _gloo_phase(rank: int, world: int, out_dir: str, phase: int) -> None:
    data = [{"id": i} for i in range(500)]
    steps: list[list[int]] = []
    if phase == 0:
        loader = datareel.Loader(data, global_batch_size=RampUp(4, 4, 40, 16), micro_batch_size=2, seed=7)
        it = iter(loader)
        for _iteration in range(6):  # Megatron's loop: get_num_microbatches() micro-batches per iteration
            for _ in range(loader.accumulation_steps):
                steps.append(next(it)["id"].tolist())
            if not loader.at_global_batch_boundary:
                raise AssertionError(f"rank {rank}: the iteration did not end a global batch")
        state = loader.save_state_global(dst_rank=0)
    else:
        loader = datareel.Loader(data, global_batch_size=12, micro_batch_size=2, seed=7)
        saved = json.loads(Path(out_dir, "state.json").read_text()) if rank == 0 else None
        loader.restore_state_global(saved, src_rank=0, allow_batch_size_change=True)
        for group in loader.global_batches():
            steps += [batch["id"].tolist() for batch in group]
            if group.index == 9:
                break
        state = loader.state_dict()
    Path(out_dir, f"phase{phase}-rank{rank}.json").write_text(
        json.dumps({"steps": steps, "state": state, "world": loader.world_size})
    )
    if rank == 0 and phase == 0:
        Path(out_dir, "state.json").write_text(json.dumps(state))


@pytest.mark.slow
def test_a_ramp_up_restarted_with_another_size_on_more_gloo_ranks(tmp_path):
    run_local(_gloo_phase, 2, str(tmp_path), 0, timeout=180)
    run_local(_gloo_phase, 3, str(tmp_path), 1, timeout=180)
    reference = datareel.Loader([{"id": i} for i in range(500)], global_batch_size=1, micro_batch_size=1, seed=7)
    flat = _ids(reference, 32 + 48)

    def interleave(phase, world):
        ranks = [json.loads(Path(tmp_path, f"phase{phase}-rank{r}.json").read_text()) for r in range(world)]
        assert all(r["world"] == world for r in ranks)
        return [i for step in zip(*(r["steps"] for r in ranks)) for batch in step for i in batch], ranks

    before, ranks0 = interleave(0, 2)
    assert before == flat[:32] and ranks0[0]["state"]["cursor"] == 32  # 4, 4, 4, 4, 8, 8
    after, ranks1 = interleave(1, 3)
    assert after == flat[32:80]  # global batches 6..9 of 12 samples, 2 micro-steps of 6 each
    assert all(r["state"]["spec"]["global_batch_size"] == {"from": [6, 32], "rule": 12} for r in ranks1)


# -- the operator tools read schedules ------------------------------------------------------------------------------
def test_inspect_and_verify_read_a_schedule_state_and_try_a_change(tmp_path, capsys):
    from datareel.cli import main

    (tmp_path / "ids.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(200)))
    assert main(["prepare", str(tmp_path / "ids.jsonl")]) == 0
    data = datareel.open_dataset(str(tmp_path / "ids.jsonl"))
    ramp = RampUp(4, 4, 40, 16)  # sizes 4 ×4, 8 ×2, 12, ...: 36 samples are 4 into global batch 6 (of 12)
    loader = datareel.Loader(data, global_batch_size=ramp, micro_batch_size=2)
    it = iter(loader)
    for _ in range(18):
        next(it)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(loader.state_dict()))
    capsys.readouterr()
    assert main(["inspect", str(path), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert (described["global_batch"], described["global_batch_size"], described["into_global_batch"]) == (6, 12, 4)
    assert described["schedule"].startswith("RampUp(start=4") and described["resume"]["step_must_divide"] == 4
    # every (world size, micro-batch size) inspect lists is one the loader accepts
    for W, m in described["resume"]["pairs"]:
        datareel.Loader(data, global_batch_size=ramp, micro_batch_size=m, world_size=W, rank=0).load_state_dict(
            loader.state_dict()
        )
    # verify a relaunch with another size: refused mid-batch with the flag, and without it by the spec
    args = ["verify", str(path), str(tmp_path / "ids.jsonl"), "--world-size", "1", "--micro-batch-size", "2"]
    assert main([*args, "--global-batch-size", "8"]) == 1
    assert "allow_batch_size_change=True" in capsys.readouterr().out
    assert main([*args, "--global-batch-size", "8", "--allow-batch-size-change"]) == 1
    assert "between global batches" in capsys.readouterr().out
    for _ in range(4):
        next(it)  # to 44: the end of global batch 6
    path.write_text(json.dumps(loader.state_dict()))
    assert main([*args, "--global-batch-size", "8", "--allow-batch-size-change", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["cursor"] == 44 and [batch["global_batch"] for batch in verdict["next"]] == [7, 8]
    assert [len(batch["ranks"][0]) for batch in verdict["next"]] == [8, 8]
    # a schedule on the command line, as JSON: the saved one (no flag needed), or pieces to change to
    assert main([*args, "--global-batch-size", '{"ramp_up": [4, 4, 40, 16]}', "--json"]) == 0
    assert [len(b["ranks"][0]) for b in json.loads(capsys.readouterr().out)["next"]] == [16, 16]
    pieces = ["--global-batch-size", "[[0, 4], [8, 2]]", "--allow-batch-size-change", "--json"]
    assert main([*args, *pieces]) == 0
    assert [len(b["ranks"][0]) for b in json.loads(capsys.readouterr().out)["next"]] == [4, 2]
    with pytest.raises(SystemExit):
        main([*args, "--global-batch-size", "[[1, 4]]"])
    assert "must start at global batch 0" in capsys.readouterr().err
