"""Threads × evictions × error policies (issue 36, item 3): with more shards than the process keeps open
(``DATAREEL_MAX_OPEN_SHARDS`` of 1 or 2), the threads of ``map_threads`` evict each other's handles all the
time; every use of a handle (its index, its descriptor) is pinned, so a handle closed by another thread's
eviction is never read, and the batches are the unthreaded loader's, byte for byte, with no sample
substituted or failed.

The race is made reproducible: every handle a thread is given is held a moment before it is used (a
slowed-down ``OpenShards.get``), the window in which another thread's eviction used to close it."""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time

import numpy as np
import pytest
import torch

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.formats.jsonl.prepare import prepare_jsonl
from datareel.storage import handles
from datareel.storage.handles import Handle, OpenShards
from wds_helpers import write_shard

SHARDS, PER_SHARD = 12, 4


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("evictions")
    for s in range(SHARDS):
        samples = [(f"k{s:02d}-{j}", {"txt": f"{s}/{j}".encode() * 50}) for j in range(PER_SHARD)]
        write_shard(root / f"s{s:02d}.tar", samples)
    prepare_webdataset(root, progress=False)
    return root


@pytest.fixture
def few_open(monkeypatch):
    """This process keeps ``cap`` shards open (a fresh set), and each handle handed out is held a moment
    before its caller uses it: another thread's eviction gets in between."""

    def use(cap: int) -> None:
        monkeypatch.setenv("DATAREEL_MAX_OPEN_SHARDS", str(cap))
        handles._PER_PROCESS.clear()
        original = OpenShards.get

        def slow_get(self, path, opener):
            handle = original(self, path, opener)
            time.sleep(0.0005)  # the caller's next line (reading the handle) comes late
            return handle

        monkeypatch.setattr(OpenShards, "get", slow_get)

    yield use
    handles._PER_PROCESS.clear()


class Text:
    def encode_sample(self, sample):
        return {"key": sample["__key__"], "txt": sample["txt"]}

    def batch(self, samples):
        return {"key": [s["key"] for s in samples], "txt": [s["txt"] for s in samples]}


def exact(value):
    """``value`` as plain data, each tensor as (dtype, shape, bytes): equal means byte-equal."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.contiguous().numpy().tobytes())
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    return value


def _run(data, threads, **options):
    loader = datareel.Loader(
        data, global_batch_size=16, micro_batch_size=16, seed=3, map_threads=threads, task_encoder=Text(), **options
    )
    it = iter(loader)
    got = [next(it) for _ in range(SHARDS * PER_SHARD // 16 * 2)]  # two epochs
    loader.close()
    return pickle.dumps(exact(got))


@pytest.mark.parametrize("shuffle", ["full", "block"])
@pytest.mark.parametrize("on_error", ["raise", "substitute"])
@pytest.mark.parametrize("cap", [1, 2])
def test_threads_evicting_each_others_handles_give_the_unthreaded_batches(
    many_shards, few_open, caplog, shuffle, on_error, cap
):
    few_open(cap)
    order = datareel.BlockShuffle(block=2) if shuffle == "block" else True
    data = datareel.open_dataset(many_shards)
    with caplog.at_level(logging.WARNING, logger="datareel"):
        serial = _run(data, 0, shuffle=order, on_error=on_error)
        for threads in (2, 5, 8):
            assert _run(data, threads, shuffle=order, on_error=on_error) == serial, f"map_threads={threads}"
    assert not [r for r in caplog.records if "substitut" in r.getMessage()]
    assert handles.handles().opened > SHARDS  # shards were evicted and opened again, many times


@pytest.mark.parametrize("shuffle", ["full", "block"])
def test_a_jsonl_file_evicted_by_a_thread_is_read_whole(tmp_path, few_open, shuffle):
    """JSONL lines are read by the threads under either shuffle (the block shuffle's block reads are
    WebDataset's), each file's index taken from its handle."""
    few_open(1)
    order = datareel.BlockShuffle(block=2) if shuffle == "block" else True
    paths = []
    for f in range(6):
        path = tmp_path / f"d{f}.jsonl"
        path.write_text("".join(f'{{"f": {f}, "i": {i}}}\n' for i in range(8)))
        prepare_jsonl(path)
        paths.append(path)
    data = datareel.mix([(datareel.open_dataset(p), 1) for p in paths])

    def run(threads):
        loader = datareel.Loader(
            data, global_batch_size=12, micro_batch_size=12, seed=1, map_threads=threads, shuffle=order
        )
        it = iter(loader)
        got = [next(it) for _ in range(8)]
        loader.close()
        return pickle.dumps(exact(got))

    serial = run(0)
    assert run(4) == serial and run(8) == serial


def test_a_handle_evicted_while_in_use_is_closed_when_its_last_user_lets_go(tmp_path):
    shards = OpenShards(1)
    paths = []
    for j in range(3):
        (tmp_path / f"f{j}").write_bytes(bytes([j]) * 64)
        paths.append(str(tmp_path / f"f{j}"))
    opener = lambda p: lambda: Handle(os.open(p, os.O_RDONLY), np.array([0, 64], dtype=np.uint64))  # noqa: E731
    with shards.use(paths[0], opener(paths[0])) as first:
        with shards.use(paths[1], opener(paths[1])):  # evicts the first from the set: it stays open for us
            assert shards.peek(paths[0]) is None
            assert first.read_range(0, 4) == b"\0" * 4 and first.index.tolist() == [0, 64]
        fd = first.fd
        os.fstat(fd)  # still open
    with pytest.raises(OSError):
        os.fstat(fd)  # closed once its last user let go
    assert first.index.size == 0

    # threads pinning and evicting at once: every read is of the file asked for
    errors = []

    def reader(j):
        for _ in range(200):
            with shards.use(paths[j], opener(paths[j])) as h:
                if h.read_range(0, 8) != bytes([j]) * 8:
                    errors.append(j)

    pool = [threading.Thread(target=reader, args=(j % 3,)) for j in range(6)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors and len(shards) == 1
