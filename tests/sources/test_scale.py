"""Datasets of many shards (issue 14): bounded open files, and an open that reads no shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.sources.handles import Handle, OpenShards
from datareel.storage import handles as handles_module
from read_only import read_only
from wds_helpers import write_template_shards, write_tiny_shards


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_open_shards_are_bounded_and_the_least_recently_used_is_closed(tmp_path):
    made: list[Handle] = []

    def opener(i: int):
        def make() -> Handle:
            handle = Handle(os.open(tmp_path, os.O_RDONLY), np.zeros(2, dtype=np.uint64))
            made.append(handle)
            return handle

        return make

    shards = OpenShards(capacity=3)
    before = open_fds()
    for i in [0, 1, 2, 0, 3]:  # 0 is used again before 3 arrives: 1 is the least recently used
        shards.get(str(i), opener(i))
    assert len(shards) == 3 and shards.opened == 4 and open_fds() == before + 3
    assert made[1].index.size == 0 and all(h.index.size == 2 for h in (made[0], made[2], made[3]))  # 1 was closed
    shards.get("1", opener(1))  # reopened; evicts 2
    assert shards.opened == 5 and open_fds() == before + 3
    shards.close_all()
    assert len(shards) == 0 and open_fds() == before


def test_max_open_shards_setting_is_checked(monkeypatch):
    monkeypatch.setenv("DATAREEL_MAX_OPEN_SHARDS", "5")
    assert handles_module.max_open() == 5
    monkeypatch.delenv("DATAREEL_MAX_OPEN_SHARDS")
    for soft, expected in (
        (256, 64),
        (1024, 256),
        (40, 10),  # below 64 too: a small `ulimit -n` is a quarter too (the floor of 16 ignored it)
        (16, 4),
        (3, 1),
        (1 << 20, 1024),
        (handles_module.resource.RLIM_INFINITY, 1024),
    ):
        monkeypatch.setattr(handles_module.resource, "getrlimit", lambda which, soft=soft: (soft, soft))
        assert handles_module.max_open() == expected, soft
    for bad in ("0", "many", "-1", "100000"):
        monkeypatch.setenv("DATAREEL_MAX_OPEN_SHARDS", bad)
        with pytest.raises(datareel.OptionError, match=f"DATAREEL_MAX_OPEN_SHARDS='{bad}'"):
            handles_module.max_open()


@pytest.fixture
def few_open(monkeypatch):
    """This process keeps at most 4 shards open during the test (a fresh set, closed afterwards)."""
    monkeypatch.setenv("DATAREEL_MAX_OPEN_SHARDS", "4")
    monkeypatch.setattr(handles_module, "_PER_PROCESS", {})
    yield
    handles_module.handles().close_all()


@pytest.mark.workers
def test_reading_every_shard_keeps_at_most_the_limit_open(tmp_path, few_open):
    total = write_tiny_shards(tmp_path, shards=40, per_shard=3)
    prepare_webdataset(tmp_path, progress=False)
    before = open_fds()
    ds = datareel.open_dataset(tmp_path)
    assert open_fds() == before  # opening opened no shard
    seen = set()
    for i in np.random.default_rng(0).permutation(total).tolist():  # every shard, in a shuffled order
        seen.add(ds.read(i)["__key__"])
        assert open_fds() <= before + 2 * 4  # a shard and its index map each hold one descriptor
    assert len(seen) == total and handles_module.handles().opened > 40  # shards were closed and opened again


@pytest.mark.workers
def test_an_index_still_held_survives_the_eviction_of_its_shard(tmp_path, few_open):
    """Evicting a shard closes its descriptor but must not unmap an index array someone still holds."""
    write_tiny_shards(tmp_path, shards=10, per_shard=3)
    prepare_webdataset(tmp_path, progress=False)
    ds = datareel.open_dataset(tmp_path)
    held = ds._index(0)
    expected = held.tolist()
    for s in range(1, 10):
        ds._index(s)  # shard 0 is evicted on the way
    assert str(tmp_path / "parts/s00000.tar") not in handles_module.handles()._open
    assert held.tolist() == expected and ds.read(1)["__key__"] == "k00000_1"


@pytest.mark.workers
def test_reads_from_threads_share_the_bounded_set_safely(tmp_path, few_open):
    from concurrent.futures import ThreadPoolExecutor

    total = write_tiny_shards(tmp_path, shards=30, per_shard=4)
    prepare_webdataset(tmp_path, progress=False)
    ds = datareel.open_dataset(tmp_path)
    order = np.random.default_rng(1).permutation(total).tolist() * 3
    with ThreadPoolExecutor(8) as pool:  # evictions race with reads: each read must still get its own bytes
        got = list(pool.map(lambda i: (i, ds.read(i)["txt"]), order))
    assert len(got) == 3 * total and all(text == f"{i // 4}-{i % 4}" for i, text in got)


@pytest.mark.workers
def test_open_reads_no_shard_and_the_first_read_checks_it(tmp_path):
    write_tiny_shards(tmp_path, shards=30, per_shard=2)
    prepare_webdataset(tmp_path, progress=False)
    for shard in (tmp_path / "parts").glob("s0001*.tar"):
        shard.unlink()  # ten shards gone
    ds = datareel.open_dataset(tmp_path)  # constant-time open: nothing per shard is looked at
    assert ds.read(0)["__key__"] == "k00000_0"
    with pytest.raises(datareel.DatasetError, match=r"shard .*s00010\.tar is missing"):
        ds.read(20)


SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import datareel

    class Fds:
        def encode_sample(self, sample):
            return {"key": sample["__key__"], "fds": len(os.listdir("/proc/self/fd")), "pid": os.getpid()}

    out = {}
    for workers in (0, 2):
        loader = datareel.Loader(datareel.open_dataset(sys.argv[1], decode=False), global_batch_size=16,
                                 micro_batch_size=8, seed=3, repeat=False, num_workers=workers, task_encoder=Fds())
        keys, fds = [], {}
        for batch in loader:
            keys += batch["key"]
            for pid, n in zip(batch["pid"].tolist(), batch["fds"].tolist()):
                fds[pid] = max(fds.get(pid, 0), n)
        loader.close()
        out[workers] = {"keys": keys, "max_fds": fds}
    print(json.dumps(out))
    """
)


@pytest.mark.slow  # real processes under a descriptor limit
def test_two_thousand_shards_read_under_ulimit_256_with_and_without_workers(tmp_path):
    """A full shuffled pass over 2,000 shards under `ulimit -n 256` (the common default is 1,024; reading
    failed with EMFILE after ~700 samples on 1,000 shards when every touched shard stayed open)."""
    import resource

    total = write_tiny_shards(tmp_path, shards=2000, per_shard=2)
    prepare_webdataset(tmp_path, progress=False)
    env = {**os.environ, "DATAREEL_MAX_OPEN_SHARDS": "32"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for workers in ("0", "2"):
        keys = out[workers]["keys"]
        assert len(keys) == len(set(keys)) == total  # every sample once, none lost to EMFILE
        peaks = out[workers]["max_fds"]
        assert len(peaks) == (1 if workers == "0" else 2)
        # a process's own descriptors (torch, pipes, queues) stay below 64; shards add at most 2 × 32
        assert max(peaks.values()) <= 64 + 2 * 32, peaks


# --- streaming prepare: memory flat in the dataset's size ---------------------------------------------


def python_peak(setup: str, warm: str, work: str) -> int:
    """Peak bytes of Python objects allocated while the statement ``work`` runs, in an interpreter of its
    own: tracemalloc counts every thread's allocations, and threads left by earlier tests in this process
    pushed a peak up by half (sqlite's own cache is not counted: it is bounded by index_db.CACHE_KIB).
    ``setup`` runs first, then ``warm`` untraced (first-use imports and caches are not the work's peak)."""
    script = "\n".join(
        [
            "import tracemalloc",
            setup,
            warm,
            "tracemalloc.start()",
            work,
            "print(tracemalloc.get_traced_memory()[1])",
        ]
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    if done.returncode:
        pytest.fail(f"the measured prepare failed:\n{done.stderr[-4000:]}")
    return int(done.stdout.split()[-1])


def test_prepare_holds_a_few_shards_in_memory_not_the_dataset(tmp_path):
    """Ten times the shards, the same peak: a prepare that kept every shard's keys, parts and offsets until
    the end (as before streaming) peaks ten times higher here (measured: 1.2 MB at 8 shards, 11.1 MB at 80;
    now 0.3 MB and 0.2 MB)."""
    peaks = []
    write_template_shards(tmp_path / "warm", 1, 10)
    setup = "from datareel.cli.prepare import prepare_webdataset"
    warm = f"prepare_webdataset({str(tmp_path / 'warm')!r}, workers=1, progress=False, overwrite=True)"
    for shards in (8, 80):
        root = tmp_path / f"d{shards}"
        write_template_shards(root, shards, 400)
        peaks.append(python_peak(setup, warm, f"prepare_webdataset({str(root)!r}, workers=1, progress=False)"))
        assert len(datareel.open_dataset(root)) == shards * 400
    assert peaks[1] < 1.5 * peaks[0], peaks


def test_jsonl_prepare_memory_is_flat_and_its_index_exact_across_flushes(tmp_path):
    """Offsets are flushed to the index file in chunks (2^16; 1,000 here); the index equals the lines'
    starts either way, and ten times the lines add less than 2 bytes a line to the peak (holding every offset
    adds at least 8), measured in an interpreter of its own."""
    peaks = []
    (tmp_path / "warm.jsonl").write_bytes(b'{"i": 0}\n' * 10)
    setup = "from datareel.formats.jsonl import prepare as prepare_module\nprepare_module._CHUNK = 1000"
    warm = f"prepare_module.prepare_jsonl({str(tmp_path / 'warm.jsonl')!r})"
    for lines in (10_000, 100_000):
        path = tmp_path / f"t{lines}.jsonl"
        rows = [b"\n"] + [b'{"i": %d}\n' % i for i in range(lines)]  # a leading blank line: part of sample 0
        path.write_bytes(b"".join(rows))
        peaks.append(python_peak(setup, warm, f"prepare_module.prepare_jsonl({str(path)!r})"))
        expected = np.cumsum([0] + [len(r) for r in rows])[1:]  # each row's end = the next row's start
        expected[0] = 0
        np.testing.assert_array_equal(np.fromfile(f"{path}.idx", dtype="<u8"), expected)
        ds = datareel.open_dataset(path)
        assert len(ds) == lines and ds.read(lines - 1)["json"] == {"i": lines - 1}
    # holding every offset would add at least 8 bytes a line (720 KB more for the 90,000 more lines); the
    # peak of a flushing prepare is ~20-40 KB whatever the count (its own buffers and parse, not the lines)
    assert peaks[1] - peaks[0] < 2 * 90_000, peaks


def test_scan_in_order_keeps_a_bounded_window_and_stops_at_the_first_error():
    import threading
    import time

    from datareel.cli.prepare import scan_in_order

    lock, started, taken = threading.Lock(), [], []

    def scan(shard: str) -> str:
        with lock:
            started.append(shard)
            assert len(started) - len(taken) <= 2 * 3, "more scans under way than the window allows"
        time.sleep(0.001 * (int(shard) % 4))  # out-of-order completion
        if shard == "40":
            raise ValueError("shard 40 is damaged")
        return shard

    shards = [str(i) for i in range(100)]
    with pytest.raises(ValueError, match="shard 40"):
        for result in scan_in_order(scan, shards, 3, progress=False, processes=False):
            taken.append(result)
    assert taken == shards[:40]  # in shard order, up to the failing one
    assert len(started) <= 40 + 1 + 2 * 3  # nothing after the window was started


@pytest.mark.workers
def test_a_duplicate_key_far_apart_is_named_by_both_shards_and_nothing_is_left(tmp_path):
    write_template_shards(tmp_path, 12, 30)
    shard = tmp_path / "parts" / "s00009.tar"
    body = bytearray(shard.read_bytes())
    # sample 5 of shard 9 takes the name of sample 3 of shard 0 (same width; checksum recomputed)
    header = 5 * 1024
    body[header : header + 21] = b"k00000_0000000003.txt"
    body[header + 148 : header + 156] = b" " * 8
    body[header + 148 : header + 156] = b"%06o\0 " % sum(body[header : header + 512])
    shard.write_bytes(bytes(body))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(datareel.DatasetError) as caught:
        prepare_webdataset(tmp_path, workers=2, progress=False)
    assert str(caught.value) == (
        f"duplicate sample key 'k00000_0000000003': sample 3 of shard {tmp_path}/parts/s00000.tar and sample 5 "
        f"of shard {tmp_path}/parts/s00009.tar; keys must be unique across the dataset: rename one"
    )
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no .idx, no .nv-meta


@pytest.mark.workers
def test_a_killed_prepare_leaves_one_staging_directory_which_the_next_run_removes(tmp_path):
    write_template_shards(tmp_path, 3, 5)
    script = textwrap.dedent(
        f"""
        import os, signal
        from datareel.cli import index_db
        from datareel.cli.prepare import prepare_webdataset
        add = index_db.IndexDb.add
        def add_then_die(self, shard, *args):
            add(self, shard, *args)
            if len(self.counts) == 2:  # two shards streamed to disk: killed mid-run
                os.kill(os.getpid(), signal.SIGKILL)
        index_db.IndexDb.add = add_then_die
        prepare_webdataset({str(tmp_path)!r}, workers=1, progress=False)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "parts")
    assert len(left) == 1 and left[0].startswith(".nv-meta") and ".tmp-" in left[0], left
    assert not list(tmp_path.rglob("*.idx")), "no index file is visible before the run completes"
    prepare_webdataset(tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".nv-meta", "parts"]
    assert len(datareel.open_dataset(tmp_path)) == 15


def test_a_small_index_is_read_into_memory_and_a_large_one_mapped(tmp_path, monkeypatch):
    """Opening a shard again after eviction must stay cheap: a small index is one read (no np.memmap,
    whose construction resolves the path and cost ~160 µs a shard), and the handle holds one descriptor;
    a large index is mapped, and its descriptor goes when the handle is closed."""
    import mmap

    from datareel.sources import index_files
    from datareel.sources.handles import open_handle

    def owner(array: np.ndarray) -> object:
        return array.base.obj if isinstance(array.base, memoryview) else array.base

    write_tiny_shards(tmp_path, 1, 3)
    prepare_webdataset(tmp_path, progress=False)
    path = str(tmp_path / "parts" / "s00000.tar")
    before = open_fds()
    handle = open_handle(path)
    assert type(handle.index) is np.ndarray and isinstance(owner(handle.index), bytes)
    assert open_fds() == before + 1 and handle.index.tolist()[0] == 0 and len(handle.index) == 4
    handle.close()
    monkeypatch.setattr(index_files, "MAP_FROM", 8)
    handle = open_handle(path)
    assert isinstance(owner(handle.index), mmap.mmap) and not handle.index.flags.writeable
    expected = np.fromfile(f"{path}.idx", dtype="<u8")
    np.testing.assert_array_equal(handle.index, expected)
    handle.close()
    assert open_fds() == before  # the map's own descriptor went with the array


@pytest.mark.workers
def test_staging_directories_of_live_or_foreign_runs_are_left_and_unwritable_shard_folders_refused(tmp_path):
    """A staging directory is removed only when its owner is a gone process on this host (a directory lock
    is per node on some cluster filesystems, so another node's run may be alive); a shard folder the
    index cannot be renamed into is refused before the scan, leaving nothing behind."""
    import socket

    write_template_shards(tmp_path, 2, 3)
    foreign = tmp_path / ".nv-meta1234.tmp-aaaaaaaa"
    live = tmp_path / ".nv-meta5678.tmp-bbbbbbbb"
    for folder, owner in ((foreign, "another-node 1"), (live, f"{socket.gethostname()} {os.getpid()}")):
        folder.mkdir()
        (folder / "owner").write_text(owner)
    prepare_webdataset(tmp_path, progress=False)
    assert foreign.exists() and live.exists() and len(datareel.open_dataset(tmp_path)) == 6

    (tmp_path / "more").mkdir()
    write_template_shards(tmp_path / "more", 1, 2)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with (
        read_only(tmp_path / "more" / "parts"),
        pytest.raises(datareel.DatasetError, match=r"cannot write into .*more/parts"),
    ):
        prepare_webdataset(tmp_path, progress=False, overwrite=True)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
