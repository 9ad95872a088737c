"""The windowed stage: generator encoders (0, 1 or 2 outputs per input) and online packing with
select_samples_to_pack, elastic at every micro-step (mid-window included) on other W, N and m."""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import OptionError, WindowedStage
from datareel.energon import stateless
from datareel.execute.planner import EncoderPlanner
from datareel.reel import Units, WindowPlan, WindowPlanner
from datareel.testing import Topology, check_restore_everywhere
from encoders import Knapsack, Splitter
from profiles import examples


def records(n):
    return datareel.from_sequence([{"id": i} for i in range(n)], name="records")


@st.composite
def scenarios(draw, max_workers):
    W, W2 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m, m2 = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    G = math.lcm(m * W, m2 * W2) * draw(st.integers(1, 2))
    return dict(
        G=G,
        before=Topology(W, draw(st.integers(0, max_workers)), m),
        after=Topology(W2, draw(st.integers(0, max_workers)), m2),
        n=draw(st.integers(3, 50)),
        window=draw(st.integers(1, 13)),
        batches=max(2, min(6, 24 // (G // (m * W)))),
        seed=draw(st.integers(0, 2**32)),
        repeat=draw(st.booleans()),
    )


def _restore(s, encoder, pack, background=False):
    report = check_restore_everywhere(
        records(s["n"]),
        global_batch_size=s["G"],
        before=s["before"],
        after=s["after"],
        global_batches=s["batches"],
        seed=s["seed"],
        repeat=s["repeat"],
        task_encoder=encoder,
        stage=WindowedStage(window=s["window"], pack=pack, background=background),
    )
    assert report["restored"] >= 1  # at least the state after the first global batch restores everywhere


@settings(max_examples=examples(0.3))
@given(s=scenarios(max_workers=0))
def test_generator_outputs_restore_at_every_micro_step(s):
    _restore(s, Splitter(), pack=False)


@settings(max_examples=examples(0.3))
@given(s=scenarios(max_workers=0))
def test_online_packing_restores_at_every_micro_step(s):
    _restore(s, Knapsack(), pack=True)


@pytest.mark.workers
@settings(max_examples=examples(0.04))
@given(s=scenarios(max_workers=2))
def test_windowed_stage_restores_with_worker_processes_and_background_planning(s):
    _restore(s, Knapsack(), pack=True, background=True)


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("window", [1, 4, 7, 50])
def test_one_pass_holds_every_output_exactly_once_and_counts_skips(window, pack):
    n = 37
    fixed = {i: i % 3 for i in range(n)}  # ids 0, 3, 6, ... yield nothing; 2, 5, ... yield two outputs
    encoder = Knapsack() if pack else Splitter(fixed)
    loader = datareel.Loader(
        records(n),
        global_batch_size=4,
        micro_batch_size=2,
        world_size=1,
        seed=9,
        repeat=False,
        task_encoder=encoder,
        stage=WindowedStage(window=window, pack=pack, background=False),
    )
    batches = list(loader)
    if pack:
        members = [m for b in batches for pack_members in b["members"] for m in pack_members]
        assert all(t <= Knapsack.cap for b in batches for t in b["total"])
        counts = {}
        for i, _k in members:
            counts[i] = counts.get(i, 0) + 1
        assert sorted(counts) == list(range(n)) and all(c in (1, 2) for c in counts.values())
        assert len(members) == len(set(members)) and loader.dropped == 0
    else:
        outputs = sorted((i, k) for b in batches for i, k in zip(b["id"], b["part"]))
        assert outputs == sorted((i, k) for i in range(n) for k in range(fixed[i]))
        assert loader.dropped == sum(1 for i in range(n) if fixed[i] == 0)  # skipped inputs are counted
    assert [int(p) for b in batches for p in b["__positions__"]] == list(range(loader.length))


def plain(batches):
    return [{**b, "__positions__": b["__positions__"].tolist()} for b in batches]


@pytest.mark.workers
def test_background_planning_gives_the_same_batches_and_restores():
    common = dict(global_batch_size=4, micro_batch_size=2, world_size=1, seed=4, task_encoder=Knapsack())
    inline = datareel.Loader(records(60), stage=WindowedStage(window=9, pack=True, background=False), **common)
    background = datareel.Loader(records(60), stage=WindowedStage(window=9, pack=True), **common)
    first = plain(b for _, b in zip(range(12), inline))
    assert plain(b for _, b in zip(range(12), background)) == first
    background.close()
    background = datareel.Loader(records(60), stage=WindowedStage(window=9, pack=True), **common)
    it = iter(background)
    for _ in range(5):
        next(it)
    state = background.state_dict()
    assert state["pack"][0] >= 1 and len(str(state)) < 1024
    resumed = datareel.Loader(records(60), stage=WindowedStage(window=9, pack=True), **common)
    resumed.load_state_dict(state)
    assert plain(b for _, b in zip(range(7), resumed)) == first[5:]
    background.close()
    resumed.close()


def test_the_state_names_a_changed_stage_and_bad_options_are_refused():
    common = dict(global_batch_size=2, micro_batch_size=2, task_encoder=Splitter())
    loader = datareel.Loader(records(20), stage=WindowedStage(window=4, background=False), **common)
    state = loader.state_dict()
    other = datareel.Loader(records(20), stage=WindowedStage(window=5, background=False), **common)
    with pytest.raises(datareel.StateMismatchError, match="window"):
        other.load_state_dict(state)
    with pytest.raises(OptionError, match=r"WindowedStage\(window=0\)"):
        WindowedStage(window=0)
    with pytest.raises(OptionError, match="select_samples_to_pack"):
        datareel.Loader(records(5), stage=WindowedStage(pack=True), **common)
    with pytest.raises(OptionError, match="generator encode_sample"):
        packing = datareel.Packing(max_length=4, length=lambda s, i: np.ones(len(i)))
        datareel.Loader(records(5), packing=packing, **{**common, "task_encoder": Knapsack()})


def test_a_generator_encoder_gets_the_windowed_stage_by_default_and_a_bad_selection_is_named():
    loader = datareel.Loader(records(10), global_batch_size=2, micro_batch_size=2, task_encoder=Splitter())
    assert isinstance(loader.reel, datareel.reel.WindowReel) and isinstance(loader.reel.planner, EncoderPlanner)

    class Inventing(Knapsack):
        def select_samples_to_pack(self, samples):
            return [[{"id": -1, "part": 0, "len": 1}]]

    bad = datareel.Loader(
        records(10),
        global_batch_size=2,
        micro_batch_size=2,
        task_encoder=Inventing(),
        stage=WindowedStage(window=4, pack=True, background=False),
    )
    with pytest.raises(datareel.DatareelError, match="not among its input samples"):
        next(iter(bad))


class Counting(Splitter):
    """Records which inputs the first stage ran on (inline planning, num_workers=0: all in this process)."""

    def __init__(self):
        super().__init__({})
        self.seen: list[int] = []

    def encode_sample(self, sample):
        self.seen.append(sample["id"])
        yield from super().encode_sample(sample)


def test_saving_plans_nothing_and_a_restore_plans_the_cursors_window_only():
    common = dict(global_batch_size=2, micro_batch_size=2, shuffle=False, seed=1)
    stage = WindowedStage(window=10, background=False)
    first = datareel.Loader(records(200), task_encoder=Counting(), stage=stage, **common)
    it = iter(first)
    for _ in range(30):  # well into window 5 (about one output per input)
        next(it)
    state = first.state_dict()
    window = state["pack"][0]
    assert window >= 3
    encoder = Counting()
    resumed = datareel.Loader(records(200), task_encoder=encoder, stage=stage, **common)
    resumed.state_dict()
    assert encoder.seen == []  # building a loader and saving its state plan nothing
    resumed.load_state_dict(state)
    assert sorted(set(encoder.seen)) == list(range(window * 10, window * 10 + 10))  # the cursor's window only
    next(iter(resumed))
    assert min(encoder.seen) == window * 10


failures: list = []


def three_argument_handler(exc, sample, sources):  # Energon's handler signature (module level: picklable)
    failures.append((type(exc).__name__, sample, sources))


class FailsOnSeven(Splitter):
    def encode_sample(self, sample):
        if sample["id"] == 7:
            raise ValueError("broken sample")
        yield {"id": sample["id"], "part": 0, "noise": 0}


@pytest.mark.parametrize("background", [False, pytest.param(True, marks=pytest.mark.workers)])
def test_a_planned_failure_is_left_out_and_the_handler_is_told_in_the_training_process(background):
    failures.clear()
    loader = datareel.Loader(
        records(20), global_batch_size=2, micro_batch_size=2, shuffle=False, repeat=False,
        task_encoder=FailsOnSeven(), error_handler=three_argument_handler,
        stage=WindowedStage(window=6, background=background),
    )  # fmt: skip
    ids = [i for batch in loader for i in batch["id"]]
    assert ids == [i for i in range(20) if i != 7] and loader.dropped == 1
    assert failures == [("ValueError", "7", None)]  # once, here, with Energon's three arguments
    loader.close()
    strict = datareel.Loader(
        records(20), global_batch_size=2, micro_batch_size=2, shuffle=False, task_encoder=FailsOnSeven(),
        stage=WindowedStage(window=6, background=False),
    )  # fmt: skip
    with pytest.raises(datareel.DatareelError, match="planning window 1: .*broken sample"):
        list(zip(range(10), strict))


class Leaves(Knapsack):
    """Two outputs per input; leaves every output of a length over 6 out of the packs."""

    def encode_sample(self, sample):
        for k in range(2):
            yield {"id": sample["id"], "part": k, "len": (sample["id"] * 7 + k) % 9 + 1}

    def select_samples_to_pack(self, samples):
        return super().select_samples_to_pack([s for s in samples if s["len"] <= 6])


def test_outputs_no_pack_takes_are_counted():
    loader = datareel.Loader(
        records(30), global_batch_size=2, micro_batch_size=2, repeat=False, seed=2, task_encoder=Leaves(),
        stage=WindowedStage(window=8, pack=True, background=False),
    )  # fmt: skip
    members = [m for batch in loader for pack in batch["members"] for m in pack]
    every = [(i, k) for i in range(30) for k in range(2) if (i * 7 + k) % 9 + 1 <= 6]
    assert sorted(members) == sorted(every)  # every output a pack took, exactly once
    assert loader.dropped == 60 - len(every) > 0  # the others are counted


class PrePostPlain:
    """preencode + postencode without any windowed stage: run one after the other, both reseeded."""

    def preencode_sample(self, sample):
        return {"id": sample["id"]}

    @stateless(restore_seeds=True)
    def postencode_sample(self, sample):
        return {**sample, "noise": int(np.random.randint(0, 10**6))}

    def batch(self, samples):
        return {k: [s[k] for s in samples] for k in samples[0]}


def test_preencode_and_postencode_run_without_a_stage_and_postencode_is_reseeded():
    def run():
        loader = datareel.Loader(records(8), global_batch_size=4, micro_batch_size=4, task_encoder=PrePostPlain())
        return [b["noise"] for _, b in zip(range(2), loader)]

    np.random.seed(1)
    first = run()
    np.random.seed(2)
    assert run() == first and len(set(first[0])) == 4


class SlowPlanner(WindowPlanner):
    """A planner that reports 2 s of planning per window (one output per input)."""

    def spec(self):
        return {"stage": {"encoder": "slow"}}

    def __call__(self, window, positions, source_ids, indices):
        groups = [[j] for j in range(len(positions))]
        return WindowPlan(Units.of(groups, positions, source_ids, indices, packs=False), 0, 2.0)


def test_slow_planning_is_logged_once_with_the_cheaper_paths(caplog):
    from datareel.blend import build_plan
    from datareel.plan.layout import Layout
    from datareel.reel import Cursor, WindowedReel

    plan, sources = build_plan(records(50), seed=0, shuffle=True)
    reel = WindowedReel(plan, sources, WindowedStage(window=5, background=False), SlowPlanner(), None)
    with caplog.at_level("WARNING", logger="datareel"):
        steps = reel.stream(Cursor(0, (0, 0)), Layout(global_batch_size=5, micro_batch_size=5, world_size=1), 0)
        for _ in range(10):
            next(steps)
    warnings = [r.getMessage() for r in caplog.records if "spent" in r.getMessage()]
    assert len(warnings) == 1 and "preencode_sample that only measures" in warnings[0] and "length index" in warnings[0]


class StuckInChild(SlowPlanner):
    """Plans normally in the process that made it, and hangs in any other (a stuck planning process)."""

    def __init__(self):
        self.pid = os.getpid()

    def __call__(self, window, positions, source_ids, indices):
        if os.getpid() != self.pid:
            time.sleep(600)
        plan = super().__call__(window, positions, source_ids, indices)
        return dataclasses.replace(plan, seconds=0.0)


@pytest.mark.workers
def test_a_stuck_planning_process_is_stopped_and_the_window_planned_inline(caplog):
    from datareel.blend import build_plan
    from datareel.plan.layout import Layout
    from datareel.reel import Cursor, WindowedReel

    plan, sources = build_plan(records(30), seed=0, shuffle=True)
    layout = Layout(global_batch_size=5, micro_batch_size=5, world_size=1)

    def items(background):
        stage = WindowedStage(window=5, background=background, plan_timeout=2)
        reel = WindowedReel(plan, sources, stage, StuckInChild(), None)
        steps = reel.stream(Cursor(0, (0, 0)), layout, 0)
        out = [next(steps).descriptor.positions.tolist() for _ in range(8)]
        reel.close()
        return out, reel

    with caplog.at_level("WARNING", logger="datareel"):
        stuck, reel = items(True)
    assert stuck == items(False)[0] and reel.planning.inline
    assert sum("gave no plan for window 0 within 2 s" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(OptionError, match="plan_timeout=0"):
        WindowedStage(plan_timeout=0)


class Odd(Exception):
    """An exception whose constructor takes other arguments than it stores: it pickles, but does not
    unpickle."""

    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


class FailsInChild(SlowPlanner):
    """Plans normally in the process that made it; in any other, dies (``die``) or raises ``Odd``."""

    def __init__(self, die):
        self.pid, self.die = os.getpid(), die

    def __call__(self, window, positions, source_ids, indices):
        if os.getpid() != self.pid:
            if self.die:
                os._exit(3)
            raise Odd("bad", "sample")
        return super().__call__(window, positions, source_ids, indices)


@pytest.mark.workers
@pytest.mark.parametrize("die", [True, False], ids=["dies", "raises an exception that does not unpickle"])
def test_a_failing_planning_process_is_named_promptly_and_the_window_is_not_lost(die):
    from datareel.blend import build_plan
    from datareel.plan.layout import Layout
    from datareel.reel import Cursor, WindowedReel

    plan, sources = build_plan(records(30), seed=0, shuffle=True)
    layout = Layout(global_batch_size=5, micro_batch_size=5, world_size=1)
    reel = WindowedReel(plan, sources, WindowedStage(window=5, plan_timeout=60), FailsInChild(die), None)
    for _ in range(2):  # asking again (a new stream) fails the same way (a lost window would time out, then plan)
        with pytest.raises(datareel.DatareelError) as info:
            next(reel.stream(Cursor(0, (0, 0)), layout, 0))
        if die:
            assert "planning process of the windowed stage died while planning window 0 (exit code 3" in str(info.value)
        else:
            assert str(info.value) == "Odd: bad/sample"
    reel.close()
