"""The node-local block cache (issue 28, item 3): a block is stored once per node and read back whole; a
file of the wrong size, key or content is refused and fetched again; the directory stays under its limit,
least recently used blocks going first; a process killed while writing leaves nothing a reader takes for
data, and a process killed while fetching does not block the others; two processes fetching one block at
once store it once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from datareel.errors import OptionError
from datareel.storage import node_cache
from datareel.storage.node_cache import BlockKey, NodeCache

KEY = BlockKey("s3://bucket/ds/shard-0.tar", "abc123", 1024, 1024 + 50_000)
PAYLOAD = bytes(range(256)) * (50_000 // 256) + bytes(50_000 % 256)


def store_of(payloads: dict[BlockKey, bytes], asked: list[BlockKey]):
    """A fetch function over ``payloads`` that records what it was asked for."""

    def fetch(keys):
        asked.extend(keys)
        return {k: payloads[k] for k in keys if k in payloads}

    return fetch


def blk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.iterdir() if p.name.endswith(".blk"))


def test_a_block_is_fetched_once_and_read_back_whole(tmp_path):
    cache, asked = NodeCache(str(tmp_path), 1 << 20), []
    assert cache.fetch([KEY], store_of({KEY: PAYLOAD}, asked)) == {KEY: PAYLOAD}
    assert cache.fetch([KEY], store_of({KEY: PAYLOAD}, asked)) == {KEY: PAYLOAD}
    assert asked == [KEY] and cache.fetched == 1
    assert NodeCache(str(tmp_path), 1 << 20).get(KEY) == PAYLOAD  # another process's view of the directory
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [KEY.name()]  # no lock left


@pytest.mark.parametrize("damage", ["truncated", "longer", "flipped byte", "other etag", "other range", "empty"])
def test_a_file_that_is_not_the_block_asked_for_is_refused_and_fetched_again(tmp_path, damage):
    cache, asked = NodeCache(str(tmp_path), 1 << 20), []
    cache.put(KEY, PAYLOAD)
    path = tmp_path / KEY.name()
    data = path.read_bytes()
    other = KEY
    if damage == "truncated":
        path.write_bytes(data[:-1])
    elif damage == "longer":
        path.write_bytes(data + b"\0")
    elif damage == "flipped byte":
        path.write_bytes(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a block file under another key's name: a shard replaced (new ETag), or another range
        other = BlockKey(KEY.url, "new-etag", KEY.start, KEY.stop)
        if damage == "other range":
            other = BlockKey(KEY.url, KEY.etag, KEY.start, KEY.stop)
            data = data.replace(KEY.start.to_bytes(8, "little"), (KEY.start + 512).to_bytes(8, "little"), 1)
        (tmp_path / other.name()).write_bytes(data)
    assert cache.get(other) is None
    assert not (tmp_path / other.name()).exists()  # removed
    assert cache.fetch([other], store_of({other: PAYLOAD}, asked)) == {other: PAYLOAD} and asked == [other]
    assert cache.get(other) == PAYLOAD


def test_the_directory_stays_under_its_limit_least_recently_used_out_first(tmp_path):
    limit = 64 << 10
    cache = NodeCache(str(tmp_path), limit)
    keys = [BlockKey("s3://b/x.tar", "e", i * 4096, (i + 1) * 4096) for i in range(60)]
    for n, key in enumerate(keys):
        cache.put(key, bytes([n % 256]) * 4096)
        cache.get(keys[0])  # used all along: kept
        assert blk_bytes(tmp_path) <= limit
    assert cache.get(keys[0]) == bytes([0]) * 4096
    assert cache.get(keys[1]) is None  # the least recently used went first
    assert cache.get(keys[-1]) == bytes([59 % 256]) * 4096
    cache.put(BlockKey("s3://b/x.tar", "e", 0, limit), bytes(limit))  # over a quarter of the limit: not kept
    assert blk_bytes(tmp_path) <= limit


def test_the_environment_configures_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.delenv(node_cache.ENV_DIR, raising=False)
    monkeypatch.setenv(node_cache.ENV_BYTES, "12345")
    node_cache._PER_PROCESS.clear()
    try:
        made = node_cache.node_cache()
        assert made is not None and made.limit == 12345
        root = tmp_path / f"datareel-blocks-{os.getuid()}"
        assert made.root == str(root) and root.stat().st_mode & 0o777 == 0o700
        monkeypatch.setenv(node_cache.ENV_DIR, "off")
        node_cache._PER_PROCESS.clear()
        assert node_cache.node_cache() is None
        monkeypatch.setenv(node_cache.ENV_DIR, str(tmp_path / "mine"))
        monkeypatch.setenv(node_cache.ENV_BYTES, "4GiB")
        node_cache._PER_PROCESS.clear()
        with pytest.raises(OptionError, match=r"DATAREEL_NODE_CACHE_BYTES='4GiB' must be a whole number of bytes"):
            node_cache.node_cache()
    finally:
        node_cache._PER_PROCESS.clear()


# -- other processes: killed while writing or fetching, or fetching the same block at once ------------------

PRELUDE = textwrap.dedent(
    f"""
    import os, sys, time
    from pathlib import Path
    from datareel.storage import node_cache
    from datareel.storage.node_cache import BlockKey, NodeCache
    KEY = BlockKey({KEY.url!r}, {KEY.etag!r}, {KEY.start}, {KEY.stop})
    PAYLOAD = bytes(range(256)) * ({KEY.stop - KEY.start} // 256) + bytes({(KEY.stop - KEY.start) % 256})
    root, signals = sys.argv[1], Path(sys.argv[2])
    cache = NodeCache(root, 1 << 20)
    """
)


def start(tmp_path: Path, body: str, name: str) -> subprocess.Popen:
    script = tmp_path / f"{name}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "cache"), str(tmp_path)])


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the helper process did not get to {path.name} (exit {proc.poll()})")
        time.sleep(0.01)


@pytest.mark.workers
def test_a_writer_killed_mid_write_leaves_the_cache_usable(tmp_path):
    (tmp_path / "cache").mkdir()
    writer = start(
        tmp_path,
        """
        def stalled(fd, header, payload):
            os.write(fd, header + payload[: len(payload) // 2])
            (signals / "writing").touch()
            time.sleep(600)
        node_cache._write_file = stalled
        cache.fetch([KEY], lambda keys: {KEY: PAYLOAD})
        """,
        "writer",
    )
    try:
        wait_for(tmp_path / "writing", writer)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        writer.kill()
    root = tmp_path / "cache"
    leftovers = [p for p in root.iterdir() if ".tmp-" in p.name]
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # it was killed writing
    cache, asked = NodeCache(str(root), 1 << 20), []
    assert cache.get(KEY) is None  # nothing to mistake for the block
    assert cache.fetch([KEY], store_of({KEY: PAYLOAD}, asked)) == {KEY: PAYLOAD} and asked == [KEY]  # not blocked
    assert cache.get(KEY) == PAYLOAD
    old = time.time() - node_cache.STALE - 1
    os.utime(leftovers[0], (old, old))
    cache._sweep()
    assert not leftovers[0].exists()  # a crashed writer's file goes at the next look


@pytest.mark.workers
def test_a_process_killed_while_fetching_does_not_block_the_others(tmp_path):
    (tmp_path / "cache").mkdir()
    holder = start(
        tmp_path,
        """
        def hang(keys):
            (signals / "fetching").touch()
            time.sleep(600)
        cache.fetch([KEY], hang)
        """,
        "holder",
    )
    try:
        wait_for(tmp_path / "fetching", holder)  # it holds the block's lock
        cache, asked, got = NodeCache(str(tmp_path / "cache"), 1 << 20), [], {}
        waiter = threading.Thread(target=lambda: got.update(cache.fetch([KEY], store_of({KEY: PAYLOAD}, asked))))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and asked == []  # waiting for the holder, not fetching
        os.kill(holder.pid, signal.SIGKILL)
        waiter.join(timeout=20)
        assert not waiter.is_alive()
        assert got == {KEY: PAYLOAD} and asked == [KEY]  # the holder died: fetched here
    finally:
        holder.kill()
        holder.wait(timeout=30)


@pytest.mark.workers
def test_two_processes_fetching_one_block_at_once_store_it_once(tmp_path):
    (tmp_path / "cache").mkdir()
    body = """
        def slow(keys):
            with open(signals / "fetches", "a") as f:
                f.write(f"{os.getpid()}\\n")
            time.sleep(0.5)
            return {KEY: PAYLOAD}
        while not (signals / "go").exists():
            time.sleep(0.001)
        assert cache.fetch([KEY], slow) == {KEY: PAYLOAD}
        """
    procs = [start(tmp_path, body, f"fetcher{n}") for n in range(2)]
    try:
        time.sleep(0.5)  # both started and waiting
        (tmp_path / "go").touch()
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
    finally:
        for p in procs:
            p.kill()
    assert len((tmp_path / "fetches").read_text().split()) == 1  # fetched once on the node
    stored = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert [p.name for p in stored] == [KEY.name()]
