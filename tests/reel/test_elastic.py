"""I2 + I3: restore at every step on another topology and continue the identical global batches.

Property tests over random dataset sizes (1-5,000), global batch sizes, micro-batch
sizes, world sizes, worker counts (real worker processes in the second test) and
checkpoint positions placed around epoch boundaries.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.testing import Topology, check_restore_everywhere
from encoders import NoisyEncoder
from profiles import examples
from state_edit import edited
from wds_helpers import build_shards


@st.composite
def scenarios(draw, min_workers: int, max_workers: int, max_steps: int):
    n = draw(st.integers(1, 5000), label="dataset size")
    W, W2 = draw(st.integers(1, 4), label="W"), draw(st.integers(1, 4), label="W'")
    m, m2 = draw(st.integers(1, 4), label="m"), draw(st.integers(1, 4), label="m'")
    N, N2 = draw(st.integers(min_workers, max_workers), label="N"), draw(st.integers(0, max_workers), label="N'")
    G = math.lcm(m * W, m2 * W2) * draw(st.integers(1, 2), label="G factor")
    A = G // (m * W)
    batches = max(1, min(5, max_steps // A))
    epoch = draw(st.integers(0, 3), label="epoch boundary to cross")
    delta = draw(st.integers(0, batches * G), label="distance before it")
    start = max(0, (epoch * n - delta) // G * G)
    seed = draw(st.integers(0, 2**32), label="seed")
    return dict(n=n, G=G, before=Topology(W, N, m), after=Topology(W2, N2, m2), batches=batches, start=start, seed=seed)


def _run(s):
    data = datareel.from_sequence([{"id": i} for i in range(s["n"])], name="ids")
    report = check_restore_everywhere(
        data,
        global_batch_size=s["G"],
        before=s["before"],
        after=s["after"],
        start=s["start"],
        global_batches=s["batches"],
        seed=s["seed"],
        task_encoder=NoisyEncoder(),
    )
    assert report["restored"] >= 1  # at least the global-batch boundaries restore
    _check_exactly_once_per_epoch(data, s)


def _check_exactly_once_per_epoch(data, s):
    """Within each epoch of the source, every sample appears exactly once."""
    n, G = s["n"], s["G"]
    loader = datareel.Loader(data, global_batch_size=G, micro_batch_size=G, seed=s["seed"])
    first_epoch = s["start"] // n
    loader.load_state_dict(edited(loader.state_dict(), cursor=first_epoch * n // G * G))
    ids: dict[int, list[int]] = {}
    it = iter(loader)
    while loader.cursor < s["start"] + s["batches"] * G:
        batch = next(it)
        for p, i in zip(batch["__positions__"].tolist(), batch["id"].tolist()):
            ids.setdefault(p // n, []).append(i)
    for epoch, seen in ids.items():
        assert len(seen) == len(set(seen)), f"a sample repeats within epoch {epoch}"
        if epoch > first_epoch and len(seen) == n:
            assert sorted(seen) == list(range(n))


@settings(max_examples=examples(1))  # was 200 absolute (2x a typical test); the costliest in-process property test
@given(s=scenarios(min_workers=0, max_workers=0, max_steps=40))
def test_elastic_restore_in_process(s):
    _run(s)


@pytest.mark.workers
@settings(max_examples=examples(0.2))
@given(s=scenarios(min_workers=1, max_workers=3, max_steps=24))
def test_elastic_restore_with_worker_processes(s):
    _run(s)


@pytest.fixture(scope="module")
def webdataset_dir(tmp_path_factory) -> Path:
    """100 samples in 4 uneven shards (one with long, nested keys), prepared by datareel."""
    root = tmp_path_factory.mktemp("elastic-wds")  # under pytest's temp dir, not the system's (issue 36)
    build_shards(root, shard_sizes=(40, 25, 1, 34))
    prepare_webdataset(root, progress=False)
    return root


class KeyNoise:
    def encode_sample(self, sample):
        return {
            "__key__": sample["__key__"],
            "txt": sample["txt"],
            "noise": int(datareel.sample_rng().integers(0, 2**31)),
        }


@pytest.mark.workers
@settings(max_examples=examples(0.06))
@given(
    W=st.integers(1, 3),
    W2=st.integers(1, 3),
    m=st.integers(1, 3),
    m2=st.integers(1, 3),
    factor=st.integers(1, 2),
    epoch=st.integers(0, 2),
    seed=st.integers(0, 2**32),
)
def test_elastic_restore_on_a_webdataset_source_with_2_workers(webdataset_dir, W, W2, m, m2, factor, epoch, seed):
    data = datareel.open_dataset(webdataset_dir)
    G = math.lcm(m * W, m2 * W2) * factor
    batches = max(1, min(4, 12 // (G // (m * W))))
    start = max(0, (epoch * len(data) - G) // G * G)  # cross an epoch boundary
    report = check_restore_everywhere(
        data,
        global_batch_size=G,
        before=Topology(W, 2, m),
        after=Topology(W2, 2, m2),
        start=start,
        global_batches=batches,
        seed=seed,
        task_encoder=KeyNoise(),
    )
    assert report["restored"] >= 1


@settings(max_examples=examples(0.4))
@given(
    n=st.integers(1, 60),
    W=st.integers(1, 4),
    W2=st.integers(1, 4),
    m=st.integers(1, 3),
    m2=st.integers(1, 3),
    factor=st.integers(1, 2),
    seed=st.integers(0, 2**32),
)
def test_a_finite_pass_restores_everywhere_up_to_and_including_its_end(n, W, W2, m, m2, factor, seed):
    """repeat=False: every state of the pass, the one saved after its last (partial) step included,
    restores on another topology; the end of a pass is never refused and yields nothing more."""
    G = math.lcm(m * W, m2 * W2) * factor
    data = datareel.from_sequence([{"id": i} for i in range(n)], name="finite")
    report = check_restore_everywhere(
        data,
        global_batch_size=G,
        before=Topology(W, 0, m),
        after=Topology(W2, 0, m2),
        global_batches=-(-n // G) + 1,
        seed=seed,
        repeat=False,
        task_encoder=NoisyEncoder(),
    )
    assert report["end"] == n and report["restored"] >= 1
    ended = datareel.Loader(data, global_batch_size=G, micro_batch_size=m2, world_size=W2, rank=0, repeat=False)
    ended.load_state_dict(edited(ended.state_dict(), cursor=n))
    assert list(ended) == [] and len(ended) == 0 and ended.cursor == n
