"""Restoring a windowed stage's state with another task encoder class.

A window's units are planned from its inputs by the encoder, so a state saved at a window's start (nothing of
that window handed out, every window before it handed out whole) may continue with any encoder class: every
input is still served once, and an encoder that plans alike continues with the very same global batches.
Inside a window the units handed out were planned by the saved encoder, so another class is refused there,
naming the window.  Property-tested over random sizes, windows and topologies (before and after the restore).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import datareel
from datareel import StateMismatchError, WindowedStage
from datareel.testing import make_ranks, take_global_batches
from profiles import examples

SKIPPED = 5  # an input whose id % SKIPPED == 2 yields no output (windows of uneven sizes)


class Singles:
    """One output per input (none for the skipped ones); every output a pack of its own."""

    def encode_sample(self, sample):
        if sample["id"] % SKIPPED != 2:
            yield {"id": sample["id"]}

    def select_samples_to_pack(self, samples):
        return [[s] for s in samples]

    def pack_selected_samples(self, samples):
        return {"ids": [s["id"] for s in samples]}

    def batch(self, packs):
        return {"ids": [p["ids"] for p in packs]}


class Renamed(Singles):
    """Another class that plans alike."""


class Pairs(Singles):
    """Another class that plans otherwise: packs of two outputs."""

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]


class Twos(Pairs):
    """Another class that plans as ``Pairs`` does."""


def _ranks(encoder, n, window, G, world, micro):
    return make_ranks(
        datareel.from_sequence([{"id": i} for i in range(n)], name="records"),
        world_size=world,
        global_batch_size=G,
        micro_batch_size=micro,
        seed=7,
        repeat=False,
        task_encoder=encoder,
        stage=WindowedStage(window=window, pack=True, background=False),
    )


def _ids(global_batches):
    return [i for batch in global_batches for record in batch for i in record["ids"]]


def _states(n, window, G, world, micro):
    """Every global batch of the pass with ``Singles``, and the state after each (rank 0's: all ranks agree)."""
    loaders = _ranks(Singles(), n, window, G, world, micro)
    its = [iter(loader) for loader in loaders]
    batches, states = [], []
    while True:
        got = take_global_batches(loaders, 1, its)
        if not got:
            break
        batches += got
        states.append(loaders[0].state_dict())
    for loader in loaders:
        loader.close()
    return batches, states


def _steps(encoder, n, window, G, world, micro, state=None):
    """The pass micro-step by micro-step (from ``state``), ranks in lockstep: each step's units as
    ``(position, ids)`` (positions from the rank's :meth:`~datareel.Loader.next_address`, whose
    :meth:`~datareel.Loader.remake` must give the batch again), the state after it, each rank's ``len()`` before
    the first step and the micro-batches it then read."""
    loaders = _ranks(encoder, n, window, G, world, micro)
    for loader in loaders:
        if state is not None:
            loader.load_state_dict(state)
    lengths = [len(loader) for loader in loaders]
    its = [iter(loader) for loader in loaders]
    steps, read = [], [0] * world
    while True:
        units = []
        for r, (loader, it) in enumerate(zip(loaders, its)):
            address = loader.next_address()
            batch = next(it, None)
            if batch is None:
                continue
            read[r] += 1
            assert loader.remake(address)["ids"] == batch["ids"]
            assert batch["__positions__"].tolist() == list(range(address.start, address.stop))
            units += zip(range(address.start, address.stop), map(tuple, batch["ids"]), strict=True)
        if not units:  # every rank's pass ended
            break
        steps.append((units, loaders[0].state_dict()))
    for loader in loaders:
        loader.close()
    return steps, lengths, read


@st.composite
def layouts(draw):
    world, world2 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    micro, micro2 = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    return dict(
        n=draw(st.integers(8, 60)),
        window=draw(st.integers(1, 6)),
        G=math.lcm(micro * world, micro2 * world2) * draw(st.integers(1, 2)),
        before=(world, micro),
        after=(world2, micro2),
        pick=draw(st.integers(0, 1000)),
        saved=draw(st.sampled_from([Singles, Pairs])),
    )


@settings(max_examples=examples(0.3), deadline=None)
@given(layouts())
def test_another_encoder_continues_a_state_saved_at_a_window_start_on_any_topology(case):
    n, window, G, saved = case["n"], case["window"], case["G"], case["saved"]
    steps, _, _ = _steps(saved(), n, window, G, *case["before"])
    world2, micro2 = case["after"]
    starts = [  # at a window's start, not the end of the pass, and where the new topology can cut the rest
        b for b, (_, state) in enumerate(steps[:-1])
        if state["pack"][1] == 0 and (G - state["cursor"] % G) % (world2 * micro2) == 0
    ]  # fmt: skip
    assume(starts)
    b = starts[case["pick"] % len(starts)]
    state = steps[b][1]
    served = [i for units, _ in steps[: b + 1] for _, ids in units for i in ids]
    alike = Renamed if saved is Singles else Twos
    rest, lengths, read = _steps(alike(), n, window, G, *case["after"], state=state)
    assert sorted(u for units, _ in rest for u in units) == sorted(u for units, _ in steps[b + 1 :] for u in units)
    assert lengths == read  # len() counts what each rank then reads
    other = Pairs if saved is Singles else Singles  # plans otherwise: packs of two, or of one
    rest, lengths, read = _steps(other(), n, window, G, *case["after"], state=state)
    served += [i for units, _ in rest for _, ids in units for i in ids]
    assert sorted(served) == [i for i in range(n) if i % SKIPPED != 2]  # every input once
    assert lengths == read


def test_another_encoder_is_refused_inside_a_window_and_the_same_class_is_not():
    batches, states = _states(30, 5, 2, 1, 2)
    inside = next(s for s in states if s["pack"][1] != 0)
    w, o = inside["pack"]
    for encoder in (Renamed(), Pairs()):
        (loader,) = _ranks(encoder, 30, 5, 2, 1, 2)
        with pytest.raises(StateMismatchError) as refused:
            loader.load_state_dict(inside)
        message = str(refused.value)
        assert f"window {w}" in message and f"({o} of that" in message and "pack=[w, 0]" in message
        assert "test_encoder_change.Singles" in message and type(encoder).__name__ in message
        loader.close()
    (same,) = _ranks(Singles(), 30, 5, 2, 1, 2)
    same.load_state_dict(inside)
    assert take_global_batches([same], 1) == [batches[states.index(inside) + 1]]
    same.close()


def test_only_the_encoder_may_change_at_a_window_start():
    batches, states = _states(30, 5, 2, 1, 2)
    start = next(s for s in states if s["pack"][1] == 0)
    for stage in (WindowedStage(window=6, pack=True, background=False), WindowedStage(window=5, pack=False)):
        loader = datareel.Loader(
            datareel.from_sequence([{"id": i} for i in range(30)], name="records"),
            global_batch_size=2,
            micro_batch_size=2,
            seed=7,
            repeat=False,
            task_encoder=Renamed(),
            stage=stage,
        )
        with pytest.raises(StateMismatchError, match="stage"):
            loader.load_state_dict(start)
        loader.close()
