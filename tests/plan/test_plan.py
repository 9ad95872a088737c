"""I1 and per-source epochs: the reel is a pure function of spec, seed and position."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datareel.plan.epochs import source_indices
from datareel.plan.nodes import ReelPlan
from profiles import examples


@settings(max_examples=examples(1))
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**63), epochs=st.integers(1, 4))
def test_each_epoch_is_a_permutation_and_epochs_differ(n, seed, epochs):
    plan = ReelPlan.single(size=n, name="src", seed=seed, shuffle=True)
    _, idx = plan.resolve(np.arange(epochs * n))
    per_epoch = idx.reshape(epochs, n)  # (epochs, n)
    for e in range(epochs):
        assert np.array_equal(np.sort(per_epoch[e]), np.arange(n))
    if n >= 8 and epochs >= 2:
        assert not np.array_equal(per_epoch[0], per_epoch[1])


@settings(max_examples=examples(1))
@given(n=st.integers(1, 5000), seed=st.integers(0, 2**32), start=st.integers(0, 10**13), k=st.integers(1, 300))
def test_resolving_a_window_equals_resolving_each_position(n, seed, start, k):
    plan = ReelPlan.single(size=n, name="src", seed=seed, shuffle=True)
    window = plan.resolve(np.arange(start, start + k))[1]
    singles = [int(plan.resolve(np.array([p]))[1][0]) for p in range(start, start + k, max(1, k // 7))]
    assert window[:: max(1, k // 7)].tolist() == singles


def test_no_shuffle_is_natural_order_across_epochs():
    plan = ReelPlan.single(size=5, name="src", seed=3, shuffle=False)
    assert plan.resolve(np.arange(12))[1].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]


def test_seed_and_name_key_the_order():
    n = 200
    base = ReelPlan.single(size=n, name="a", seed=1, shuffle=True).resolve(np.arange(n))[1]
    assert np.array_equal(base, ReelPlan.single(size=n, name="a", seed=1, shuffle=True).resolve(np.arange(n))[1])
    assert not np.array_equal(base, ReelPlan.single(size=n, name="a", seed=2, shuffle=True).resolve(np.arange(n))[1])
    assert not np.array_equal(base, ReelPlan.single(size=n, name="b", seed=1, shuffle=True).resolve(np.arange(n))[1])


def test_mixed_epoch_window_and_empty_input():
    out = source_indices(np.array([8, 9, 10, 11, 20]), 10, seed=0, source_key=1, shuffle=True)
    assert out.shape == (5,) and ((0 <= out) & (out < 10)).all()
    assert source_indices(np.array([], dtype=np.int64), 10, seed=0, source_key=1, shuffle=True).shape == (0,)
