"""I5 + I6: the state is small and O(1); a state from another spec is refused loudly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import DatareelError, Loader, StateMismatchError, TopologyError
from profiles import examples
from state_edit import edited


def make(n=100, name="data", **kwargs):
    kwargs = {"global_batch_size": 12, "micro_batch_size": 2, "seed": 1, **kwargs}
    return Loader(datareel.from_sequence(list(range(n)), name=name), **kwargs)


def saved(**kwargs):
    loader = make(**kwargs)
    it = iter(loader)
    for _ in range(3):
        next(it)
    return loader.state_dict()


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(seed=2), "seed"),
        (dict(global_batch_size=24), "global_batch_size"),
        (dict(shuffle=False), "shuffle"),
        (dict(n=101), "dataset"),
        (dict(name="other"), "dataset"),
    ],
)
def test_mismatch_names_the_field_and_the_guarantee(change, field):
    state = saved()
    with pytest.raises(StateMismatchError) as err:
        make(**change).load_state_dict(state)
    assert set(err.value.differences) == {field}
    assert field in str(err.value) and "protects" in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, DatareelError)


def test_every_differing_field_is_named():
    state = saved()
    with pytest.raises(StateMismatchError) as err:
        make(seed=5, global_batch_size=6, n=7).load_state_dict(state)
    assert set(err.value.differences) == {"seed", "global_batch_size", "dataset"}
    for field in ("seed", "global_batch_size", "dataset"):
        assert f"- {field}:" in str(err.value)


def test_version_and_foreign_states_refused():
    state = saved()
    with pytest.raises(StateMismatchError, match="version"):
        make().load_state_dict({**state, "version": 99})
    with pytest.raises(DatareelError, match="not a datareel loader state"):
        make().load_state_dict({"dataset_state": {}})
    with pytest.raises(DatareelError, match="written by Megatron-Energon"):
        make().load_state_dict({"dataset_state": {}, "worker_states": []})
    with pytest.raises(DatareelError, match="cursor"):
        make().load_state_dict(edited(state, cursor=-3))
    with pytest.raises(DatareelError, match="dict"):
        make().load_state_dict("state.json")


def test_world_size_that_cannot_split_the_rest_names_the_values():
    state = saved()  # 3 micro-steps of 2 × 1 = cursor 6, half-way into a global batch of 12
    assert state["cursor"] == 6
    with pytest.raises(TopologyError) as err:
        make(micro_batch_size=1, rank=0, world_size=4).load_state_dict(state)
    assert "micro_batch_size=1" in str(err.value) and "world_size=4" in str(err.value) and "6" in str(err.value)
    make(micro_batch_size=3, rank=1, world_size=2).load_state_dict(state)  # 6 splits into one step of 6


def test_world_size_not_dividing_global_batch_over_micro_batch():
    with pytest.raises(ValueError) as err:
        make(micro_batch_size=2, rank=0, world_size=5)
    assert "global_batch_size=12" in str(err.value) and "world_size=5" in str(err.value)


@settings(max_examples=examples(0.5))
@given(n=st.integers(1, 10**15), W=st.integers(1, 4096), N=st.integers(0, 64), cursor=st.integers(0, 10**18))
def test_state_size_does_not_grow(n, W, N, cursor):
    class Huge:
        def __len__(self):
            return n

        def __getitem__(self, i):
            return i

    loader = Loader(
        datareel.from_sequence(Huge(), name="x" * 200),
        global_batch_size=W * 8,
        micro_batch_size=8,
        rank=W - 1,
        world_size=W,
    )
    state = edited(loader.state_dict(), cursor=cursor // (W * 8) * (W * 8))
    loader.load_state_dict(state)
    encoded = json.dumps(loader.state_dict())
    assert len(encoded) < 1024
    assert json.loads(encoded) == loader.state_dict()
