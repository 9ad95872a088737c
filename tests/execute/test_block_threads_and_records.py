"""Where the threaded map meets the block shuffle and Energon-style handlers: with map_threads a local block
source is still read a block at a time (one read per block, the same batches), and an exception that refuses
new attributes reaches the handler as itself, with the sample's records."""

from __future__ import annotations

import numpy as np
import pytest

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.formats.webdataset import kept
from datareel.sources.source_info import RECORDS
from datareel.storage.handles import Descriptor as OpenFile
from wds_helpers import build_shards


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("bt") / "wds"
    build_shards(root, (16, 16, 16))
    prepare_webdataset(root, progress=False)
    return root


class Keys:
    def encode_sample(self, sample):
        return {"key": sample["__key__"]}


def _run(root, threads, monkeypatch):
    kept._PER_PROCESS.clear()
    reads = []
    real = OpenFile.read_range
    monkeypatch.setattr(OpenFile, "read_range", lambda self, a, b: reads.append((a, b)) or real(self, a, b))
    loader = datareel.Loader(
        datareel.open_dataset(root, decode=False),
        global_batch_size=8,
        micro_batch_size=8,
        seed=1,
        task_encoder=Keys(),
        map_threads=threads,
        shuffle=datareel.BlockShuffle(block=4),
    )
    it = iter(loader)
    next(it)  # shards opened and checked on first use
    reads.clear()
    keys = [next(it)["key"] for _ in range(5)]
    return keys, len(reads)


def test_map_threads_keep_block_reads(root, monkeypatch):
    serial, serial_reads = _run(root, 0, monkeypatch)
    threaded, threaded_reads = _run(root, 2, monkeypatch)
    assert threaded == serial
    # 6 global batches of 8 from blocks of 4 at period 8: batches 1-4 read 8 blocks (with batch 0), 5-6 eight more
    assert threaded_reads == serial_reads <= 8


class Strict(Exception):
    """An exception that refuses attributes of others (as a frozen dataclass does)."""

    def __setattr__(self, name, value):
        if "datareel" in name:
            raise AttributeError(f"{type(self).__name__} is read-only")
        super().__setattr__(name, value)


class Failing:
    def encode_sample(self, sample):
        if sample["__key__"].endswith("3"):
            raise Strict(sample["__key__"])
        return {"key": sample["__key__"]}


@pytest.mark.parametrize("threads", [0, 2])
def test_a_frozen_exception_reaches_the_handler_with_its_records(root, threads):
    seen = []
    loader = datareel.Loader(
        datareel.open_dataset(root, decode=False),
        global_batch_size=8,
        micro_batch_size=8,
        seed=1,
        task_encoder=Failing(),
        on_error="substitute",
        map_threads=threads,
        error_handler=lambda exc, key: seen.append((exc, getattr(exc, RECORDS, None))),
    )
    batches = [next(iter(loader)) for _ in range(1)]
    for _, b in zip(range(6), loader):
        batches.append(b)
    assert seen and all(isinstance(exc, Strict) for exc, _ in seen)
    assert all(sources and sources[0].shard_name.endswith(".tar") for _, sources in seen)
    assert all(not k.endswith("3") for b in batches for k in b["key"])
    assert np.all([len(b["key"]) == 8 for b in batches])
