"""Golden states written before issue 26's redesign (commit 4fb4948) load and continue identically.

``tests/data/golden_states_pre26.json`` (see ``golden_pre26.py``) pins what the 0.1.0 golden file cannot:
the windowed stage's ``stage``, global batch schedules (ramp-up, pieces, anchored after a change), a
length function's fingerprint, ``dataset.content``, ``check``, a filtered JSONL source and
``shuffle=False``.  One test per golden state and check: today's code writes the same bytes, in the same
key order, for the same recipe; and the saved state restores onto the same next batch on the saving
topology and on another one.
"""

from __future__ import annotations

import json

import pytest
from golden_pre26 import GOLDEN, RECIPES, build, started

from datareel.state import Spec, check_state
from golden import plain

ENTRIES = json.loads(GOLDEN.read_text())["entries"]
IDS = [f"{e['recipe']}-{e['steps']}" for e in ENTRIES]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("golden_pre26")


def test_every_recipe_has_its_golden_states():
    assert sorted({e["recipe"] for e in ENTRIES}) == sorted(RECIPES)
    assert len(ENTRIES) == sum(len(steps) for steps in RECIPES.values())


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_the_same_recipe_writes_the_same_state_bytes(entry, tmp):
    loader = started(entry["recipe"], tmp)
    it = iter(loader)
    for _ in range(entry["steps"]):
        next(it)
    if entry["next_batch"] is None:  # the recorded state was taken after the pass ended
        assert next(it, None) is None
    assert json.dumps(loader.state_dict()) == entry["state"]  # bytes and key order
    loader.close()


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_the_spec_reads_and_writes_back_unchanged(entry):
    state = check_state(json.loads(entry["state"]))
    assert json.dumps(Spec.from_json(state["spec"]).to_json()) == json.dumps(state["spec"])


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
@pytest.mark.parametrize("topology", [dict(world_size=2, micro_batch_size=2), dict(world_size=1, micro_batch_size=4)])
def test_an_old_state_restores_onto_the_same_continuation(entry, topology, tmp):
    state = json.loads(entry["state"])
    loader = build(entry["recipe"], tmp, **topology)  # "anchored": the changed rule, and no flag needed now
    loader.load_state_dict(state)
    assert json.dumps(loader.state_dict()) == entry["state"]  # restored verbatim
    batch = next(iter(loader), None)
    expected = entry["next_batch"]
    if expected is None:
        assert batch is None
    elif topology["world_size"] == 2:
        assert plain(batch) == expected
    else:  # rank 0 of 1 rank with m=4 reads the old rank 0's two items first
        got = plain(batch)
        for key, values in expected.items():
            assert _head(got[key], values) == values, key
    loader.close()


def _head(got, values):
    """The first ``len(values)`` items of ``got`` (nested the same way, for a dict of columns)."""
    if isinstance(values, dict):
        return {k: _head(got[k], v) for k, v in values.items()}
    return got[: len(values)]
