"""State consistency (issue 12): any state a loader writes restores into an identical stream; any
mutated or spliced state is refused with a DatareelError or continues that very stream, never another.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import DatareelError, Packing, StateMismatchError
from datareel.testing import make_ranks, take_global_batches
from profiles import examples

LENGTHS = np.random.default_rng(7).integers(1, 9, size=37)


class Packer:
    """Packs keep their sample ids, so a stream is compared sample by sample."""

    def encode_sample(self, sample):
        return sample

    def pack_selected_samples(self, samples):
        return {"ids": [s["id"] for s in samples]}

    def batch(self, packs):
        return {"ids": [p["ids"] for p in packs]}


def build(packed: bool, W: int, m: int, accumulation: int, window: int = 5) -> list[datareel.Loader]:
    data = datareel.from_sequence([{"id": i, "len": int(n)} for i, n in enumerate(LENGTHS)], name="docs")
    extra = {}
    if packed:
        extra = dict(
            task_encoder=Packer(),
            packing=Packing(max_length=12, length=lambda source, idx: LENGTHS[idx], window=window),
        )
    return make_ranks(data, world_size=W, global_batch_size=W * m * accumulation, micro_batch_size=m, seed=3, **extra)


def continuation(loaders: list[datareel.Loader], state: dict | None, count: int = 3) -> list:
    if state is not None:
        for loader in loaders:
            loader.load_state_dict(copy.deepcopy(state))
    return take_global_batches(loaders, count)


def _delta(value: int) -> st.SearchStrategy[int]:
    return st.integers(-3, 9).filter(lambda d: d != 0 and value + d >= 0)


def mutations(state: dict) -> st.SearchStrategy:
    """Single-field edits of a state, each a (description, new state) pair."""

    def setting(path, value):
        new = copy.deepcopy(state)
        target = new
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return (f"{'.'.join(map(str, path))}={value!r}", new)

    def deleting(key):
        return (f"del {key}", {k: v for k, v in state.items() if k != key})

    options = [
        _delta(state["cursor"]).map(lambda d: setting(["cursor"], state["cursor"] + d)),
        st.sampled_from(sorted(state)).map(deleting),
        st.sampled_from([1.5, "0", None, [0], -1, 2**63]).map(lambda v: setting(["cursor"], v)),
        st.just(setting(["check"], "0" * 16)),
        st.just(setting(["version"], 2)),
        st.just(setting(["format"], "datareel.other")),
        st.just(setting(["extra"], {"note": "added by hand"})),
        st.just(setting(["spec", "seed"], state["spec"]["seed"] + 1)),
        st.just(setting(["spec", "shuffle"], not state["spec"]["shuffle"])),
        st.just(setting(["spec", "global_batch_size"], state["spec"]["global_batch_size"] * 2)),
        st.just(setting(["spec", "dataset", "size"], state["spec"]["dataset"]["size"] + 1)),
    ]
    if "pack" in state:
        w, o = state["pack"]
        options += [
            _delta(w).map(lambda d: setting(["pack"], [w + d, o])),
            _delta(o).map(lambda d: setting(["pack"], [w, o + d])),
            st.just(setting(["pack"], [w])),
            st.just(setting(["spec", "packing", "max_length"], state["spec"]["packing"]["max_length"] + 1)),
        ]
    return st.one_of(options)


TOPOLOGY = dict(
    packed=st.booleans(),
    W=st.integers(1, 3),
    m=st.integers(1, 3),
    accumulation=st.integers(1, 2),
    steps=st.integers(0, 9),
)


@settings(max_examples=examples(0.6))
@given(**TOPOLOGY)
def test_every_state_a_loader_writes_restores_the_same_stream(packed, W, m, accumulation, steps):
    loaders = build(packed, W, m, accumulation)
    iterators = [iter(loader) for loader in loaders]
    take_global_batches(loaders, steps, iterators)
    state = json.loads(json.dumps(loaders[0].state_dict()))  # through JSON, as a checkpoint would carry it
    assert all(loader.state_dict() == state for loader in loaders)
    expected = take_global_batches(loaders, 3, iterators)
    assert continuation(build(packed, W, m, accumulation), state) == expected
    other = dict(W=1, m=1, accumulation=W * m * accumulation)  # another topology, the same global batch size
    assert continuation(build(packed, **other), state) == expected


@settings(max_examples=examples(1.5))
@given(**TOPOLOGY, data=st.data())
def test_a_mutated_state_is_refused_or_continues_the_same_stream(packed, W, m, accumulation, steps, data):
    loaders = build(packed, W, m, accumulation)
    iterators = [iter(loader) for loader in loaders]
    take_global_batches(loaders, steps, iterators)
    state = loaders[0].state_dict()
    expected = take_global_batches(loaders, 3, iterators)
    what, mutated = data.draw(mutations(state))
    fresh = build(packed, W, m, accumulation)
    try:
        got = continuation(fresh, mutated)
    except DatareelError:
        return  # refused: fine
    assert got == expected, f"{what} was accepted and continued another stream"


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
def test_a_state_spliced_from_two_checkpoints_is_refused_naming_the_check(packed):
    loaders = build(packed, 1, 2, 1, window=4)
    it = iter(loaders[0])
    states = []
    for _ in range(6):
        next(it)
        states.append(loaders[0].state_dict())
    early, late = states[1], states[4]
    spliced = {**late, "cursor": early["cursor"]}  # the cursor of one, the pack (and check) of the other
    with pytest.raises(StateMismatchError, match=r"check=.*edited, or spliced") as info:
        build(packed, 1, 2, 1, window=4)[0].load_state_dict(spliced)
    assert set(info.value.differences) == {"check"}
    if packed:
        spliced = {**early, "pack": late["pack"]}
        with pytest.raises(StateMismatchError, match=r"pack=\[\d+, \d+\]"):
            build(packed, 1, 2, 1, window=4)[0].load_state_dict(spliced)


def test_a_state_without_check_is_read_as_a_0_1_0_state():
    """States written before ``check`` existed restore as they did (the golden states pin this too)."""
    loaders = build(True, 1, 2, 1)
    next(iter(loaders[0]))
    state = {k: v for k, v in loaders[0].state_dict().items() if k != "check"}
    fresh = build(True, 1, 2, 1)
    fresh[0].load_state_dict(state)
    assert fresh[0].state_dict()["cursor"] == state["cursor"]
