"""Deterministic blends: exact shares with low discrepancy, epochized meta-epochs, elastic restore."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import DatareelError, StateMismatchError
from datareel.blend import build_plan
from datareel.plan.split import left_count, split
from datareel.testing import Topology, check_restore_everywhere
from profiles import examples


def seq(n, name):
    return datareel.from_sequence([{"id": i} for i in range(n)], name=name)


def counts_by_prefix(leaf_ids: np.ndarray, k: int) -> np.ndarray:
    """-> int64[P + 1, k]: samples of each source among the first P positions."""
    onehot = np.zeros((len(leaf_ids) + 1, k), dtype=np.int64)
    onehot[np.arange(1, len(leaf_ids) + 1), leaf_ids] = 1
    return np.cumsum(onehot, axis=0)


@st.composite
def weight_lists(draw):
    k = draw(st.integers(1, 8))
    raw = draw(st.lists(st.floats(0.001, 1.0), min_size=k, max_size=k))
    total = sum(raw)
    # normalised weights of at least 0.001 (raise the small ones, renormalise)
    weights = [max(w / total, 0.001) for w in raw]
    return [w / sum(weights) for w in weights]


@settings(max_examples=examples(1))  # 20,000 positions resolved per example
@given(weights=weight_lists(), start=st.sampled_from([0, 0, 12_345, 10**12]))
def test_exact_shares_with_low_discrepancy(weights, start):
    k = len(weights)
    sources = [seq(50 + 7 * i, f"s{i}") for i in range(k)]
    plan, leaves = build_plan(datareel.mix(list(zip(sources, weights))), seed=3, shuffle=True)
    P = 20_000
    ids, _ = plan.resolve(np.arange(start, start + P))
    counts = counts_by_prefix(ids, k)  # (P + 1, k)
    w = np.array(weights)
    if start == 0:  # every prefix of the reel
        ideal = np.arange(P + 1)[:, None] * w[None, :]
        assert np.abs(counts - ideal).max() <= 2, np.abs(counts - ideal).max()
    window = counts[1000:] - counts[:-1000]  # every window of 1,000 consecutive positions
    assert np.abs(window - 1000 * w[None, :]).max() <= 3


def test_discrepancy_achieved_is_at_most_one_and_a_half_for_eight_sources():
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(20):
        w = rng.dirichlet(np.ones(8) * 0.3)
        w = np.maximum(w, 0.001)
        w /= w.sum()
        plan, _ = build_plan(
            datareel.mix([(seq(10, f"s{i}"), float(x)) for i, x in enumerate(w)]), seed=0, shuffle=False
        )
        ids, _ = plan.resolve(np.arange(30_000))
        counts = counts_by_prefix(ids, 8)
        worst = max(worst, float(np.abs(counts - np.arange(30_001)[:, None] * w[None, :]).max()))
    assert worst <= 1.5 + 1e-6


@settings(max_examples=examples(2))
@given(a=st.integers(0, 2**24), b=st.integers(1, 2**24), q=st.integers(0, 2**62 - 2**25))
def test_split_counts_are_exact_integer_arithmetic(a, b, q):
    a = min(a, b)
    assert int(left_count(np.array([q]), a, b)[0]) == (2 * q * a + b) // (2 * b)
    goes_left, local = split(np.array([q]), a, b)
    before = (2 * q * a + b) // (2 * b)
    assert bool(goes_left[0]) == ((2 * (q + 1) * a + b) // (2 * b) > before)
    assert int(local[0]) == (before if goes_left[0] else q - before)
    huge = 2**31 + 11  # the exact slow path for very long meta-epochs
    assert int(left_count(np.array([q]), 5, huge)[0]) == (2 * q * 5 + huge) // (2 * huge)


def test_each_source_keeps_its_own_epochs_and_shuffle():
    a, b = seq(30, "a"), seq(7, "b")
    plan, _ = build_plan(datareel.mix([(a, 0.5), (b, 0.5)]), seed=1, shuffle=True)
    ids, idx = plan.resolve(np.arange(600))
    for leaf, n in ((0, 30), (1, 7)):
        mine = idx[ids == leaf]
        for e in range(len(mine) // n):
            assert sorted(mine[e * n : (e + 1) * n].tolist()) == list(range(n))  # exactly once per own epoch
        assert mine[:n].tolist() != mine[n : 2 * n].tolist()  # each epoch its own permutation


@settings(max_examples=examples(0.6))
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=5),
    reps=st.lists(st.sampled_from([0.5, 1, 1, 2, 0.25, 1.5, 3]), min_size=5, max_size=5),
)
def test_epochized_meta_epoch_counts(sizes, reps):
    reps = reps[: len(sizes)]
    sources = [seq(n, f"s{i}") for i, n in enumerate(sizes)]
    expected = [math.floor(r * n + 0.5) for r, n in zip(reps, sizes)]
    if 0 in expected:  # a child never read is refused (as mix refuses a zero weight)
        with pytest.raises(DatareelError, match="rounds? to 0"):
            datareel.mix_epochized(list(zip(sources, reps)))
        return
    blend = datareel.mix_epochized(list(zip(sources, reps)))
    plan, _ = build_plan(blend, seed=2, shuffle=True)
    M = plan.epoch_length
    assert M == sum(expected)
    ids, idx = plan.resolve(np.arange(4 * M))
    for meta in range(4):
        counts = np.bincount(ids[meta * M : (meta + 1) * M], minlength=len(sizes)).tolist()
        assert counts == expected
    for leaf, (r, n) in enumerate(zip(reps, sizes)):
        mine = idx[ids == leaf]
        if r == 1:  # every sample exactly once per meta-epoch
            for meta in range(4):
                assert sorted(mine[meta * n : (meta + 1) * n].tolist()) == list(range(n))
        if r == 0.5 and n % 2 == 0:  # two meta-epochs cover the source once
            assert sorted(mine[:n].tolist()) == list(range(n))


def test_repeat_false_reads_one_meta_epoch_and_refuses_endless_mix():
    a, b = seq(10, "a"), seq(4, "b")
    loader = datareel.Loader(
        datareel.mix_epochized([(a, 1), (b, 2)]), global_batch_size=6, micro_batch_size=3, repeat=False, seed=4
    )
    got = [(s, i) for batch in loader for s, i in zip(batch["__source__"], batch["id"].tolist())]
    assert len(got) == 18
    assert sorted(i for s, i in got if s == "a") == list(range(10))
    assert sorted(i for s, i in got if s == "b") == sorted(list(range(4)) * 2)
    with pytest.raises(ValueError, match="endless weighted mix"):
        datareel.Loader(datareel.mix([(a, 1), (b, 1)]), global_batch_size=2, micro_batch_size=2, repeat=False)


def test_samples_and_batches_record_their_source():
    a, b = seq(10, "alpha"), seq(10, "beta")
    loader = datareel.Loader(datareel.mix([(a, 1), (b, 1)]), global_batch_size=4, micro_batch_size=4, seed=0)

    class Peek:
        def encode_sample(self, sample):
            assert sample["__source__"] in ("alpha", "beta")
            return {"id": sample["id"]}  # drops __source__: the batch still carries it

    batch = next(iter(loader))
    assert sorted(batch["__source__"]) == ["alpha", "alpha", "beta", "beta"]
    loader = datareel.Loader(
        datareel.mix([(a, 1), (b, 1)]), global_batch_size=4, micro_batch_size=4, task_encoder=Peek()
    )
    assert sorted(next(iter(loader))["__source__"]) == ["alpha", "alpha", "beta", "beta"]


def test_refuses_bad_blends():
    a = seq(5, "a")
    with pytest.raises(DatareelError, match="weight of 'a'"):
        datareel.mix([(a, 0)])
    with pytest.raises(DatareelError, match="weight of 'a'"):
        datareel.mix([(a, float("nan"))])
    with pytest.raises(DatareelError, match="pairs"):
        datareel.mix([a])
    with pytest.raises(DatareelError, match="endless weighted mix"):
        datareel.mix_epochized([(datareel.mix([(a, 1)]), 1)])
    with pytest.raises(DatareelError, match="never be read"):
        build_plan(datareel.mix([(a, 1), (seq(5, "b"), 1e-12)]), seed=0, shuffle=True)


# -- elastic restore through blends ---------------------------------------------------------------


class Noise:
    def encode_sample(self, sample):
        return {"id": sample["id"], "src": sample["__source__"], "noise": int(datareel.sample_rng().integers(0, 2**31))}

    def batch(self, samples):
        return {
            "id": [s["id"] for s in samples],
            "src": [s["src"] for s in samples],
            "noise": [s["noise"] for s in samples],
        }


@st.composite
def restore_scenarios(draw, max_workers):
    W, W2 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m, m2 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    G = math.lcm(m * W, m2 * W2) * draw(st.integers(1, 2))
    return dict(
        G=G,
        before=Topology(W, draw(st.integers(0, max_workers)), m),
        after=Topology(W2, draw(st.integers(0, max_workers)), m2),
        batches=max(1, min(5, 30 // (G // (m * W)))),
        seed=draw(st.integers(0, 2**32)),
        sizes=draw(st.lists(st.integers(1, 40), min_size=3, max_size=3)),
        weights=draw(st.lists(st.floats(0.05, 1), min_size=3, max_size=3)),
        reps=draw(st.lists(st.sampled_from([0.5, 1, 2, 1.5]), min_size=3, max_size=3)),
        cross=draw(st.integers(0, 3)),
    )


def _restore(s, dataset, start):
    report = check_restore_everywhere(
        dataset,
        global_batch_size=s["G"],
        before=s["before"],
        after=s["after"],
        start=start,
        global_batches=s["batches"],
        seed=s["seed"],
        task_encoder=Noise(),
    )
    assert report["restored"] >= 1


@settings(max_examples=examples(0.4))
@given(s=restore_scenarios(max_workers=0))
def test_elastic_restore_nested_three_source_mix(s):
    a, b, c = (seq(n, name) for n, name in zip(s["sizes"], "abc"))
    nested = datareel.mix([(a, s["weights"][0]), (datareel.mix([(b, s["weights"][1]), (c, s["weights"][2])]), 1.0)])
    start = s["cross"] * 37 // s["G"] * s["G"]
    _restore(s, nested, start)


@settings(max_examples=examples(0.4))
@given(s=restore_scenarios(max_workers=0))
def test_elastic_restore_epochized_mix_across_meta_epochs(s):
    sources = [seq(n, name) for n, name in zip(s["sizes"], "abc")]
    blend = datareel.mix_epochized(list(zip(sources, s["reps"])))
    M = blend.size_hint()
    start = max(0, (s["cross"] * M - s["G"]) // s["G"] * s["G"])  # the window crosses a meta-epoch boundary
    _restore(s, blend, start)


@pytest.mark.workers
@settings(max_examples=examples(0.06))
@given(s=restore_scenarios(max_workers=2))
def test_elastic_restore_blends_with_worker_processes(s):
    a, b, c = (seq(n, name) for n, name in zip(s["sizes"], "abc"))
    blend = datareel.mix([(datareel.mix_epochized([(a, s["reps"][0]), (b, s["reps"][1])]), 1), (c, s["weights"][2])])
    _restore(s, blend, 0)


# -- state fingerprints of blends -----------------------------------------------------------------


def _state(blend):
    loader = datareel.Loader(blend, global_batch_size=4, micro_batch_size=2, seed=1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert len(json.dumps(state)) < 1024
    return state


def _mismatch(saved_blend, new_blend) -> str:
    state = _state(saved_blend)
    with pytest.raises(StateMismatchError) as err:
        datareel.Loader(new_blend, global_batch_size=4, micro_batch_size=2, seed=1).load_state_dict(state)
    assert set(err.value.differences) == {"dataset"}
    return str(err.value)


def test_restore_refuses_changed_blends_naming_the_change():
    a, b, c = seq(20, "a"), seq(30, "b"), seq(40, "c")
    base = datareel.mix([(a, 0.7), (b, 0.3)], name="m")
    assert "source 'b': weight/repetitions 0.3 -> 0.5" in _mismatch(base, datareel.mix([(a, 0.7), (b, 0.5)], name="m"))
    assert "source 'c' was added" in _mismatch(base, datareel.mix([(a, 0.7), (b, 0.3), (c, 1)], name="m"))
    assert "source 'b' was removed" in _mismatch(base, datareel.mix([(a, 0.7)], name="m"))
    from datareel.sources.view import SourceView

    narrowed = datareel.mix([(SourceView(a, start=0, stop=10), 0.7), (b, 0.3)], name="m")
    assert "source 'a': its content, subset, split or nesting changed" in _mismatch(base, narrowed)
    epo = datareel.mix_epochized([(a, 1), (b, 2)], name="e")
    assert "source 'b': weight/repetitions 2.0 -> 1.0" in _mismatch(
        epo, datareel.mix_epochized([(a, 1), (b, 1)], name="e")
    )
    datareel.Loader(base, global_batch_size=4, micro_batch_size=1, rank=1, world_size=2, seed=1).load_state_dict(
        _state(base)
    )


@st.composite
def blend_trees(draw, depth=0, finite=False):
    """A random dataset tree: sources (sizes 1..5000, some not shuffled), weighted and epochized mixes
    (2..12 children, nested), concats (whose children, like an epochized mix's, have a length)."""
    inner = ["epochized", "concat"] + ([] if finite else ["mix"])
    kind = draw(st.sampled_from(["source"] * 2 + (inner if depth < 2 else [])))
    if kind == "source":
        n = draw(st.integers(1, 5000))
        source = datareel.from_sequence(range(n), name=f"s{draw(st.integers(0, 10**6))}")
        if draw(st.booleans()):  # a source that keeps its order whatever the loader's shuffle (as a subset can)
            from datareel.sources.view import SourceView

            return SourceView(source, shuffle=False)
        return source
    children = draw(
        st.lists(blend_trees(depth=depth + 1, finite=kind != "mix"), min_size=2, max_size=12 if depth == 0 else 4)
    )
    if kind == "concat":
        return datareel.concat(children)
    if kind == "epochized":
        return datareel.mix_epochized([(c, draw(st.integers(1, 3))) for c in children])
    return datareel.mix([(c, draw(st.floats(0.01, 1.0))) for c in children])


@given(
    tree=blend_trees(),
    seed=st.integers(0, 2**32),
    shuffle=st.booleans(),
    start=st.sampled_from([0, 1, 4_999, 123_456, 10**9 + 7, 10**12, 2**62 - 5_000]),
    count=st.integers(1, 3000),
)
@settings(max_examples=examples(1.5))
def test_a_compiled_mix_resolves_every_position_as_its_split_tree(tree, seed, shuffle, start, count):
    """The vectorised MixNode (all leaves in one pass, nested mixes merged) equals the node-by-node tree it
    was compiled from, position by position, across epoch boundaries of every source and deep positions."""
    from unittest import mock

    from datareel.blend import build as build_module

    compiled, leaves = build_plan(tree, seed=seed, shuffle=shuffle)
    with mock.patch.object(build_module, "_compiled", lambda node: node):
        reference, _ = build_plan(tree, seed=seed, shuffle=shuffle)
    positions = np.arange(start, start + count, dtype=np.int64)
    got, expected = compiled.resolve(positions), reference.resolve(positions)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert got[0].dtype == expected[0].dtype and got[1].dtype == expected[1].dtype


def test_a_hundred_source_mix_is_one_compiled_node_with_nested_mixes_merged():
    from datareel.plan.nodes import MixNode

    inner = datareel.mix([(seq(10 + i, f"in{i}"), 1.0) for i in range(3)])
    blend = datareel.mix([(seq(10 + i, f"s{i}"), 1.0 + i) for i in range(99)] + [(inner, 2.0)])
    plan, leaves = build_plan(blend, seed=3, shuffle=True)
    assert isinstance(plan.root, MixNode) and len(leaves) == 102
    assert len(plan.root.terminals) == 102 and (plan.root.leaf_row >= 0).all()


@given(tree=blend_trees(), seed=st.integers(0, 2**16), count=st.integers(0, 4000))
@settings(max_examples=examples(1.2))
def test_consumed_counts_each_sources_share_of_a_reel_prefix_without_resolving_it(tree, seed, count):
    """What `datareel verify` reports per source (epoch and offset): the leaves' counts among the first
    `count` positions, computed from the tree, equal counting the resolved positions."""
    from datareel.plan.nodes import consumed

    plan, leaves = build_plan(tree, seed=seed, shuffle=True)
    got = consumed(plan.root, count)
    leaf_ids = plan.resolve(np.arange(count, dtype=np.int64))[0]
    expected = np.bincount(leaf_ids, minlength=len(leaves))
    assert [got.get(i, 0) for i in range(len(leaves))] == expected.tolist()
    assert sum(got.values()) == count
