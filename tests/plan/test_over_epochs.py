"""Shuffling over k epochs (Energon's shuffle_over_epochs_multiplier): each block of k epochs holds every sample
exactly k times (a bijection of [0, k n) read mod n), -1 draws with replacement, and 1 is the per-epoch shuffle."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.blend import build_plan
from datareel.plan.epochs import source_indices
from datareel.plan.nodes import LeafNode, SplitNode, compile_mix
from datareel.plan.over_epochs import block_keys, check_multiplier, combine, over_epochs_indices
from datareel.plan.permute import permute
from datareel.sources.view import SourceView
from profiles import examples


@settings(max_examples=examples(1))
@given(n=st.integers(1, 300), k=st.integers(2, 5), seed=st.integers(0, 2**32), block=st.integers(0, 3))
def test_each_block_holds_every_sample_exactly_k_times(n, k, seed, block):
    j = np.arange(block * k * n, (block + 1) * k * n)
    out = over_epochs_indices(j, n, seed=seed, source_key=7, epochs=k)
    assert np.array_equal(np.bincount(out, minlength=n), np.full(n, k))
    # the bijection under it: a permutation of [0, k n)
    inner = permute(np.arange(k * n), k * n, block_keys(seed, 7, k, block))
    assert np.array_equal(np.sort(inner), np.arange(k * n))


@settings(max_examples=examples(1))
@given(n=st.integers(1, 10**9), k=st.sampled_from([2, 3, -1]), data=st.data())
def test_vectorised_equals_one_at_a_time(n, k, data):
    j = data.draw(st.lists(st.integers(0, 10 * n), min_size=1, max_size=20))
    together = over_epochs_indices(np.array(j), n, seed=1, source_key=2, epochs=k)
    alone = [int(over_epochs_indices(np.array([x]), n, seed=1, source_key=2, epochs=k)[0]) for x in j]
    assert together.tolist() == alone and all(0 <= v < n for v in alone)


def test_blocks_differ_and_keys_are_not_the_per_epoch_ones():
    n, k = 50, 2
    out = over_epochs_indices(np.arange(4 * k * n), n, seed=0, source_key=3, epochs=k).reshape(4, -1)
    assert len({tuple(row) for row in out.tolist()}) == 4
    per_epoch = source_indices(np.arange(k * n), n, seed=0, source_key=3, shuffle=True)
    assert not np.array_equal(out[0], per_epoch)
    assert not any(np.array_equal(out[0][e * n : (e + 1) * n], per_epoch[e * n : (e + 1) * n]) for e in range(k))
    # the order is a function of every key: another seed, source, multiplier or block gives another one
    # (an implementation that dropped the source key would shuffle every source of a blend alike)
    first = over_epochs_indices(np.arange(k * n), n, seed=0, source_key=3, epochs=k)
    for other in ({"seed": 1, "source_key": 3, "epochs": k}, {"seed": 0, "source_key": 4, "epochs": k}):
        assert not np.array_equal(first, over_epochs_indices(np.arange(k * n), n, **other))
    assert not np.array_equal(first[:n], over_epochs_indices(np.arange(3 * n), n, seed=0, source_key=3, epochs=3)[:n])
    keys = {block_keys(0, 3, k, b).tobytes() for b in range(4)} | {block_keys(0, 4, k, 0).tobytes()}
    assert len(keys) == 5


def test_with_replacement_is_uniform_and_endless():
    n = 20
    out = over_epochs_indices(np.arange(200_000), n, seed=5, source_key=1, epochs=-1)
    counts = np.bincount(out, minlength=n)
    assert counts.min() > 9_500 and counts.max() < 10_500  # 10,000 expected each
    first_epoch = out[:n]
    assert len(set(first_epoch.tolist())) < n  # with replacement: repeats inside an epoch


def test_pinned_order_for_seed_0():
    # Changing this output changes every reel of a dataset shuffled over 2 epochs (invalidates checkpoints).
    assert over_epochs_indices(np.arange(10), 5, seed=0, source_key=0, epochs=2).tolist() == PINNED_2
    assert over_epochs_indices(np.arange(8), 5, seed=0, source_key=0, epochs=-1).tolist() == PINNED_DRAWS


PINNED_2 = [2, 4, 2, 1, 0, 4, 3, 0, 3, 1]
PINNED_DRAWS = [3, 2, 2, 2, 2, 2, 0, 4]


def test_mix_node_resolves_an_over_epochs_leaf_as_the_tree_does():
    a = LeafNode(leaf=0, size=7, key=1, seed=2, shuffle=True)
    b = LeafNode(leaf=1, size=5, key=3, seed=2, shuffle=True, epochs=3)
    c = LeafNode(leaf=2, size=4, key=4, seed=2, shuffle=True, epochs=-1)
    root = SplitNode(left=a, right=SplitNode(left=b, right=c, a=1, b=2), a=1, b=3)
    q = np.arange(300)
    compiled = compile_mix(root)
    for got, want in zip(compiled.resolve(q), root.resolve(q)):
        assert np.array_equal(got, want)


def test_multiplier_one_and_none_keep_their_orders():
    seq = datareel.from_sequence([{"id": i} for i in range(30)], name="d")
    plain, _ = build_plan(seq, seed=4, shuffle=True)
    viewed, _ = build_plan(SourceView(seq, over_epochs=1), seed=4, shuffle=True)
    q = np.arange(100)
    assert np.array_equal(plain.resolve(q)[1], viewed.resolve(q)[1])
    assert "over_epochs" not in SourceView(seq).describe()  # spec digests of existing views unchanged
    frozen, _ = build_plan(SourceView(seq, shuffle=False), seed=4, shuffle=True)
    assert frozen.resolve(q)[1].tolist() == [i % 30 for i in range(100)]
    twice, _ = build_plan(SourceView(seq, over_epochs=2), seed=4, shuffle=True)
    assert twice.epoch_length == 60  # a pass holds each sample twice (Energon's pass of 2 epochs)


def test_multiplier_rules():
    assert combine(2, 3) == 6 and combine(None, -1) is None and combine(-1, 4) == -1 and combine(1, 1) == 1
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ValueError, match="shuffle_over_epochs_multiplier"):
            check_multiplier(bad)
    with pytest.raises(datareel.OptionError, match="over_epochs=0"):
        SourceView(datareel.from_sequence([1, 2]), over_epochs=0)
