"""plan.batch_blend: the keyed, exact-per-block choice of a batch-granular blend's child for each unit."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datareel.errors import OptionError
from datareel.plan.batch_blend import MAX_BLOCK, block_counts, block_size, choice, taken
from profiles import examples

weights_st = st.lists(
    st.one_of(st.integers(1, 50), st.floats(0.05, 20.0, allow_nan=False, allow_infinity=False)), min_size=1, max_size=6
)
seeds = st.integers(0, 2**64 - 1)


@settings(max_examples=examples(1))
@given(weights=weights_st)
def test_block_counts_are_the_largest_remainder_apportionment(weights):
    K, counts = block_size(weights), block_counts(weights).tolist()  # Python ints: exact beside Fractions
    total = sum(Fraction(w) for w in weights)
    quotas = [K * Fraction(w) / total for w in weights]  # exact
    assert K % 100 == 0 and K >= 100 and sum(counts) == K
    assert all(n >= 1 for n in counts)  # every child drawn in every block
    assert all(q - 1 < n < q + 1 for n, q in zip(counts, quotas))
    assert all(n >= math.floor(q) for n, q in zip(counts, quotas))


@settings(max_examples=examples(0.5))
@given(weights=weights_st, seed=seeds, block=st.integers(0, 10**9))
def test_every_block_holds_each_child_exactly_its_count(weights, seed, block):
    K = block_size(weights)
    units = np.arange(block * K, (block + 1) * K, dtype=np.int64)
    got = np.bincount(choice(seed, weights, units), minlength=len(weights))
    assert got.tolist() == block_counts(weights).tolist()


@settings(max_examples=examples(0.5))
@given(weights=weights_st, seed=seeds, index=st.integers(0, 450), child=st.integers(0, 5))
def test_taken_counts_the_prefix(weights, seed, index, child):
    child %= len(weights)
    prefix = choice(seed, weights, np.arange(index))
    assert taken(seed, weights, child, index) == int(np.count_nonzero(prefix == child))
    assert sum(taken(seed, weights, c, index) for c in range(len(weights))) == index


@settings(max_examples=examples(0.5))
@given(weights=weights_st, seed=seeds, units=st.lists(st.integers(0, 2**40), min_size=1, max_size=20))
def test_choice_is_a_function_of_each_index_alone(weights, seed, units):
    together = choice(seed, weights, np.array(units))
    alone = [int(choice(seed, weights, u)[0]) for u in units]
    assert together.tolist() == alone
    assert together.dtype == np.int64 and ((0 <= together) & (together < len(weights))).all()


def test_taken_of_far_indices_uses_whole_blocks():
    w = [2, 8]
    K = block_size(w)
    far = 10**12 * K + 37
    head = choice(7, w, np.arange(10**12 * K, far))
    assert taken(7, w, 0, far) == 10**12 * 20 + int(np.count_nonzero(head == 0))


def test_fixed_output_for_a_seed():
    """Pins the order: a change here changes every saved blend's continuation."""
    assert block_size([2, 8]) == 100 and block_counts([2, 8]).tolist() == [20, 80]
    assert choice(5, [2, 8], np.arange(30)).tolist() == [
        0, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1,
    ]  # fmt: skip
    assert block_counts([1, 1, 1]).tolist() == [34, 33, 33]  # ties to the lower child
    assert block_size([1, 999]) == 1000 and block_counts([1, 999]).tolist() == [1, 999]


def test_seeds_and_blocks_give_different_orders():
    w = [1, 1]
    orders = {tuple(choice(s, w, np.arange(100))) for s in range(5)}
    orders |= {tuple(choice(0, w, np.arange(100 * b, 100 * b + 100))) for b in range(1, 5)}
    assert len(orders) == 9


@pytest.mark.parametrize(
    "weights, match",
    [
        ([], "at least one weight"),
        ([1, 0], "weight 1 is 0: each weight must be > 0"),
        ([1, -2.5], "weight 1 is -2.5"),
        ([float("nan"), 1], "weight 0 is nan: each weight must be a finite number"),
        ([True, 1], "weight 0 is True"),
        (["1"], "weight 0 is '1'"),
        ([1, MAX_BLOCK], "too unequal"),
    ],
)
def test_bad_weights_are_refused_by_name(weights, match):
    with pytest.raises(OptionError, match=match):
        choice(0, weights, [0])


def test_bad_seeds_children_and_indices_are_refused_by_name():
    with pytest.raises(OptionError, match="seed=-1 must be an integer in"):
        choice(-1, [1], [0])
    with pytest.raises(OptionError, match="unit indices must be >= 0, got -3"):
        choice(0, [1], [2, -3])
    with pytest.raises(OptionError, match="child=2 is not a child of this blend"):
        taken(0, [1, 1], 2, 5)
    with pytest.raises(OptionError, match="index=-1 must be an integer >= 0"):
        taken(0, [1, 1], 0, -1)
