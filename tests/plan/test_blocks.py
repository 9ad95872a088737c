"""The block (locality) shuffle's order math: each epoch a bijection, each block at one offset modulo its period,
at most ``window`` blocks a slot, keyed by (seed, source, epoch) only, and a mix's leaves at their share's period."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.blend import build_plan
from datareel.errors import OptionError
from datareel.plan.blocks import BlockOrder, BlockShuffle, block_indices, epoch_indices
from datareel.plan.locality import leaves, read_blocks, with_blocks
from datareel.sources.view import SourceView
from profiles import examples

orders = st.builds(BlockOrder, block=st.integers(1, 20), period=st.integers(1, 40), window=st.integers(1, 4))


@settings(max_examples=examples(2))
@given(n=st.integers(1, 3000), order=orders, seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 5))
def test_each_epoch_is_a_bijection(n, order, seed, epoch):
    out = epoch_indices(np.arange(n), n, order, seed=seed, source_key=3, epoch=epoch)
    assert np.array_equal(np.sort(out), np.arange(n))


@settings(max_examples=examples(2))
@given(n=st.integers(1, 3000), order=orders, seed=st.integers(0, 1000))
def test_a_block_stays_at_one_offset_and_a_slot_holds_at_most_window_blocks(n, order, seed):
    k, P, w = order.block, order.period, order.window
    C = k * w * P
    S = n // C
    out = epoch_indices(np.arange(n), n, order, seed=seed, source_key=3, epoch=0)
    head = out[: S * C]  # the structured part
    offsets = {}
    for r, index in enumerate(head.tolist()):
        offsets.setdefault(index // k, set()).add(r % P)
    assert all(len(o) == 1 for o in offsets.values())  # every block read at one offset mod P
    if S:
        slots = (head // k).reshape(S, k * w, P)  # [super-period, period, offset]
        per_slot = [len(set(slots[s, :, o].tolist())) for s in range(S) for o in range(P)]
        assert max(per_slot) <= w and min(per_slot) == w
        # every block in a slot is whole there: its k samples all inside it
        assert all(len(offsets[b]) == 1 for b in set(head.tolist()) for b in [b // k])
        one_period = slots[:, 0, :]  # (S, P): the blocks of one period all differ (w = 1: a global batch's)
        assert all(len(set(row.tolist())) == P for row in one_period)


@settings(max_examples=examples(1))
@given(n=st.integers(1, 500), order=orders, data=st.data())
def test_vectorised_over_epochs_equals_one_at_a_time(n, order, data):
    j = data.draw(st.lists(st.integers(0, 5 * n), min_size=1, max_size=30))
    together = block_indices(np.array(j), n, order, seed=9, source_key=4)
    alone = [int(block_indices(np.array([x]), n, order, seed=9, source_key=4)[0]) for x in j]
    assert together.tolist() == alone


def test_keys_depend_on_seed_source_and_epoch():
    order, n = BlockOrder(8, 16, 1), 4096
    base = epoch_indices(np.arange(n), n, order, seed=1, source_key=2, epoch=0)
    for other in (
        dict(seed=2, source_key=2, epoch=0),
        dict(seed=1, source_key=3, epoch=0),
        dict(seed=1, source_key=2, epoch=1),
    ):
        assert not np.array_equal(base, epoch_indices(np.arange(n), n, order, **other))
    again = epoch_indices(np.arange(n), n, order, seed=1, source_key=2, epoch=0)
    assert np.array_equal(base, again)


def test_options_are_checked_naming_the_value():
    for bad in (dict(block=0), dict(window=0), dict(period=0), dict(block=True), dict(block=2.5)):
        with pytest.raises(OptionError, match="BlockShuffle"):
            BlockShuffle(**bad)
    assert BlockShuffle(block=4).resolved(64) == BlockShuffle(4, 64, 1)
    assert BlockShuffle(block=4, period=32).resolved(64).period == 32
    assert BlockShuffle.from_json(BlockShuffle(4, 32, 2).to_json()) == BlockShuffle(4, 32, 2)
    with pytest.raises(OptionError, match="resolved"):
        BlockShuffle().to_json()


def test_a_mix_gives_each_leaf_its_share_of_the_period_and_aligns_exactly():
    a = datareel.from_sequence(list(range(3000)), name="a")
    b = datareel.from_sequence(list(range(5000)), name="b")
    c = SourceView(datareel.from_sequence(list(range(800)), name="c"), shuffle=False)
    plan, _ = build_plan(datareel.mix([(a, 1), (b, 3), (c, 4)]), seed=0, shuffle=True)
    blocked = with_blocks(plan, BlockShuffle(block=8, period=64))
    periods = {leaf.leaf: (leaf.blocks.period if leaf.blocks else None) for leaf in leaves(blocked)}
    assert periods == {0: 8, 1: 24, 2: None}  # 64 * 1/8, 64 * 3/8; c keeps its order
    assert read_blocks(blocked) == {0: 8, 1: 8}
    # with shares whose denominators divide P, counters c and c + P f are exactly P positions apart:
    # every block of a and b sits at one offset mod 64 (inside the structured part of each epoch)
    leaf, index = blocked.resolve(np.arange(64 * 8 * 40))
    for source, n in ((0, 3000), (1, 5000)):
        mine = np.flatnonzero(leaf == source)
        structured = (n // (8 * int(periods[source]))) * 8 * int(periods[source])
        mine = mine[: min(len(mine), structured)]
        offsets = {}
        for p, i in zip(mine.tolist(), index[mine].tolist()):
            offsets.setdefault(i // 8, set()).add(p % 64)
        assert offsets and all(len(o) == 1 for o in offsets.values())
    # the samples are those of the plain plan's mix: same leaves at the same positions
    plain_leaf, _ = plan.resolve(np.arange(64 * 8 * 40))
    assert np.array_equal(plain_leaf, leaf)
    assert Fraction(int(periods[1]), 64) == Fraction(3, 8)


def test_over_epochs_with_blocks_is_refused_naming_both():
    a = SourceView(datareel.from_sequence(list(range(100)), name="a"), over_epochs=2)
    plan, _ = build_plan(a, seed=0, shuffle=True)
    with pytest.raises(OptionError, match="shuffle_over_epochs_multiplier=2"):
        with_blocks(plan, BlockShuffle(block=4, period=8))
