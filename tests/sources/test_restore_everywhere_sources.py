"""``check_restore_everywhere`` over the metadataset sources whose order or rows are their own: datasets shuffled
over several epochs (``shuffle_over_epochs_multiplier`` 2, 3, or -1: with replacement) in a weighted blend and in
``blend_epochized``, and joins (an inner join of two datasets, alone and blended with a third).

Each case restores from every micro-step of random topologies (before and after), from windows that straddle an
epoch boundary of the reel, and compares the global batches with a single rank's uninterrupted run."""

from __future__ import annotations

import math

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
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


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


@st.composite
def topologies(draw):
    W, W2 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m, m2 = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    G = math.lcm(m * W, m2 * W2) * draw(st.integers(1, 2))
    return G, Topology(W, 0, m), Topology(W2, 0, m2)


def _check(source, layout, epoch, data, repeat=True):
    """Restore everywhere from a window that starts at a global-batch boundary just before ``epoch`` positions
    (an epoch boundary of the reel) and runs across it."""
    G, before, after = layout
    before_epoch = ((epoch - 1) // G) * G - G * data.draw(st.integers(0, 1))  # the boundary inside the window
    report = check_restore_everywhere(
        source,
        global_batch_size=G,
        before=before,
        after=after,
        start=max(0, before_epoch),
        global_batches=data.draw(st.integers(2, 4)),
        seed=data.draw(st.integers(0, 2**31)),
        repeat=repeat,
        task_encoder=Keys(),
    )
    assert report["restored"] >= 1


@settings(max_examples=examples(0.15), **SETTINGS)
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
    epoch = SIZES["a"] + 2 * SIZES["b"]
    _check(datareel.open_dataset(path), layout, epoch * data.draw(st.integers(1, 3)), data)


@settings(max_examples=examples(0.15), **SETTINGS)
@given(layout=topologies(), ka=st.sampled_from([2, 3, -1]), kb=st.sampled_from([None, 1, 2, -1]), data=st.data())
def test_datasets_shuffled_over_epochs_in_a_weighted_blend_restore_everywhere(world, layout, ka, kb, data):
    path = _write(
        world / f"weighted_{ka}_{kb}.yaml",
        {"blend": [{"weight": 2, "path": "a", **_multiplier(ka)}, {"weight": 1, "path": "b", **_multiplier(kb)}]},
    )
    _check(datareel.open_dataset(path), layout, data.draw(st.sampled_from([23, 46, 69, 2 * 23 * 3])), data)


@settings(max_examples=examples(0.15), **SETTINGS)
@given(layout=topologies(), blended=st.booleans(), repeat=st.booleans(), data=st.data())
def test_joins_alone_and_blended_restore_everywhere(world, layout, blended, repeat, data):
    source = datareel.open_dataset(world / ("join_blend.yaml" if blended else "join.yaml"))
    if not blended:
        assert len(source) == JOINED
    epoch = JOINED if not blended else 3 * JOINED
    repeat = repeat or blended  # a weighted blend is endless
    _check(source, layout, epoch * (data.draw(st.integers(1, 2)) if repeat else 1), data, repeat=repeat)


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
