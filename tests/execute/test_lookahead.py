"""The block shuffle's lookahead in a bucket: from its second micro-batch on, a process hands its reader the
samples it will read about one super-period later (its own stride times the steps that span holds), as the
plan resolves them; nothing for a local source, the full shuffle or a packed reel."""

from __future__ import annotations

import numpy as np
import pytest

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.execute.ahead import Lookahead
from datareel.formats.webdataset.reader import WebDatasetSource
from datareel.plan.locality import block_span
from wds_helpers import build_shards


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ahead") / "wds"
    build_shards(root, (40, 40, 40))
    prepare_webdataset(root, progress=False)
    return root


class Keys:
    def encode_sample(self, sample):
        return {"key": sample["__key__"]}


def test_a_bucket_source_is_told_the_samples_one_super_period_ahead(root, monkeypatch):
    calls = []
    monkeypatch.setattr(WebDatasetSource, "fetch_ahead", lambda self, indices, k: calls.append((indices.copy(), k)))
    data = datareel.open_dataset(root, decode=False)
    data.prefetches = True  # as a source in a bucket says (the local store serves its ranges)
    loader = datareel.Loader(
        data,
        global_batch_size=8,
        micro_batch_size=4,
        world_size=2,
        rank=1,
        seed=3,
        task_encoder=Keys(),
        shuffle=datareel.BlockShuffle(block=4),
    )
    span = block_span(loader.plan)
    assert span == 4 * 8  # k w P
    it = iter(loader)
    for _ in range(4):
        next(it)
    assert len(calls) == 3  # from the second micro-batch on: the stride is known then
    stride = 8  # one step of rank 1 to the next: m W
    for step, (indices, k) in zip(range(1, 4), calls):
        positions = 8 * step + 4 + np.arange(4) + stride * (span // stride)
        _, expected = loader.plan.resolve(positions)
        assert k == 4 and sorted(indices.tolist()) == sorted(set(expected.tolist()))
    loader.close()


def test_no_lookahead_for_local_sources_or_the_full_shuffle(root):
    data = datareel.open_dataset(root, decode=False)
    local = datareel.Loader(data, global_batch_size=8, micro_batch_size=8, shuffle=datareel.BlockShuffle(block=4))
    assert local._driver.maker.lookahead is None
    full = datareel.Loader(data, global_batch_size=8, micro_batch_size=8)
    assert full._driver.maker.lookahead is None


def test_the_stride_is_learned_per_process_and_a_step_back_gives_none():
    from datareel.plan.nodes import ReelPlan

    plan = ReelPlan.single(size=1000, name="x", seed=0, shuffle=False)
    ahead = Lookahead(plan, 100)
    assert ahead.ahead(np.arange(0, 4)) is None
    got = ahead.ahead(np.arange(16, 20))  # stride 16: 7 steps (112 positions) ahead
    assert got is not None and got[1].tolist() == list(range(128, 132))
    assert ahead.ahead(np.arange(0, 4)) is None  # a restore moved the process back: relearn
    import pickle

    assert pickle.loads(pickle.dumps(ahead))._last is None
