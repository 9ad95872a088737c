"""Every refusal of a saved state is a ``StateError`` of the kind it is: foreign, another version, damaged,
a failed check, or another spec (``datareel.errors``); never a bare ``DatareelError``.

``StateVersionError`` and ``StateCheckError`` stay ``StateMismatchError`` s (with ``differences``), as they
were before the family existed, so ``except StateMismatchError`` keeps catching them.
"""

from __future__ import annotations

import json
from contextlib import closing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_states import HOSTILE, KINDS, _mutated, _paths, make, resealed, state_of

import datareel
from datareel.cli.inspect_state import describe_state, load_state_file
from datareel.errors import (
    DatareelError,
    ForeignStateError,
    OptionError,
    StateCheckError,
    StateDamagedError,
    StateError,
    StateMismatchError,
    StateVersionError,
    TopologyError,
)
from datareel.plan.schedule import BatchSchedule
from datareel.state import check_state, read_state
from state_edit import edited


def spec_of(kind):
    with closing(make(kind)) as loader:
        return loader.state_dict()["spec"]


def refusal(call):
    with pytest.raises(DatareelError) as refused:
        call()
    return refused.value


def test_a_state_that_is_not_datareels_is_foreign():
    state = state_of("plain")
    for foreign in ({"dataset_state": {}, "worker_states": []}, "state.json", [1, 2], {**state, "format": "x"}):
        assert type(refusal(lambda foreign=foreign: check_state(foreign))) is ForeignStateError


def test_another_version_is_foreign_and_still_a_mismatch():
    error = refusal(lambda: check_state({**state_of("plain"), "version": 2}))
    assert type(error) is StateVersionError
    assert isinstance(error, ForeignStateError) and isinstance(error, StateMismatchError)
    assert error.differences == {"version": (2, 1)}


def test_a_failed_check_is_damage_and_still_a_mismatch():
    state = state_of("packed")
    error = refusal(lambda: check_state({**state, "cursor": state["cursor"] + 2}))
    assert type(error) is StateCheckError
    assert isinstance(error, StateDamagedError) and isinstance(error, StateMismatchError)
    assert set(error.differences) == {"check"}


@pytest.mark.parametrize(
    "change",
    [
        dict(cursor=-1),
        dict(cursor="3"),
        dict(pack=[1]),
        dict(unknown=1),
        dict(spec={"seed": 1}),
        dict(spec=None),
        dict(cursor=2**70),
        dict(pack=None),
    ],
    ids=str,
)
def test_a_damaged_state_is_damaged_not_a_mismatch(change):
    error = refusal(lambda: check_state(edited(state_of("packed"), **change)))
    assert type(error) is StateDamagedError, str(error)


def test_a_damaged_schedule_is_damaged():
    assert type(refusal(lambda: BatchSchedule.from_spec({"ramp_up": [1]}))) is StateDamagedError
    anchored = BatchSchedule(12, (2, 16))
    assert type(refusal(lambda: anchored.batch_at(15))) is StateDamagedError
    assert type(refusal(lambda: anchored.size(1))) is TopologyError  # a question about a batch it never cut


def test_another_spec_is_a_plain_mismatch():
    state = state_of("plain")
    error = refusal(lambda: read_state(state, {**state["spec"], "seed": 99}))
    assert type(error) is StateMismatchError and set(error.differences) == {"seed"}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kind=st.sampled_from(KINDS), data_=st.data())
def test_every_refusal_of_a_mutated_state_is_a_state_error(kind, data_):
    state = state_of(kind)
    path = data_.draw(st.sampled_from([p for p, _ in _paths(state)]), label="path")
    action = data_.draw(st.sampled_from(["replace", "replace", "delete", "extra"]), label="action")
    mutated = _mutated(state, path, action, data_.draw(HOSTILE, label="value"))
    if data_.draw(st.booleans(), label="reseal") and isinstance(mutated, dict):
        try:
            mutated = resealed(mutated)
        except (TypeError, ValueError, RecursionError):
            pass  # not JSON: its check cannot be recomputed
    for call in (lambda: check_state(mutated), lambda: read_state(mutated, spec_of(kind))):
        try:
            call()
        except StateError as exc:
            assert str(exc)
    try:
        describe_state(mutated)
    except (StateError, TopologyError) as exc:  # TopologyError: a schedule asked of a batch before its anchor
        assert str(exc)


def test_the_files_inspect_reads_refuse_by_kind(tmp_path):
    state = state_of("plain")

    def write(name, text):
        (tmp_path / name).write_text(text)
        return tmp_path / name

    foreign = write("energon.json", json.dumps({"dataset_state": {}, "worker_states": []}))
    assert type(refusal(lambda: load_state_file(foreign))) is ForeignStateError
    none = write("none.json", json.dumps({"model": 1}))
    assert type(refusal(lambda: load_state_file(none))) is ForeignStateError
    broken = write("broken.json", "{not json")
    assert type(refusal(lambda: load_state_file(broken))) is StateDamagedError
    damaged = write("damaged.json", json.dumps({"loader": edited(state, cursor=-1)}))
    error = refusal(lambda: load_state_file(damaged))
    assert type(error) is StateDamagedError and "damaged.json (at loader)" in str(error)
    old = write("old.json", json.dumps({**state, "version": 7}))
    error = refusal(lambda: load_state_file(old))
    assert type(error) is StateVersionError and error.differences == {"version": (7, 1)} and "old.json" in str(error)
    two = write("two.json", json.dumps({"a": state, "b": edited(state, cursor=0)}))
    assert type(refusal(lambda: load_state_file(two))) is OptionError
    assert type(refusal(lambda: load_state_file(two, "c"))) is OptionError
    assert load_state_file(two, "b")[0]["cursor"] == 0


def test_permute_of_an_empty_domain_is_an_option_error():
    from datareel.plan.permute import permute
    from datareel.plan.rng import permutation_keys

    with pytest.raises(OptionError, match="n=0") as refused:
        permute(0, 0, permutation_keys(1, 0, 0))
    assert isinstance(refused.value, ValueError)


def test_every_state_error_kind_is_public():
    for name in ("StateError", "StateMismatchError", "StateDamagedError", "ForeignStateError"):
        assert issubclass(getattr(datareel, name), StateError)
