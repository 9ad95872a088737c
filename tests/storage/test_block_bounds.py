"""Block-shuffle option bounds × local and bucket (issue 36, item 4): ``BlockShuffle(block, window, period)``
is either refused when it is made (an :class:`OptionError` naming the values, their product and the limit),
or every micro-batch is served, from a local copy and from a bucket alike (where the lookahead fetches a
super-period ahead), the same samples in both, and the cursor counts exactly the micro-batches handed out."""

from __future__ import annotations

import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import datareel
from datareel import OptionError
from datareel.cli.prepare import prepare_webdataset
from datareel.storage import node_cache
from profiles import examples
from s3_server import upload
from wds_helpers import write_shard

G, M, STEPS = 8, 4, 6
SUPER_PERIOD_LIMIT = 1 << 48  # block × window × period at most this (docs/locality.md)


@pytest.fixture(scope="module")
def server():
    from s3_server import s3_server

    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def sources(server, tmp_path_factory):
    """One prepared WebDataset (3 shards × 16 samples), opened locally and from ``s3://reel-bounds``, with a
    node cache of the module's own."""
    from s3_server import make_bucket

    root = tmp_path_factory.mktemp("bounds")
    for s in range(3):
        write_shard(root / "a" / f"s{s}.tar", [(f"a{s}_{j:02d}", {"bin": bytes([j]) * 512}) for j in range(16)])
    prepare_webdataset(root / "a", progress=False)
    make_bucket("reel-bounds")
    upload(root / "a", "s3://reel-bounds/a")
    saved = os.environ.get("DATAREEL_NODE_CACHE")
    os.environ["DATAREEL_NODE_CACHE"] = str(root / "node")
    node_cache._PER_PROCESS.clear()
    yield {"local": datareel.open_dataset(root / "a"), "bucket": datareel.open_dataset("s3://reel-bounds/a")}
    node_cache._PER_PROCESS.clear()
    if saved is None:
        os.environ.pop("DATAREEL_NODE_CACHE", None)
    else:
        os.environ["DATAREEL_NODE_CACHE"] = saved


class Keys:
    def encode_sample(self, sample):
        return {"key": sample["__key__"]}


@st.composite
def bounds(draw):
    """Block, window and period inside each one's own bounds, extremes and the edge of the product's limit
    favoured (``None``: the period is the global batch size)."""
    block = draw(st.sampled_from([1, 2, 4, (1 << 20) - 1, 1 << 20]) | st.integers(1, 1 << 20))
    window = draw(st.sampled_from([1, 2, (1 << 10) - 1, 1 << 10]) | st.integers(1, 1 << 10))
    edge = SUPER_PERIOD_LIMIT // (block * window)
    period = draw(st.sampled_from([None, 1, G, edge, edge + 1, 1 << 40]) | st.integers(1, 1 << 40))
    return block, window, None if period is None else min(max(period, 1), 1 << 40)


@settings(max_examples=examples(0.2))
@given(bounds())
@example((1 << 20, 1 << 10, 1 << 40))  # the issue's: 2^70 counters a super-period
@example((1 << 20, 1 << 10, SUPER_PERIOD_LIMIT >> 30))  # the largest period that fits with them
@example((4, 1, None))
def test_block_options_are_refused_when_made_or_every_micro_batch_is_served(sources, drawn):
    block, window, period = drawn
    span = block * window * (G if period is None else period)
    try:
        order = datareel.BlockShuffle(block=block, window=window, period=period)
        datareel.Loader(sources["local"], global_batch_size=G, micro_batch_size=M, shuffle=order)
    except OptionError as exc:
        assert span > SUPER_PERIOD_LIMIT, f"refused although within the limit: {exc}"
        text = str(exc)
        assert f"block={block}" in text and f"window={window}" in text and f"{span:,}" in text
        assert f"{SUPER_PERIOD_LIMIT:,}" in text and f"{SUPER_PERIOD_LIMIT // (block * window):,}" in text
        return
    assert span <= SUPER_PERIOD_LIMIT, "accepted past the limit"
    got = {}
    for where, data in sources.items():
        loader = datareel.Loader(
            data, global_batch_size=G, micro_batch_size=M, seed=1, shuffle=order, task_encoder=Keys()
        )
        it = iter(loader)
        got[where] = [next(it)["key"] for _ in range(STEPS)]  # a BatchError here is a micro-batch lost
        assert loader.state_dict()["cursor"] == STEPS * M
        assert (loader._driver.maker.lookahead is not None) == (where == "bucket" and block > 1)
        loader.close()
    assert got["bucket"] == got["local"]


def test_a_lookahead_that_cannot_reach_gives_no_hint_and_fails_no_micro_batch(sources, monkeypatch):
    """The hint alone (the bound lifted): a super-period of 2^70 counters from a bucket gives no lookahead, and
    every micro-batch is served, the same as the local copy's."""
    from datareel.plan import blocks

    monkeypatch.setattr(blocks, "SUPER_PERIOD_LIMIT", 1 << 80, raising=False)
    order = datareel.BlockShuffle(block=1 << 20, window=1 << 10, period=1 << 40)
    got = {}
    for where, data in sources.items():
        loader = datareel.Loader(
            data, global_batch_size=G, micro_batch_size=M, seed=1, shuffle=order, task_encoder=Keys()
        )
        it = iter(loader)
        got[where] = [next(it)["key"] for _ in range(STEPS)]
        assert loader.state_dict()["cursor"] == STEPS * M
        loader.close()
    assert got["bucket"] == got["local"]


def test_the_lookahead_past_int64_is_none():
    import numpy as np

    from datareel.execute.ahead import Lookahead
    from datareel.plan.nodes import ReelPlan

    plan = ReelPlan.single(size=1000, name="x", seed=0, shuffle=False)
    for span in (1 << 62, 1 << 63, 1 << 70):
        ahead = Lookahead(plan, span)
        assert ahead.ahead(np.arange(0, 4)) is None
        assert ahead.ahead(np.arange(16, 20)) is None  # stride known: too far to look
    near = Lookahead(plan, 1 << 40)
    near.ahead(np.arange(0, 4))
    got = near.ahead(np.arange(16, 20))
    assert got is not None and got[1].tolist() == [(16 + (1 << 40) + j) % 1000 for j in range(4)]
