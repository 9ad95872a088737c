"""The block shuffle from a bucket (issue 28): restore everywhere (plain, mixed, packed, under a ramp-up)
with the node-local block cache shared by the ranks and their workers, the same batches as the local copy,
and far fewer requests per sample than the full shuffle."""

from __future__ import annotations

import pytest

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.storage import node_cache
from datareel.storage.remote import remote_files
from datareel.testing import Topology, check_restore_everywhere
from s3_server import upload
from wds_helpers import write_shard

SHARDS, PER_SHARD = 3, 48


@pytest.fixture(scope="module")
def server():
    from s3_server import s3_server

    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def datasets(server, tmp_path_factory):
    """Two prepared WebDatasets of one-part samples, locally and in the bucket ``s3://reel-blocks``."""
    from s3_server import make_bucket

    root = tmp_path_factory.mktemp("blocks")
    make_bucket("reel-blocks")
    for name in ("a", "b"):
        for s in range(SHARDS):  # 48 KiB a sample: the store's coalescing of neighbours (64 KiB) merges none
            samples = [(f"{name}{s}_{j:03d}", {"bin": bytes([j]) * (48 << 10)}) for j in range(PER_SHARD)]
            write_shard(root / name / f"s{s}.tar", samples)
        prepare_webdataset(root / name, progress=False)
        upload(root / name, f"s3://reel-blocks/{name}")
    return root, "s3://reel-blocks"


@pytest.fixture
def shared_cache(tmp_path, monkeypatch):
    """A node cache directory of this test's own, shared by every rank and worker the test starts."""
    monkeypatch.setenv("DATAREEL_NODE_CACHE", str(tmp_path / "node"))
    node_cache._PER_PROCESS.clear()
    yield tmp_path / "node"
    node_cache._PER_PROCESS.clear()


class Keys:
    def encode_sample(self, sample):
        return {"key": f"{sample['__key__']}"}


class PackKeys(Keys):
    def pack_selected_samples(self, samples):
        return {"key": "+".join(s["key"] for s in samples)}


def _keys(loader, batches: int) -> list:
    it = iter(loader)
    try:
        return [next(it)["key"] for _ in range(batches)]
    finally:
        loader.close()


@pytest.mark.workers
@pytest.mark.parametrize("case", ["plain", "mixed", "packed", "ramp-up"])
def test_block_shuffle_from_a_bucket_restores_everywhere_with_a_shared_cache(datasets, shared_cache, case):
    _, url = datasets
    # a and b share their layout (so their default name): a blend tells them apart by the names given here
    a, b = datareel.open_dataset(f"{url}/a", name="a"), datareel.open_dataset(f"{url}/b", name="b")
    common: dict = dict(
        global_batch_size=8,
        before=Topology(world_size=2, num_workers=2, micro_batch_size=2),
        after=Topology(world_size=4, num_workers=1, micro_batch_size=1),
        global_batches=4,
        task_encoder=Keys(),
        shuffle=datareel.BlockShuffle(block=4),
    )
    data = a
    if case == "mixed":
        data = datareel.mix([(a, 1), (b, 1)])
    elif case == "packed":
        # a sample is ~49 KiB with its headers: packs of one to three samples
        common.update(packing=datareel.Packing(max_length=150_000, length="bytes", window=16), task_encoder=PackKeys())
    elif case == "ramp-up":
        common["global_batch_size"] = datareel.RampUp(start=4, increment=4, ramp_samples=24, final=8)
        common["before"] = Topology(world_size=2, num_workers=2, micro_batch_size=2)
    report = check_restore_everywhere(data, seed=4, **common)
    assert report["restored"] >= 1
    assert any(shared_cache.rglob("*")), "the ranks' workers fetched no block through the node cache"


def test_same_batches_as_the_local_copy_and_a_block_costs_one_request(datasets, shared_cache, monkeypatch):
    monkeypatch.setenv("DATAREEL_LOOKAHEAD_BYTES", "0")  # the requests counted are the reads' own
    root, url = datasets
    kw = dict(global_batch_size=16, micro_batch_size=16, seed=2, task_encoder=Keys())
    blocks = datareel.BlockShuffle(block=8)
    local = _keys(datareel.Loader(datareel.open_dataset(root / "a"), shuffle=blocks, **kw), 8)
    files = remote_files()
    remote = datareel.open_dataset(f"{url}/a")
    loader = datareel.Loader(remote, shuffle=blocks, **kw)
    it = iter(loader)
    next(it)  # shards checked on first use: their metadata requests come first
    start = files.requests
    got = [next(it)["key"] for _ in range(7)]
    block_requests = files.requests - start
    loader.close()
    assert got == local[1:]
    full = datareel.Loader(datareel.open_dataset(f"{url}/a"), **kw)
    it = iter(full)
    next(it)
    start = files.requests
    for _ in range(7):
        next(it)
    full_requests = files.requests - start
    full.close()
    # blocks of 8 at period 16: batches 1-8 read 16 blocks (a block cut by a shard end is two reads), fetched
    # with batch 1 (before the count); the full shuffle makes about one ranged GET per sample (neighbours
    # in a shard closer than the store's coalescing gap share one)
    assert block_requests <= 16 and full_requests >= 7 * 16 // 2
