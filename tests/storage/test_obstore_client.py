"""s3:// through obstore (issue 28, item 1): the client in use, the fallback to multi-storage-client, one
batched call per object for a micro-batch, a client of its own in a forked process, and retries that
count the real requests."""

from __future__ import annotations

import os

import pytest

from datareel.errors import OptionError
from datareel.storage import remote
from datareel.storage.msc import MscClient
from datareel.storage.object_store import ObstoreClient
from datareel.storage.remote import RemoteFiles, Retry

BLOB = bytes(range(256)) * 1200  # 300 KiB


@pytest.fixture
def keys(monkeypatch):
    """Static AWS keys (no credential lookup) and no endpoint: stores are made, nothing is sent."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DATAREEL_S3_CLIENT", raising=False)


@pytest.fixture
def memory(monkeypatch, keys):
    """s3:// buckets served by obstore's in-memory store (each bucket: objects a.bin, b.bin, c.bin = BLOB);
    every batched call is recorded as (key, spans)."""
    import obstore
    from obstore.store import MemoryStore

    def make_store(scheme, bucket, retry):
        store = MemoryStore()
        for name in ("a.bin", "b.bin", "c.bin"):
            obstore.put(store, name, BLOB)
        return store

    calls: list[tuple[str, list[tuple[int, int]]]] = []
    fetch = ObstoreClient.fetch

    def recorded(self, key, spans):
        calls.append((key, list(spans)))
        return fetch(self, key, spans)

    monkeypatch.setattr(remote, "make_store", make_store)
    monkeypatch.setattr(ObstoreClient, "fetch", recorded)
    return calls


def test_s3_urls_are_read_through_obstore_unless_the_fallback_is_asked_for(keys, monkeypatch):
    assert isinstance(RemoteFiles().client_of("s3://bucket/ds/x.tar"), ObstoreClient)
    assert isinstance(RemoteFiles().client_of("s3://bucket/ds//x.tar"), MscClient)  # a key obstore cannot name
    monkeypatch.setenv("DATAREEL_S3_CLIENT", "msc")
    assert isinstance(RemoteFiles().client_of("s3://bucket/ds/x.tar"), MscClient)
    monkeypatch.setenv("DATAREEL_S3_CLIENT", "boto")
    with pytest.raises(OptionError, match=r"DATAREEL_S3_CLIENT='boto' must be one of obstore, msc"):
        RemoteFiles()


def test_one_store_per_bucket_in_a_process(keys):
    files = RemoteFiles()
    first = files.client_of("s3://one/a.tar")
    assert files.client_of("s3://one/deeper/b.tar") is first
    assert files.client_of("s3://two/a.tar") is not first


def test_a_micro_batchs_ranges_take_one_batched_call_per_object(memory):
    files = RemoteFiles(Retry(attempts=2, first_delay=0))
    wanted = [
        ("s3://bk/a.bin", 0, 100),
        ("s3://bk/a.bin", 150, 400),  # within the coalescing gap of the first: the same GET
        ("s3://bk/a.bin", 200_000, 200_500),  # far away: a GET of its own, in the same call
        ("s3://bk/b.bin", 10, 20),
        ("s3://bk/c.bin", 5, 6),
        ("s3://bk/c.bin", 300_000, 307_200),
    ]
    got = files.read_ranges(wanted)
    assert got == {(url, a, b): BLOB[a:b] for url, a, b in wanted}
    assert sorted(memory) == [
        ("a.bin", [(0, 400), (200_000, 200_500)]),
        ("b.bin", [(10, 20)]),
        ("c.bin", [(5, 6), (300_000, 307_200)]),
    ]
    assert files.requests == 5  # one per GET


def test_a_range_past_the_end_is_left_out_of_the_batch_and_fails_alone(memory):
    files = RemoteFiles(Retry(attempts=2, first_delay=0))
    got = files.read_ranges([("s3://bk/a.bin", 0, 10), ("s3://bk/b.bin", len(BLOB) - 5, len(BLOB) + 5)])
    assert got == {("s3://bk/a.bin", 0, 10): BLOB[:10]}  # the short one is left for its reader
    with pytest.raises(remote.StorageError, match=r"s3://bk/b\.bin: reading bytes .* failed after 2 tries"):
        files.read_range("s3://bk/b.bin", len(BLOB) - 5, len(BLOB) + 5)


@pytest.fixture(scope="module")
def server():
    from s3_server import make_bucket, s3_server

    with s3_server() as endpoint:
        make_bucket("obs")
        import boto3

        for key in ("blob.bin", "other.bin"):
            boto3.client("s3").put_object(Bucket="obs", Key=key, Body=BLOB)
        yield endpoint


@pytest.mark.parametrize("fail_first", [1, 3])
def test_retries_of_batched_calls_count_every_request_sent(server, monkeypatch, fail_first):
    """503s on the first GETs of a micro-batch (two objects, one GET each): each try of each call is one
    request, counted; obstore's own retries are off, so the proxy sees exactly as many."""
    from s3_server import FaultyProxy

    proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"], fail_first=fail_first)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        files = RemoteFiles(Retry(attempts=6, first_delay=0.01))
        wanted = [("s3://obs/blob.bin", 0, 10), ("s3://obs/blob.bin", 300, 700), ("s3://obs/other.bin", 5, 50)]
        assert files.read_ranges(wanted) == {(u, a, b): BLOB[a:b] for u, a, b in wanted}
        assert files.requests == proxy.ranged_gets == 2 + fail_first
        assert proxy.fail_first == 0
    finally:
        proxy.close()


def test_both_clients_read_the_same_bytes_and_etag(server, monkeypatch):
    url = "s3://obs/blob.bin"
    ours = RemoteFiles()
    monkeypatch.setenv("DATAREEL_S3_CLIENT", "msc")
    theirs = RemoteFiles()
    assert isinstance(ours.client_of(url), ObstoreClient) and isinstance(theirs.client_of(url), MscClient)
    assert ours.info(url) == theirs.info(url) and ours.info(url).etag and '"' not in ours.info(url).etag
    assert ours.read_range(url, 7, 9000) == theirs.read_range(url, 7, 9000) == BLOB[7:9000]
    assert ours.list("s3://obs") == theirs.list("s3://obs") == ["s3://obs/blob.bin", "s3://obs/other.bin"]


CHILD = """
import multiprocessing, sys
from datareel.storage.remote import RemoteFiles

URL = "s3://obs/blob.bin"


def child(files, queue):
    client = files.client_of(URL)
    got = files.read_ranges([(URL, 0, 10), (URL, 5000, 5100)])
    queue.put((type(client).__name__, hasattr(client, "parents"), got[URL, 0, 10] + got[URL, 5000, 5100]))


def forked(files):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    proc = context.Process(target=child, args=(files, queue))
    proc.start()
    try:
        return queue.get(timeout=60)
    finally:
        proc.join(10)
        proc.kill()


files = RemoteFiles()
files.client_of(URL).parents = True  # made, not used: no request sent yet
first = forked(files)
parent = files.read_range(URL, 0, 10)  # one request (opening a dataset): through MSC, no obstore runtime
single = type(files.client_of(URL, bulk=False)).__name__
second = forked(files)
bulk = files.read_ranges([(URL, 0, 10)])[URL, 0, 10]  # a micro-batch: the parent's obstore runtime starts
after = type(files.client_of(URL, bulk=False)).__name__  # its single requests go through obstore from now on
third = forked(files)
print(repr((first, parent, single, second, bulk, after, third)))
"""


@pytest.mark.workers
def test_a_forked_process_makes_its_own_client_and_never_uses_an_inherited_runtime(server):
    """In a fresh process: a child forked before any obstore request reads through a store of its own; so
    does one forked after its parent sent only single requests (they go through MSC until a micro-batch's
    read starts obstore); one forked after its parent's bulk read through obstore (whose runtime does not
    survive fork: the child would hang) reads through multi-storage-client, with the same bytes."""
    import ast
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, parent, single, second, bulk, after, third = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    expected = BLOB[:10] + BLOB[5000:5100]
    assert first == ("ObstoreClient", False, expected) and parent == bulk == BLOB[:10]
    assert single == "MscClient" and after == "ObstoreClient"
    assert second == ("ObstoreClient", False, expected)  # forked after the parent only opened: obstore
    assert third == ("MscClient", False, expected)  # forked after the parent's own bulk read: MSC


FORKED_WARNING = """
import logging, multiprocessing, threading
import boto3
from datareel.storage.remote import RemoteFiles, remote_files

URLS = [f"s3://obs/shard-{i}.tar" for i in range(6)]
for url in URLS:
    boto3.client("s3").put_object(Bucket="obs", Key=url.rsplit("/", 1)[1], Body=bytes(range(256)) * 40)


class Count(logging.Handler):
    def __init__(self):
        super().__init__()
        self.said = []

    def emit(self, record):
        if "forked from one that had read through obstore" in record.getMessage():
            self.said.append(record.getMessage())


def child(queue):
    count = Count()
    logging.getLogger("datareel").addHandler(count)
    # every shard, from several threads of the process's backend and through other backends of the process
    threads = [threading.Thread(target=remote_files().read_ranges, args=([(u, 0, 10)],)) for u in URLS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for url in URLS:
        RemoteFiles().read_ranges([(url, 5, 50)])
    queue.put(count.said)


def forked():
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    proc = context.Process(target=child, args=(queue,))
    proc.start()
    try:
        return queue.get(timeout=60)
    finally:
        proc.join(10)
        proc.kill()


remote_files().read_ranges([(URLS[0], 0, 10)])  # this process's bulk read starts obstore's runtime
print(repr((forked(), forked())))
"""


@pytest.mark.workers
def test_a_forked_process_warns_once_that_it_reads_through_msc_whatever_it_reads(server):
    """A process forked after its parent's bulk read through obstore reads six shards, from six threads of
    its backend and through six more backends: the fallback to multi-storage-client is said once in that
    process (and once again in the next forked process), not once per shard or per backend."""
    import ast
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", FORKED_WARNING], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert len(first) == 1 and len(second) == 1, (first, second)
    assert "multiprocessing_context='forkserver'" in first[0]
