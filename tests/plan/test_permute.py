"""I7: every permutation is a bijection; the shuffle is pinned for one seed."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datareel.plan.permute import feistel_width, permute
from datareel.plan.rng import permutation_keys
from profiles import examples

PINNED_20 = [7, 9, 5, 3, 19, 16, 17, 6, 10, 0, 12, 11, 8, 14, 18, 15, 1, 2, 13, 4]
KEYS = [permutation_keys(seed, source, epoch) for seed, source, epoch in [(0, 0, 0), (1, 7, 3), (2**40, 12345, 999)]]


def test_bijection_exhaustive_for_every_n_up_to_4096():
    for keys in KEYS:
        for n in range(1, 4097):
            out = permute(np.arange(n), n, keys)
            assert out.dtype == np.int64
            # a bijection on [0, n): every value hit once
            assert np.array_equal(np.sort(out), np.arange(n)), f"not a bijection for n={n}"


@pytest.mark.parametrize("n", [65536, 65537, 262145, 2**20 - 1, 2**20 + 1])
def test_bijection_at_edge_sizes(n):
    for keys in KEYS[:2]:
        out = permute(np.arange(n), n, keys)
        counts = np.bincount(out, minlength=n)
        assert counts.shape == (n,) and counts.min() == 1 and counts.max() == 1, f"n={n} drops or repeats"


def test_pinned_permutation_of_range_10():
    # Changing this output changes every shuffled reel, i.e. invalidates every checkpoint.
    out = permute(np.arange(10), 10, permutation_keys(0, 0, 0)).tolist()
    assert out == [5, 9, 6, 3, 8, 0, 4, 7, 1, 2]
    # an odd bit width (unbalanced network): n = 20 needs 5 bits
    assert permute(np.arange(20), 20, permutation_keys(0, 0, 0)).tolist() == PINNED_20


def test_keys_change_the_order():
    n = 1000
    orders = {tuple(permute(np.arange(n), n, keys).tolist()) for keys in KEYS}
    assert len(orders) == len(KEYS)
    assert not np.array_equal(permute(np.arange(n), n, KEYS[0]), np.arange(n))


@settings(max_examples=examples(2))
@given(n=st.integers(1, 10**12), data=st.data())
def test_vectorised_equals_one_at_a_time(n, data):
    idx = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20))
    keys = KEYS[1]
    together = permute(np.array(idx), n, keys)
    alone = [int(permute(i, n, keys)[0]) for i in idx]
    assert together.tolist() == alone
    assert all(0 <= v < n for v in alone)
    # distinct inputs give distinct outputs (injectivity on arbitrary large domains)
    assert len(set(alone)) == len(set(idx))


@pytest.mark.parametrize("n,width", [(1, 2), (2, 2), (4, 2), (5, 3), (16, 4), (17, 5), (2**20, 20), (2**20 + 1, 21)])
def test_width_is_smallest_that_covers_n(n, width):
    assert feistel_width(n) == width


def test_permutation_keys_are_not_additive():
    # seed + epoch collides; keyed derivation must not
    assert not np.array_equal(permutation_keys(1, 0, 2), permutation_keys(2, 0, 1))
    assert not np.array_equal(permutation_keys(0, 1, 0), permutation_keys(0, 0, 1))


@st.composite
def mixed_domains(draw):
    """Elements of several sources at once: each with its own size (edge sizes included) and round keys."""
    sizes = draw(
        st.lists(
            st.one_of(
                st.integers(1, 70), st.sampled_from([2**16, 2**16 + 1, 2**20 - 1, 2**33 + 3]), st.integers(1, 2**40)
            ),
            min_size=1,
            max_size=6,
        )
    )
    keys = [permutation_keys(draw(st.integers(0, 2**32)), draw(st.integers(0, 2**63)), e) for e in range(len(sizes))]
    which = draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, max_size=200))
    i = [draw(st.integers(0, sizes[w] - 1)) for w in which]
    return sizes, keys, which, i


@given(mixed_domains())
@settings(max_examples=examples(2))
def test_permute_each_equals_permute_element_by_element(domains):
    from datareel.plan.permute import permute_each

    sizes, keys, which, i = domains
    n = np.array([sizes[w] for w in which], dtype=np.int64)
    w = np.array([feistel_width(int(x)) for x in n], dtype=np.uint64)
    got = permute_each(np.array(i, dtype=np.int64), n, w, np.stack([keys[s] for s in which]))
    expected = [int(permute(np.array([x]), sizes[s], keys[s])[0]) for x, s in zip(i, which)]
    assert got.tolist() == expected


@given(
    q=st.lists(st.integers(0, 2**62 - 2**31), min_size=1, max_size=50),
    shares=st.lists(st.tuples(st.integers(0, 2**30), st.integers(1, 2**30)), min_size=1, max_size=50),
)
def test_split_each_equals_split_element_by_element(q, shares):
    from datareel.plan.split import split, split_each

    a = np.array([min(x, y) for x, y in shares], dtype=np.int64)[np.arange(len(q)) % len(shares)]
    b = np.array([y for _, y in shares], dtype=np.int64)[np.arange(len(q)) % len(shares)]
    goes_left, local = split_each(np.array(q, dtype=np.int64), a, b, 2 * (b - a))
    for e, x in enumerate(q):
        left, index = split(np.array([x], dtype=np.int64), int(a[e]), int(b[e]))
        assert (goes_left[e], local[e]) == (left[0], index[0]), (x, a[e], b[e])
