"""The saved spec as a schema: ``datareel.state.Spec`` (fields, to_json / from_json, diff) and the field table.

Every field a state records has a check and a guarantee (the windowed stage's ``stage`` included); a spec
reads and writes back byte for byte (every golden state); a damaged one is a ``StateDamagedError`` naming
the field; ``diff`` lists ``(field, saved, now, protects)`` and a refused restore's message is built from it.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import closing

import pytest
from golden_pre26 import GOLDEN as GOLDEN_PRE26

import datareel
from datareel.errors import OptionError, StateDamagedError, StateMismatchError
from datareel.plan.schedule import BatchSchedule, RampUp
from datareel.reel.cursor import Cursor
from datareel.state import FIELDS, GUARANTEES, Spec, check_state, make_state, mismatch, read_state
from golden import GOLDEN as GOLDEN_0_1_0

GOLDEN_STATES = [
    json.loads(entry["state"])
    for path in (GOLDEN_0_1_0, GOLDEN_PRE26)
    for entry in json.loads(path.read_text())["entries"]
]


FIELDS_ORDER = ["seed", "shuffle", "global_batch_size", "dataset", "locality", "packing", "stage"]


def loader(**options):
    options = {"global_batch_size": 4, "micro_batch_size": 2, "seed": 3, **options}
    return datareel.Loader(datareel.from_sequence([{"id": i} for i in range(40)], name="records"), **options)


class Splitter:
    def encode_sample(self, sample):
        yield sample

    def batch(self, samples):
        return samples


def windowed(window=4, pack=False):
    stage = datareel.WindowedStage(window=window, pack=pack, background=False)
    return loader(task_encoder=Splitter(), stage=stage)


def test_every_field_has_a_check_and_a_guarantee_stage_included():
    names = [field.name for field in FIELDS]
    assert names == FIELDS_ORDER
    assert [f.name for f in dataclasses.fields(Spec)] == [*names, "extra"]
    assert set(GUARANTEES) == {"version", *names}
    assert "windowed stage" in GUARANTEES["stage"] and "encoder" in GUARANTEES["stage"]
    assert all(field.protects == GUARANTEES[field.name] and callable(field.check) for field in FIELDS)


@pytest.mark.parametrize("state", GOLDEN_STATES, ids=lambda s: f"cursor{s['cursor']}-{sorted(s['spec'])}")
def test_every_golden_spec_reads_and_writes_back_unchanged(state):
    spec = Spec.from_json(check_state(state)["spec"])
    assert json.dumps(spec.to_json(), sort_keys=True) == json.dumps(state["spec"], sort_keys=True)
    assert list(spec.to_json()) == [name for name in FIELDS_ORDER if name in state["spec"]]  # the order written
    assert spec == Spec.from_json(spec.to_json()) and spec.diff(state["spec"]) == []
    assert spec.packed == ("pack" in state)


def test_a_loader_spec_as_a_spec_writes_the_same_state():
    with closing(windowed()) as made:
        it = iter(made)
        next(it)
        state = made.state_dict()
    spec = Spec.from_json(state["spec"])
    cursor = Cursor(state["cursor"], tuple(state["pack"]))
    assert json.dumps(make_state(cursor, spec)) == json.dumps(make_state(cursor, state["spec"])) == json.dumps(state)
    assert read_state(state, spec) == read_state(state, state["spec"]) == cursor


def test_a_spec_holds_no_mutable_value():
    spec = Spec.from_json(
        {"seed": 1, "shuffle": True, "global_batch_size": 4, "dataset": {"name": "a", "size": 1, "digest": "0"}}
    )
    with pytest.raises(TypeError):
        spec.dataset["name"] = "b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 2  # type: ignore[misc]
    written = spec.to_json()
    written["dataset"]["name"] = "b"  # a copy
    assert spec.dataset["name"] == "a"
    with pytest.raises(OptionError, match="seed"):
        Spec(seed=1, shuffle=True, global_batch_size=4, dataset={}, extra={"seed": 2})


def _spec(**fields):
    base = {"seed": 1, "shuffle": True, "global_batch_size": 4, "dataset": {"name": "a", "size": 5, "digest": "0"}}
    return {**base, **fields}


@pytest.mark.parametrize(
    "spec,named",
    [
        ("not a dict", "spec="),
        ({k: v for k, v in _spec().items() if k != "seed"}, "no 'seed'"),
        ({k: v for k, v in _spec().items() if k != "dataset"}, "no 'dataset'"),
        (_spec(seed=-1), "spec.seed"),
        (_spec(seed=True), "spec.seed"),
        (_spec(shuffle=1), "spec.shuffle"),
        (_spec(global_batch_size=0), "global_batch_size"),
        (_spec(global_batch_size={"ramp_up": [4, 4]}), "global_batch_size"),
        (_spec(dataset=[]), "spec.dataset"),
        (_spec(dataset={"name": "a", "size": "5", "digest": "0"}), "spec.dataset.size"),
        (_spec(dataset={"name": "a", "size": 5, "digest": "0", "sources": [["a", 1]]}), r"spec.dataset.sources\[0\]"),
        (_spec(packing={"max_length": 0, "window": 1, "over_length": "error", "length": "bytes"}), "max_length"),
        (_spec(packing={"max_length": 8, "window": 1, "over_length": "error", "length": 3}), "spec.packing.length"),
        (_spec(stage={"window": 4, "pack": "no", "encoder": None}), "spec.stage.pack"),
        (_spec(stage={"window": 4, "pack": False}), "no 'encoder'"),
        (_spec(extra={"a": {1, 2}}), "set"),
        (_spec(dataset={"name": "a" * 5000, "size": 5, "digest": "0"}), "spec.dataset.name"),
    ],
)
def test_a_damaged_spec_is_refused_naming_the_field(spec, named):
    with pytest.raises(StateDamagedError, match=named) as refused:
        Spec.from_json(spec)
    assert "damaged" in str(refused.value) and not isinstance(refused.value, StateMismatchError)


def test_fields_of_a_later_release_are_kept_and_compared():
    spec = Spec.from_json(_spec(later={"x": 1}))
    assert spec.extra == {"later": {"x": 1}} and spec.to_json()["later"] == {"x": 1}
    assert spec.diff(_spec(later={"x": 2})) == [("later", {"x": 1}, {"x": 2}, "the reel")]


def test_diff_names_each_field_with_both_values_and_what_it_protects():
    saved = Spec.from_json(_spec(stage={"window": 4, "pack": False, "encoder": "m.E"}))
    now = _spec(seed=2, stage={"window": 8, "pack": False, "encoder": "m.E"})
    assert saved.diff(saved) == []
    assert saved.diff(now) == [
        ("seed", 1, 2, GUARANTEES["seed"]),
        ("stage", {"window": 4, "pack": False, "encoder": "m.E"}, now["stage"], GUARANTEES["stage"]),
    ]
    gone = saved.diff(_spec())
    assert gone == [("stage", {"window": 4, "pack": False, "encoder": "m.E"}, None, GUARANTEES["stage"])]


def test_a_refused_restore_is_the_message_built_from_diff():
    with closing(loader()) as made:
        state = made.state_dict()
    with closing(loader(seed=4, global_batch_size=8)) as other:
        with pytest.raises(StateMismatchError) as refused:
            other.load_state_dict(state)
        expected = mismatch(Spec.from_json(state["spec"]).diff(other.state_dict()["spec"]))
    assert str(refused.value) == str(expected)
    assert refused.value.differences == expected.differences == {"seed": (3, 4), "global_batch_size": (4, 8)}
    assert "- seed: saved 3, now 4 — protects the order of the reel" in str(refused.value)


def test_a_changed_windowed_stage_is_refused_naming_what_stage_protects():
    with closing(windowed(window=4)) as made:
        next(iter(made))
        state = made.state_dict()
    with closing(windowed(window=6)) as other, pytest.raises(StateMismatchError, match="stage") as refused:
        other.load_state_dict(state)
    assert set(refused.value.differences) == {"stage"}
    assert f"protects {GUARANTEES['stage']}" in str(refused.value)  # not "protects the reel"


@pytest.mark.parametrize(
    "rule", [12, RampUp(4, 4, 40, 12), [(0, 4), (3, 8)], BatchSchedule(12, (2, 16)), BatchSchedule(RampUp(2, 2, 9, 6))]
)
def test_a_schedule_owns_its_json_both_ways(rule):
    schedule = BatchSchedule.of(rule)
    written = schedule.to_json()
    assert json.loads(json.dumps(written)) == written
    assert BatchSchedule.from_json(written) == schedule
    assert Spec.from_json(_spec(global_batch_size=written)).schedule() == schedule
    if isinstance(schedule.rule, RampUp):
        assert RampUp.from_json(schedule.rule.to_json()) == schedule.rule
