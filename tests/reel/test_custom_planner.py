"""A stage of one's own: a window planner defined in this module alone (nothing in src/ knows it), plugged in
with ``Loader(stage=...)``, gives the batches it planned and restores elastically on every topology, with and
without background planning and worker processes.

The stage: every ``k`` consecutive positions of a window one pack (the last pack of a window may be
shorter).  Its options (:class:`FixedPacks`) follow :class:`datareel.reel.Stage`; its planner subclasses
:class:`datareel.reel.WindowPlanner` and defines ``__call__`` and ``spec`` (and ``bound``) only.  Module level,
so both pickle by reference into worker and planning processes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

import datareel
from datareel.reel import Stage, StageContext, Units, WindowPlan, WindowPlanner
from datareel.testing import Topology, check_restore_everywhere
from encoders import Packer


@dataclass(frozen=True)
class FixedPacks:
    """Options of the fixed-count stage: packs of ``k`` consecutive positions, planned per ``window``."""

    k: int
    window: int = 7
    background: bool = False
    plan_timeout: float = 60.0

    def planner(self, context: StageContext) -> FixedPlanner:
        assert context.sources and context.plan is not None  # what a planner may read; this one needs neither
        return FixedPlanner(self.k, self.window)


class FixedPlanner(WindowPlanner):
    """Every ``k`` consecutive inputs of a window, in order, one pack."""

    def __init__(self, k: int, window: int):
        self.k, self.window = k, window

    def spec(self):
        # a window reel's state records its stage under "stage": its window and the planner's own fields
        return {"stage": {"window": self.window, "planner": "fixed", "k": self.k}}

    def bound(self, inputs):
        return inputs  # a pack holds at least one input

    def __call__(self, window, positions, source_ids, indices):
        n = len(positions)
        groups = [np.arange(a, min(a + self.k, n)) for a in range(0, n, self.k)]
        return WindowPlan(Units.of(groups, positions, source_ids, indices))


def records(n):
    return datareel.from_sequence([{"id": i, "len": 1 + i % 5} for i in range(n)], name="fixed")


def expected_packs(loader, n, k, window):
    """The packs the planner said, as (input positions, sample ids), from the plan alone."""
    out = []
    for start in range(0, n, window):
        positions = np.arange(start, min(start + window, n))
        for a in range(0, len(positions), k):
            chunk = positions[a : a + k]
            _, indices = loader.plan.resolve(chunk)
            out.append((chunk.tolist(), indices.tolist()))
    return out


@pytest.mark.parametrize("k, window", [(3, 7), (1, 4), (5, 5), (9, 4)])
def test_its_batches_are_the_packs_it_planned(k, window):
    n = 30
    loader = datareel.Loader(
        records(n), global_batch_size=2, micro_batch_size=2, repeat=False, task_encoder=Packer(),
        stage=FixedPacks(k, window),
    )  # fmt: skip
    assert isinstance(FixedPacks(k), Stage)
    got, positions = [], []
    for batch in loader:
        got += list(zip(batch["__packs__"], batch["ids"]))
        positions += batch["__positions__"].tolist()
    want = expected_packs(loader, n, k, window)
    assert got == want
    assert positions == list(range(len(want))) and loader.reel.length() == len(want)
    state = loader.state_dict()
    assert state["spec"]["stage"] == FixedPlanner(k, window).spec()["stage"] and state["pack"] == [-(-n // window), 0]
    json.dumps(state)


def test_a_state_of_another_stage_is_refused():
    common = dict(global_batch_size=2, micro_batch_size=2, task_encoder=Packer())
    loader = datareel.Loader(records(20), stage=FixedPacks(3), **common)
    next(iter(loader))
    with pytest.raises(datareel.StateMismatchError, match="stage"):
        datareel.Loader(records(20), stage=FixedPacks(2), **common).load_state_dict(loader.state_dict())


INLINE = [  # (before, after, background): G = 6, in this process
    (Topology(1, 0, 2), Topology(2, 0, 1), False),
    (Topology(2, 0, 1), Topology(3, 0, 2), False),
    (Topology(3, 0, 1), Topology(1, 0, 6), False),
]
PROCESSES = [  # worker processes, a planning process, or both
    (Topology(3, 0, 2), Topology(1, 0, 3), True),
    (Topology(2, 2, 1), Topology(1, 1, 3), False),
    (Topology(1, 2, 3), Topology(3, 1, 1), True),
]


def _restores(before, after, background, repeat):
    report = check_restore_everywhere(
        records(40), global_batch_size=6, before=before, after=after, global_batches=4, seed=3, repeat=repeat,
        task_encoder=Packer(), stage=FixedPacks(3, 7, background=background),
    )  # fmt: skip
    assert report["restored"] >= 1 and report["steps"] >= 3


@pytest.mark.parametrize("repeat", [True, False], ids=["endless", "one pass"])
@pytest.mark.parametrize("before, after, background", INLINE)
def test_a_planner_of_its_own_restores_everywhere(before, after, background, repeat):
    _restores(before, after, background, repeat)


@pytest.mark.workers
@pytest.mark.parametrize("repeat", [True, False], ids=["endless", "one pass"])
@pytest.mark.parametrize("before, after, background", PROCESSES)
def test_a_planner_of_its_own_restores_everywhere_with_processes(before, after, background, repeat):
    _restores(before, after, background, repeat)


def test_an_object_that_is_not_a_stage_is_named():
    with pytest.raises(datareel.OptionError, match="planner"):
        datareel.Loader(records(5), global_batch_size=1, micro_batch_size=1, stage=object())


@dataclass(frozen=True)
class PackingFlagged(FixedPacks):
    """A stage of the user's whose options happen to have a ``pack`` field: not the windowed stage."""

    pack: bool = True


def test_a_stage_with_a_pack_field_is_not_taken_for_the_windowed_stage():
    loader = datareel.Loader(
        records(12), global_batch_size=2, micro_batch_size=2, repeat=False, task_encoder=Packer(),
        stage=PackingFlagged(3, 4),
    )  # fmt: skip
    assert [p for batch in loader for p in batch["__packs__"]] == [[0, 1, 2], [3], [4, 5, 6], [7], [8, 9, 10], [11]]


def test_verify_rebuilds_a_stage_of_its_own_only_from_the_jobs_stage_object():
    from datareel.cli.verify import verify_state

    common = dict(global_batch_size=2, micro_batch_size=2, task_encoder=Packer())
    loader = datareel.Loader(records(20), stage=FixedPacks(3), **common)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    with pytest.raises(datareel.OptionError, match="stage of the job's own.*stage=YourStage"):
        verify_state(state, records(20), world_size=1, micro_batch_size=2, task_encoder=Packer())
    verdict = verify_state(
        state, records(20), world_size=2, micro_batch_size=1, task_encoder=Packer(), stage=FixedPacks(3)
    )
    assert verdict["ok"], verdict
    verdict = verify_state(
        state, records(20), world_size=1, micro_batch_size=2, task_encoder=Packer(), stage=FixedPacks(2)
    )
    assert not verdict["ok"] and "stage" in str(verdict["error"])
