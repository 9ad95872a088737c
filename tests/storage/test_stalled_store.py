"""A store that accepts connections and never answers (issue 25, item 13): every remote read, listing
and open ends in a named error within its configured bound, after exactly the documented number of
HTTP requests (datareel's tries: multi-storage-client's and botocore's own retries are off).

The stalled server is a real socket on 127.0.0.1, started in the test and closed at its end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from datareel.errors import OptionError, StorageError
from datareel.storage.remote import RemoteFiles, Retry
from s3_server import ENV, StalledServer
from where import HELPERS

HERE = HELPERS
FAST = dict(first_delay=0.01, connect_timeout=0.3, read_timeout=0.3)


def received(server: StalledServer, expected: int) -> tuple[int, int]:
    """The server's (connections, requests) once it has caught up with ``expected`` of each (its thread
    may lag on a busy machine; waits at most 10 s)."""
    import time

    deadline = time.monotonic() + 10
    while (server.connections < expected or server.requests < expected) and time.monotonic() < deadline:
        time.sleep(0.02)
    return server.connections, server.requests


@pytest.fixture
def stalled(monkeypatch):
    """A stalled server that s3:// URLs reach (AWS_ENDPOINT_URL points at it)."""
    with StalledServer() as server:
        for key, value in ENV.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        yield server


OPERATIONS = {
    "ranged read": lambda files, url: files.read_range(url, 0, 10),
    "whole read": lambda files, url: files.read(url),
    "size (HEAD)": lambda files, url: files.info(url),
    "exists": lambda files, url: files.exists(url),
    "listing": lambda files, url: files.list(url),
}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_request_kind_fails_after_the_documented_number_of_requests(stalled, operation):
    url = f"s3://stalled-{uuid.uuid4().hex[:8]}/ds/obj.bin"
    files = RemoteFiles(Retry(attempts=3, deadline=None, **FAST))
    with pytest.raises(StorageError) as info:
        OPERATIONS[operation](files, url)
    message = str(info.value)
    assert message.startswith(url.rsplit("/", 1)[0]) and "failed after 3 tries in" in message  # the URL, the count
    assert " s (no tries left)" in message  # the time it took
    assert "DATAREEL_REMOTE_TIMEOUT" in message and "DATAREEL_REMOTE_ATTEMPTS" in message  # the fixes
    assert files.requests == 3 and received(stalled, 3) == (3, 3)  # one HTTP request per try, no more


def test_the_deadline_ends_the_tries_of_a_read(stalled):
    """100 tries allowed, each waiting 0.3 s for an answer, within a 1 s deadline: no try is started that
    could end after it, so the read gives up after 2 (documented: max(deadline, one try's timeouts))."""
    url = f"s3://stalled-{uuid.uuid4().hex[:8]}/obj.bin"
    files = RemoteFiles(Retry(attempts=100, deadline=1.0, **FAST))
    with pytest.raises(
        StorageError, match=r"obj\.bin: reading bytes \[0, 10\) failed after \d tries in .*1 s deadline"
    ):
        files.read_range(url, 0, 10)
    assert 1 <= files.requests < 4 and received(stalled, files.requests) == (files.requests, files.requests)


def test_the_settings_come_from_the_environment_and_are_checked(monkeypatch):
    monkeypatch.setenv("DATAREEL_REMOTE_ATTEMPTS", "2")
    monkeypatch.setenv("DATAREEL_REMOTE_TIMEOUT", "1.5")
    monkeypatch.setenv("DATAREEL_REMOTE_DEADLINE", "none")
    retry = RemoteFiles().retry
    assert (retry.attempts, retry.connect_timeout, retry.read_timeout, retry.deadline) == (2, 1.5, 1.5, None)
    for name, bad in [
        ("DATAREEL_REMOTE_ATTEMPTS", "0"),
        ("DATAREEL_REMOTE_TIMEOUT", "soon"),
        ("DATAREEL_REMOTE_DEADLINE", "-1"),
    ]:
        monkeypatch.setenv(name, bad)
        with pytest.raises(OptionError, match=f"{name}='{bad}'|{name} is '{bad}'"):
            Retry.from_env()
        monkeypatch.delenv(name)
    with pytest.raises(OptionError, match="read_timeout"):
        Retry(read_timeout=0)


@pytest.mark.slow  # a process of its own: the bound must hold for a real run, configured the way users do
def test_opening_a_dataset_on_a_stalled_store_fails_naming_the_url(stalled):
    """open_dataset's metadata reads through the settings' environment variables, in a fresh process;
    bounded by the subprocess timeout (before the fix it waited 60 s per request, 54 requests)."""
    env = {**os.environ, "DATAREEL_REMOTE_ATTEMPTS": "2", "DATAREEL_REMOTE_TIMEOUT": "0.5"}
    script = (
        "import json, datareel\n"
        "try:\n"
        "    datareel.open_dataset('s3://stalled/ds')\n"
        "except datareel.DatareelError as exc:\n"
        "    print(json.dumps({'type': type(exc).__name__, 'message': str(exc)}))\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, cwd=HERE
        )
    except subprocess.TimeoutExpired:
        pytest.fail("open_dataset on a stalled store did not fail within 120 s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert error["type"] == "StorageError"
    assert error["message"].startswith("s3://stalled/ds/.nv-meta/") and "failed after 2 tries in" in error["message"]
    assert received(stalled, 2) == (2, 2)  # DATAREEL_REMOTE_ATTEMPTS, each one request


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """A prepared WebDataset in a bucket of a real S3 server (moto, 127.0.0.1)."""
    import boto3

    from datareel.cli.prepare import prepare_webdataset
    from s3_server import make_bucket, s3_server
    from wds_helpers import build_shards

    root = tmp_path_factory.mktemp("stall") / "ds"
    build_shards(root)
    prepare_webdataset(root, progress=False)
    with s3_server():
        make_bucket("slow")
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            boto3.client("s3").upload_file(str(path), "slow", f"ds/{path.relative_to(root).as_posix()}")
        yield "s3://slow/ds"


def test_a_store_that_stalls_on_the_byte_reads_fails_the_sample_and_the_loader(bucket, monkeypatch):
    """The metadata answers, every ranged GET hangs (held 5 s, past the 0.3 s read timeout): reading a
    sample fails after the configured tries, each one GET, and a loader with a handler stops naming the
    URL instead of substituting."""
    import datareel
    from datareel.storage import remote
    from s3_server import FaultyProxy

    proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"], delay=5.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("DATAREEL_REMOTE_ATTEMPTS", "2")
    monkeypatch.setenv("DATAREEL_REMOTE_TIMEOUT", "0.3")
    monkeypatch.setattr(remote, "_PER_PROCESS", {})  # a fresh backend reads the settings
    try:
        dataset = datareel.open_dataset(bucket)
        before = proxy.ranged_gets
        with pytest.raises(StorageError, match=rf"{bucket}/parts/data-0\.tar: reading bytes .* after 2 tries in"):
            dataset.read(0)  # its shard's check: the tar's end blocks, one ranged GET per try
        import time

        settle = time.monotonic() + 10  # the proxy's threads may lag on a busy machine
        while proxy.ranged_gets - before < 2 and time.monotonic() < settle:
            time.sleep(0.02)
        assert proxy.ranged_gets - before == 2
        handled: list = []
        loader = datareel.Loader(
            dataset,
            global_batch_size=4,
            micro_batch_size=4,
            repeat=False,
            on_error="substitute",
            error_handler=lambda exc, key: handled.append(key),
        )
        with pytest.raises(StorageError, match=rf"{bucket}/parts/data-\d\.tar: .*after 2 tries"):
            next(iter(loader))
        assert handled == []
    finally:
        proxy.close()
