"""``check_restore_everywhere`` over the metadataset sources whose order or rows are their own: datasets shuffled
over several epochs (``shuffle_over_epochs_multiplier`` 2, 3, or -1: with replacement) in a weighted blend and in
``blend_epochized``, and joins (an inner join of two datasets, alone and blended with a third).

Each case restores from every micro-step of random topologies (before and after), from windows that straddle an
epoch boundary of the reel, and compares the global batches with a single rank's uninterrupted run."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.testing import Topology, check_restore_everywhere
from profiles import examples
from wds_helpers import write_shard

TYPED = "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: txt\n"
HEADER = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}
SIZES = {"a": 23, "b": 17}
JOINER = {"__module__": "datareel.sources.typed", "__class__": "TextSample"}  # the later sample's fields win
JOINED = 20  # p holds k000..k029, s holds k010..k039 (in another order): 20 keys in common
SETTINGS = dict(
    deadline=None, suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture]
)


class Keys:
    """A sample as its key and text; a batch as their lists."""

    def encode_sample(self, sample):
        return {"key": sample.__key__, "text": sample.text}

    def batch(self, samples):
        return {"key": [s["key"] for s in samples], "text": [s["text"] for s in samples]}


def _dataset(root, name, keys, per_shard):
    for s in range(0, len(keys), per_shard):
        samples = [(key, {"txt": f"{name} {key}".encode()}) for key in keys[s : s + per_shard]]
        write_shard(root / name / f"part-{s // per_shard}.tar", samples)
    prepare_webdataset(root / name, split_ratio="1,0,0", progress=False)
    (root / name / ".nv-meta" / "dataset.yaml").write_text(TYPED)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("restore_sources")
    for name, n in SIZES.items():
        _dataset(root, name, [f"{name}{i:03d}" for i in range(n)], 6)
    _dataset(root, "p", [f"k{k:03d}" for k in range(30)], 10)
    _dataset(root, "s", [f"k{k:03d}" for k in sorted(range(10, 40), key=lambda k: (k * 7) % 30)], 8)
    join = {"join": [{"path": "p"}, {"path": "s", "nonmatch": "skip"}], "joiner": JOINER}
    _write(root / "join.yaml", join)
    _write(root / "join_blend.yaml", {"blend": [{"weight": 1, **join}, {"weight": 2, "path": "a"}]})
    from datareel.energon.metadataset.loader import prepare_metadataset  # writes the join indexes

    prepare_metadataset(root / "join.yaml")
    prepare_metadataset(root / "join_blend.yaml")
    return root


def _write(path, train):
    path.write_text(yaml.safe_dump({**HEADER, "splits": {"train": train}}, sort_keys=False))
    return path


def _multiplier(k):
    return {} if k == 1 else {"shuffle_over_epochs_multiplier": k}


def _blocks(source, seed, blocks, span=400):
    """Reel positions where a dataset's run of ``blocks[name]`` samples (an epoch, or a block of k epochs)
    ends, read from the loader's plan over the first ``span`` positions: sorted. -> list[int]"""
    loader = datareel.Loader(source, global_batch_size=1, micro_batch_size=1, seed=seed)
    leaf, index = loader.plan.resolve(np.arange(span, dtype=np.int64))
    names = [loader.sources[s].key(i)[0] for s, i in zip(leaf.tolist(), index.tolist())]  # "a", "b" or "k"
    counts: Counter[str] = Counter()
    ends = []
    for p, name in enumerate(names):
        counts[name] += 1
        if name in blocks and counts[name] % blocks[name] == 0:
            ends.append(p + 1)
    loader.close()
    return ends


def _each_k_times(source, k, n):
    """Dataset a's first k·n samples of the reel hold each of its samples k times, its first n not each once
    (the multiplier is read, not ignored)."""
    loader = datareel.Loader(source, global_batch_size=1, micro_batch_size=1, seed=3)
    leaf, index = loader.plan.resolve(np.arange(400, dtype=np.int64))
    keys = [loader.sources[s].key(i) for s, i in zip(leaf.tolist(), index.tolist())]
    mine = [key for key in keys if key[0] == "a"][: k * n]
    loader.close()
    assert sorted(Counter(mine).values()) == [k] * n and len(set(mine[:n])) < n


@st.composite
def topologies(draw):
    W, W2 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m, m2 = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    G = math.lcm(m * W, m2 * W2) * draw(st.integers(1, 2))
    return G, Topology(W, 0, m), Topology(W2, 0, m2)


def _check(source, layout, ends, data, repeat=True):
    """Restore everywhere from a window of global batches that holds one of ``ends`` (reel positions where a
    dataset's epoch or block of epochs ends) strictly inside it, or at its first batch's end."""
    G, before, after = layout
    end = data.draw(st.sampled_from(ends))
    back = data.draw(st.integers(0, 1))  # start one global batch earlier
    start = max(0, ((end - 1) // G - back) * G)
    report = check_restore_everywhere(
        source,
        global_batch_size=G,
        before=before,
        after=after,
        start=start,
        global_batches=2 + back + data.draw(st.integers(0, 1)),
        seed=data.seed,
        repeat=repeat,
        task_encoder=Keys(),
    )
    assert start < end <= start + 2 * G and report["restored"] >= 1


class _Seeded:
    """``data`` with the seed the plan's blocks were read with."""

    def __init__(self, data, seed):
        self.draw, self.seed = data.draw, seed


@settings(max_examples=examples(0.5), **SETTINGS)
@given(layout=topologies(), ka=st.sampled_from([None, 1, 2, 3]), kb=st.sampled_from([1, 2, 3]), data=st.data())
def test_datasets_shuffled_over_epochs_in_blend_epochized_restore_everywhere(world, layout, ka, kb, data):
    path = _write(
        world / f"epochized_{ka}_{kb}.yaml",
        {
            "blend_epochized": [
                {"repetitions": 1, "path": "a", **_multiplier(ka)},
                {"repetitions": 2, "path": "b", **_multiplier(kb)},
            ]
        },
    )
    source, seed = datareel.open_dataset(path), data.draw(st.integers(0, 2**31))
    if ka in (2, 3):
        _each_k_times(source, ka, SIZES["a"])
    ends = _blocks(source, seed, {"a": SIZES["a"] * (ka or 1), "b": SIZES["b"] * kb})
    _check(source, layout, ends[:6], _Seeded(data, seed))


@settings(max_examples=examples(0.5), **SETTINGS)
@given(layout=topologies(), ka=st.sampled_from([2, 3, -1]), kb=st.sampled_from([None, 1, 2, -1]), data=st.data())
def test_datasets_shuffled_over_epochs_in_a_weighted_blend_restore_everywhere(world, layout, ka, kb, data):
    path = _write(
        world / f"weighted_{ka}_{kb}.yaml",
        {"blend": [{"weight": 2, "path": "a", **_multiplier(ka)}, {"weight": 1, "path": "b", **_multiplier(kb)}]},
    )
    source, seed = datareel.open_dataset(path), data.draw(st.integers(0, 2**31))
    if ka != -1:
        _each_k_times(source, ka, SIZES["a"])
    blocks = {name: SIZES[name] * k for name, k in (("a", ka), ("b", kb or 1)) if k != -1}
    ends = _blocks(source, seed, blocks) or [SIZES["a"]]  # both with replacement: no epochs, any window
    _check(source, layout, ends[:6], _Seeded(data, seed))


@settings(max_examples=examples(0.5), **SETTINGS)
@given(layout=topologies(), blended=st.booleans(), repeat=st.booleans(), data=st.data())
def test_joins_alone_and_blended_restore_everywhere(world, layout, blended, repeat, data):
    source = datareel.open_dataset(world / ("join_blend.yaml" if blended else "join.yaml"))
    if not blended:
        assert len(source) == JOINED
    repeat = repeat or blended  # a weighted blend is endless
    seed = data.draw(st.integers(0, 2**31))
    ends = _blocks(source, seed, {"k": JOINED, "a": SIZES["a"]}) if repeat else [JOINED]
    _check(source, layout, ends[:4], _Seeded(data, seed), repeat=repeat)


@pytest.mark.workers
def test_a_nested_join_in_a_blend_restores_from_worker_processes(world):
    path = _write(
        world / "nested_join.yaml", {"blend": [{"weight": 1, "path": "join.yaml"}, {"weight": 1, "path": "a"}]}
    )
    report = check_restore_everywhere(
        datareel.open_dataset(path),
        global_batch_size=4,
        before=Topology(2, 2, 1),
        after=Topology(1, 0, 4),
        start=36,
        global_batches=3,
        seed=5,
        task_encoder=Keys(),
    )
    assert report["restored"] >= 1
