"""Block reads of a WebDataset split (issue 28: ``read_many(indices, block=k)``, ``prefetch(indices, block=k)``):
the samples and batches are exactly those of sample-by-sample reads, over random block sizes, index sets and
splits with excluded samples; a block is one read of its byte span, and a sample of it read later costs no
I/O; damage is left to ``read()``, which raises it; in a bucket a micro-batch's missing blocks are one
``read_ranges`` call, and the node's cache serves them to the next process without asking the store."""

from __future__ import annotations

import itertools
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import DatasetError, NotFound
from datareel.execute.batch import BatchMaker
from datareel.execute.encoder import ResolvedEncoder
from datareel.execute.options import ExecOptions
from datareel.formats.webdataset import kept
from datareel.reel.base import Descriptor
from datareel.storage import ObjectInfo, StoreFiles, node_cache, register_scheme, unregister_scheme
from datareel.storage.handles import Descriptor as OpenFile
from datareel.storage.handles import handles
from profiles import examples
from wds_helpers import build_shards

SIZES = (10, 7, 1, 13, 6)  # shard 1 is GNU format with long names (the full parser's path)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A prepared dataset, and the same with samples excluded inside blocks. -> (root, root with excludes)"""
    root = tmp_path_factory.mktemp("blocks") / "wds"
    build_shards(root, SIZES)
    prepare_webdataset(root, progress=False)
    excluded = tmp_path_factory.mktemp("blocks-ex") / "wds"
    build_shards(excluded, SIZES)
    prepare_webdataset(excluded, progress=False)
    split = yaml.safe_load((excluded / ".nv-meta/split.yaml").read_text())
    split["exclude"] = ["parts/data-0.tar/s00002", "parts/data-0.tar/s00003", "parts/data-3.tar/s00025"]
    (excluded / ".nv-meta/split.yaml").write_text(yaml.safe_dump(split))
    return root, excluded


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty sample cache and a node cache directory of the test's own (hypothesis tests clear the
    sample cache themselves: they take no function-scoped fixture)."""
    monkeypatch.setenv("DATAREEL_NODE_CACHE", str(tmp_path / "node"))
    monkeypatch.setenv("DATAREEL_LOOKAHEAD_BYTES", "0")  # requests counted here are the reads' own
    kept._PER_PROCESS.clear()
    node_cache._PER_PROCESS.clear()
    yield
    kept._PER_PROCESS.clear()
    node_cache._PER_PROCESS.clear()


def plain(value):
    """A sample or batch with its tensors and arrays as lists (comparable with ==)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value.tolist() if hasattr(value, "tolist") else value


def one_by_one(source, indices):
    return [plain(source.read(int(i))) for i in indices]


@settings(max_examples=examples(0.5))
@given(
    k=st.integers(2, 17),
    batches=st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), min_size=1, max_size=8),
    excludes=st.booleans(),
    decode=st.sampled_from([False, True]),
)
def test_block_reads_give_the_samples_of_one_by_one_reads(dataset, k, batches, excludes, decode):
    kept._PER_PROCESS.clear()
    source = datareel.open_dataset(dataset[excludes], decode=decode)
    for asked in batches:
        indices = np.array([i % len(source) for i in asked], dtype=np.int64)
        got = source.read_many(indices, block=k)
        assert all(sample is not None for sample in got)  # nothing here is damaged: all read on this path
        assert [plain(s) for s in got] == one_by_one(source, indices)


def test_a_block_is_one_read_and_its_other_samples_cost_no_io(fresh, dataset, monkeypatch):
    source = datareel.open_dataset(dataset[0], decode=False)
    reads = []
    real = OpenFile.read_range
    monkeypatch.setattr(OpenFile, "read_range", lambda self, a, b: reads.append((a, b)) or real(self, a, b))
    source.read_many(np.array([0]), block=4)  # first use: the shard is opened and checked (its tar end read)
    reads.clear()
    got = source.read_many(np.array([5]), block=4)  # block [4, 8) of shard 0
    assert len(reads) == 1 and got[0] is not None
    start, stop = reads[0]
    idx = source._index(0)
    assert (start, stop) == (int(idx[4]), int(idx[8]))
    reads.clear()
    got = source.read_many(np.array([4, 6, 7]), block=4)
    assert reads == [] and [plain(s) for s in got] == one_by_one(source, [4, 6, 7])
    reads.clear()
    assert source.read_many(np.array([6]), block=4)[0] is not None and len(reads) == 1  # popped when used


def test_a_block_is_cut_to_its_shard_and_excluded_samples_are_read_and_dropped(fresh, dataset):
    source = datareel.open_dataset(dataset[1], decode=False)
    # index 2 is split index 4 (s00002 and s00003 are excluded): its block of 8, [0, 8), spans shard 0's
    # first 8 kept samples; shard 0 holds 8 kept samples, so the block ends with the shard
    held = kept.sample_cache()
    got = source.read_many(np.array([2]), block=8)
    assert plain(got[0]) == plain(source.read(2))
    shard0 = source._paths[0]
    assert {key for key in held._kept} == {(shard0, i) for i in (0, 1, 5, 6, 7, 8, 9)}  # no excluded, no shard 1


def test_damage_inside_a_block_is_left_to_read_which_raises_it(fresh, dataset, tmp_path):
    import shutil

    root = tmp_path / "damaged"
    shutil.copytree(dataset[0], root)
    shard = root / "parts/data-0.tar"
    source = datareel.open_dataset(root, decode=False)
    idx = source._index(0)
    data = bytearray(shard.read_bytes())
    data[int(idx[5]) + 10] ^= 0x55  # a name byte of sample 5's first header: its checksum fails
    shard.write_bytes(bytes(data))
    handles().close_all()
    got = source.read_many(np.arange(4, 8), block=4)
    assert got[1] is None and all(got[j] is not None for j in (0, 2, 3))
    with pytest.raises(DatasetError, match="no valid tar header"):
        source.read(5)
    shard.write_bytes(bytes(data[: int(idx[6])]))  # truncated after it was opened: block [4, 8) comes short
    kept._PER_PROCESS.clear()
    assert source.read_many(np.array([4, 6]), block=4) == [None, None]
    with pytest.raises(DatasetError, match="truncated"):
        source.read(6)


def test_a_small_sample_cache_keeps_the_samples_right(fresh, dataset, monkeypatch):
    monkeypatch.setenv("DATAREEL_BLOCK_CACHE_BYTES", "40000")  # a block of 8 here spans ~32 KB
    kept._PER_PROCESS.clear()
    source = datareel.open_dataset(dataset[0], decode=False)
    for i in [*range(0, len(source), 2), *range(1, len(source), 2)]:
        assert plain(source.read_many(np.array([i]), block=8)[0]) == plain(source.read(i))
        assert kept.sample_cache().bytes <= 40000
    monkeypatch.setenv("DATAREEL_BLOCK_CACHE_BYTES", "lots")
    kept._PER_PROCESS.clear()
    with pytest.raises(datareel.OptionError, match="DATAREEL_BLOCK_CACHE_BYTES='lots'"):
        kept.sample_cache()


def test_the_sample_cache_counts_a_blocks_bytes_once_and_evicts_whole_blocks():
    cache = kept.SampleCache(250)
    first, second = bytes(100), bytes(120)
    for i in range(4):
        cache.put(("a.tar", i), ([], first, ("a", i, 0, 0)))
    assert cache.bytes == 100 and len(cache) == 4
    cache.put(("b.tar", 0), ([], second, ("b", 0, 0, 0)))
    assert cache.bytes == 220
    cache.put(("c.tar", 0), ([], bytes(100), ("c", 0, 0, 0)))  # over the limit: block a (least recent) goes whole
    assert cache.bytes == 220 and len(cache) == 2 and ("a.tar", 3) not in cache
    assert cache.pop(("b.tar", 0)) is not None and cache.bytes == 100
    cache.put(("d.tar", 0), ([], bytes(251), ("d", 0, 0, 0)))  # bigger than the limit: not kept
    assert cache.bytes == 100 and ("d.tar", 0) not in cache


def test_without_blocks_the_sample_path_is_unchanged(fresh, dataset):
    source = datareel.open_dataset(dataset[0], decode=False)
    source.read_many(np.arange(6))
    assert len(kept.sample_cache()) == 0


# -- batches: the batch maker with and without read_blocks --------------------------------------------


class Keys:
    def encode_sample(self, sample):
        return {"key": sample["__key__"], "txt": sample["txt"], "json": sample["json"]}


@settings(max_examples=examples(0.3))
@given(
    k=st.integers(2, 16),
    steps=st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=5), min_size=1, max_size=6),
    excludes=st.booleans(),
)
def test_batches_are_the_same_with_and_without_block_reads(dataset, k, steps, excludes):
    kept._PER_PROCESS.clear()
    source = datareel.open_dataset(dataset[excludes])
    plain_maker = BatchMaker([source], ResolvedEncoder(Keys()), ExecOptions(seed=3))
    block_maker = BatchMaker([source], ResolvedEncoder(Keys()), ExecOptions(seed=3, read_blocks=((0, k),)))
    position = 0
    for step, asked in enumerate(steps):
        indices = np.array([i % len(source) for i in asked], dtype=np.int64)
        positions = np.arange(position, position + len(indices), dtype=np.int64)
        position += len(indices)
        desc = Descriptor(step, positions, np.zeros(len(indices), dtype=np.int32), indices)
        assert plain(block_maker[desc]) == plain(plain_maker[desc])


# -- a bucket: a store that prefetches (counted), with ETags ----------------------------------------------


class Bucket(StoreFiles):
    prefetches = True

    def __init__(self, blobs: dict[str, bytes]):
        self.blobs = blobs
        self.ranges: list[tuple[str, int, int]] = []  # every range read_ranges was asked for
        self.calls = 0  # read_ranges calls
        self.singles = 0  # read_range calls for samples (not metadata, not the opening checks)
        self.log: Path | None = None  # where every process appends the sample requests it made

    def _logged(self, requests: int) -> None:
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"{requests}\n")

    def info(self, path: str) -> ObjectInfo:
        if path not in self.blobs:
            raise NotFound(f"{path} does not exist")
        return ObjectInfo(len(self.blobs[path]), etag=f'"{zlib.crc32(self.blobs[path]):x}"')

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        if path not in self.blobs:
            raise NotFound(f"{path} does not exist")
        self.singles += path.endswith(".tar") and stop - start != 512
        self._logged(int(path.endswith(".tar") and stop - start != 512))
        return self.blobs[path][start:stop]

    def read_ranges(self, wanted):
        self.calls += 1
        self.ranges += list(wanted)
        self._logged(len(wanted))
        return {w: self.blobs[w[0]][w[1] : w[2]] for w in wanted}


@pytest.fixture
def bucket(fresh, dataset):
    blobs = {}
    root = dataset[0]
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        blobs[f"mem-blocks://b/wds/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    store = Bucket(blobs)
    register_scheme("mem-blocks", lambda: store)
    yield store
    unregister_scheme("mem-blocks")


def block_order(n: int, k: int, m: int) -> list[np.ndarray]:
    """Micro-batches of ``m`` as the block shuffle makes them with ``m·W`` = T = m: the blocks of ``k`` in
    groups of ``m``, one sample of each block per micro-batch over ``k`` micro-batches."""
    order = []
    first = np.arange(0, n, k)
    for group in range(0, len(first), m):
        starts = first[group : group + m]
        for t in range(k):
            picked = starts + t
            order.append(picked[picked < n])
    return [batch for batch in order if len(batch)]


def test_in_a_bucket_a_micro_batchs_blocks_are_one_call_and_every_byte_is_used_once(
    fresh, dataset, bucket, monkeypatch
):
    monkeypatch.setenv("DATAREEL_NODE_CACHE", "off")
    node_cache._PER_PROCESS.clear()
    source = datareel.open_dataset("mem-blocks://b/wds", decode=False)
    local = datareel.open_dataset(dataset[0], decode=False)
    k, m = 4, 3
    maker = BatchMaker([source], ResolvedEncoder(Keys()), ExecOptions(seed=1, read_blocks=((0, k),)))
    expected = BatchMaker([local], ResolvedEncoder(Keys()), ExecOptions(seed=1))
    used, count = 0, 0
    for step, batch in enumerate(block_order(len(source), k, m)):
        desc = Descriptor(step, np.arange(len(batch)) + count, np.zeros(len(batch), dtype=np.int32), batch)
        assert plain(maker[desc]) == plain(expected[desc])
        used += int(source.byte_sizes(batch).sum())
        count += len(batch)
    read = sum(b - a for _, a, b in bucket.ranges)
    assert bucket.singles == 0  # no sample was read alone
    assert read == used  # every byte read is used once (blocks are cut to shards: no byte read twice)
    assert len(bucket.ranges) <= -(-count // k) + len(SIZES)  # one range per block (shard ends cut blocks)


def test_the_node_cache_serves_a_block_to_the_next_process_without_the_store(fresh, dataset, bucket):
    k = 8
    first = datareel.open_dataset("mem-blocks://b/wds", decode=False)
    first.prefetch(np.array([0, 9, 20]), block=k)
    got = first.read_many(np.array([0, 9, 20]), block=k)
    asked = len(bucket.ranges)
    assert asked == 3 and all(s is not None for s in got)
    kept._PER_PROCESS.clear()  # as another process: no sample kept in memory
    second = datareel.open_dataset("mem-blocks://b/wds", decode=False)
    second.prefetch(np.array([1, 8, 21]), block=k)  # the same blocks: [0, 8), [8, 10) and [18, 24)
    again = second.read_many(np.array([1, 8, 21]), block=k)
    assert len(bucket.ranges) == asked  # all three blocks came from the node's directory
    assert [plain(s) for s in again] == one_by_one(second, [1, 8, 21])
    assert node_cache.node_cache().fetched == 3


def block_parts(loader, positions: int, k: int) -> int:
    """Distinct block parts (a block in one shard) the loader's first ``positions`` touch: the requests. The
    ranks run one after another on one node here, so a part two ranks read (a tail block the last period
    spreads over offsets) is fetched once and served to the second from the node's cache."""
    _, index = loader.plan.resolve(np.arange(positions, dtype=np.int64))
    shard, _ = loader.sources[0].locate_many(index)
    return len(set(zip((index // k).tolist(), shard.tolist())))


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_block_shuffle_loader_over_a_bucket_reads_each_block_once_with_the_local_batches(
    fresh, dataset, bucket, world_size
):
    k, steps = 4, len(datareel.open_dataset(dataset[0])) // (2 * world_size)  # one epoch
    for rank in range(world_size):
        kept._PER_PROCESS.clear()
        options = dict(global_batch_size=8, micro_batch_size=2, world_size=world_size, rank=rank, seed=5)
        options.update(shuffle=datareel.BlockShuffle(block=k), task_encoder=Keys())
        remote = datareel.Loader(datareel.open_dataset("mem-blocks://b/wds"), **options)
        local = datareel.Loader(datareel.open_dataset(dataset[0]), **options)
        got = [plain(b) for b in itertools.islice(remote, steps)]
        assert got == [plain(b) for b in itertools.islice(local, steps)]
        assert remote._driver.maker.options.read_blocks == ((0, k),)
    assert bucket.singles == 0
    assert len(bucket.ranges) == block_parts(remote, steps * 2 * world_size, k)  # one request per block part


@pytest.mark.workers
def test_dataloader_workers_share_the_node_cache(fresh, dataset, bucket, tmp_path):
    """With 2 workers a block's samples are read by both (micro-steps alternate): the node's cache makes it
    one request to the store all the same, and the batches are the local ones."""
    bucket.log = tmp_path / "requests"
    k, steps = 4, len(datareel.open_dataset(dataset[0])) // 2
    options = dict(global_batch_size=4, micro_batch_size=2, seed=2, shuffle=datareel.BlockShuffle(block=k))
    remote = datareel.Loader(datareel.open_dataset("mem-blocks://b/wds"), num_workers=2, task_encoder=Keys(), **options)
    local = datareel.Loader(datareel.open_dataset(dataset[0]), task_encoder=Keys(), **options)
    got = [plain(b) for b in itertools.islice(remote, steps)]
    assert got == [plain(b) for b in itertools.islice(local, steps)]
    remote.close()
    requests = sum(int(n) for n in bucket.log.read_text().split())
    assert requests <= block_parts(local, len(local.sources[0]), k)  # once per node, whichever worker fetched it


class KeyOnly:
    def encode_sample(self, sample):
        return {"key": f"{sample['__source__']}/{sample['__key__']}"}


@pytest.mark.parametrize("case", ["plain", "mixed"])
def test_restore_everywhere_holds_with_block_reads_from_a_bucket_and_a_shared_cache(fresh, dataset, bucket, case):
    """Ranks in one process share the process's kept samples and the node's directory: every restore
    still continues exactly (datareel.testing.check_restore_everywhere)."""
    from datareel.testing import Topology, check_restore_everywhere

    data = datareel.open_dataset("mem-blocks://b/wds")
    if case == "mixed":
        data = datareel.mix([(data, 2), (datareel.from_sequence([{"__key__": f"q{i}"} for i in range(29)]), 1)])
    report = check_restore_everywhere(
        data,
        global_batch_size=12,
        before=Topology(2, 0, 3),
        after=Topology(3, 0, 2),
        global_batches=4,
        seed=4,
        task_encoder=KeyOnly(),
        shuffle=datareel.BlockShuffle(block=4),
    )
    assert report["restored"] >= 1
    assert len(bucket.ranges) > 0 and bucket.singles == 0  # read in blocks


def test_block_reads_from_s3_give_the_local_batches_through_the_node_cache(fresh, dataset, tmp_path, monkeypatch):
    """Over a real S3 server (moto) behind a counting proxy: the batches of the local copy, a ranged GET per
    block part (plus each shard's opening check), and a second reader on the node asks the server for no
    sample bytes."""
    from s3_server import FaultyProxy, make_bucket, s3_server, upload

    with s3_server():
        make_bucket("blocks")
        upload(dataset[0], "s3://blocks/wds")
        proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"])
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        try:
            k, steps = 4, len(datareel.open_dataset(dataset[0])) // 2
            options = dict(global_batch_size=4, micro_batch_size=2, seed=8, task_encoder=Keys())
            options.update(shuffle=datareel.BlockShuffle(block=k))
            local = datareel.Loader(datareel.open_dataset(dataset[0]), **options)
            expected = [plain(b) for b in itertools.islice(local, steps)]
            remote = datareel.Loader(datareel.open_dataset("s3://blocks/wds"), **options)
            before = proxy.ranged_gets
            assert [plain(b) for b in itertools.islice(remote, steps)] == expected
            gets = proxy.ranged_gets - before
            assert gets <= block_parts(local, 2 * steps, k) + len(SIZES)  # + each shard's tar-end check
            assert any(p.name.endswith(".blk") for p in (tmp_path / "node").iterdir())
            kept._PER_PROCESS.clear()  # another process on the node
            again = datareel.Loader(datareel.open_dataset("s3://blocks/wds"), **options)
            before = proxy.ranged_gets
            assert [plain(b) for b in itertools.islice(again, steps)] == expected
            assert proxy.ranged_gets - before <= len(SIZES)  # the opening checks only
        finally:
            proxy.close()


class SlowBucket(Bucket):
    """A bucket whose batched reads take a while, noting the thread that asked."""

    def __init__(self, blobs):
        super().__init__(blobs)
        self.threads: list[str] = []

    def read_ranges(self, wanted):
        import threading
        import time

        self.threads.append(threading.current_thread().name)
        time.sleep(0.05)
        return super().read_ranges(wanted)


def test_blocks_announced_ahead_are_fetched_in_the_background_and_used_once(fresh, dataset, bucket, monkeypatch):
    monkeypatch.delenv("DATAREEL_LOOKAHEAD_BYTES")  # this test is of the lookahead
    slow = SlowBucket({url.replace("mem-blocks://", "mem-slow://"): blob for url, blob in bucket.blobs.items()})
    register_scheme("mem-slow", lambda: slow)
    try:
        k, m = 4, 3
        source = datareel.open_dataset("mem-slow://b/wds", decode=False)
        local = datareel.open_dataset(dataset[0], decode=False)
        order = block_order(len(source), k, m)
        for step, batch in enumerate(order):
            source.prefetch(batch, block=k)
            got = source.read_many(batch, block=k)
            ahead = order[step + 1 : step + 1 + k]  # the next k micro-batches, announced
            source.fetch_ahead(np.concatenate(ahead) if ahead else np.array([], dtype=np.int64), k)
            assert [plain(s) for s in got] == one_by_one(source, batch)  # read() reads alone (read_range)
        assert any(name.startswith("datareel-ahead") for name in slow.threads)  # fetched in the background
        read = sum(b - a for _, a, b in slow.ranges)
        assert read == int(local.byte_sizes(np.arange(len(local))).sum())  # nothing fetched twice
        kept._PER_PROCESS.clear()  # the batch maker passes what it is told of later micro-batches on
        maker = BatchMaker([source], ResolvedEncoder(Keys()), ExecOptions(seed=1, read_blocks=((0, k),)))
        source._ahead = None
        maker.prefetch(
            np.zeros(2, dtype=np.int32), np.array([0, 4]), ahead=(np.zeros(1, dtype=np.int32), np.array([8]))
        )
        assert source._ahead.take(("mem-slow://b/wds/parts/data-0.tar", *map(int, source._index(0)[[8, 10]])))
        monkeypatch.setenv("DATAREEL_LOOKAHEAD_BYTES", "0")  # off: the same batches, nothing in the background
        kept._PER_PROCESS.clear()
        fresh_source = datareel.open_dataset("mem-slow://b/wds", decode=False)
        slow.threads.clear()
        fresh_source.fetch_ahead(np.arange(8), k)
        assert slow.threads == [] and fresh_source._ahead.bytes == 0
    finally:
        unregister_scheme("mem-slow")
