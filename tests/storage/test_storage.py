"""The storage layer (issue 13, first part): local files and s3:// objects through one protocol,
read by byte range from a real S3-compatible server started in the test session."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.errors import DatasetError, OptionError
from datareel.storage import files_for, is_remote, join
from datareel.storage.remote import RemoteFiles, Retry
from profiles import examples


@pytest.fixture(scope="module")
def bucket():
    from s3_server import make_bucket, s3_server

    with s3_server():
        make_bucket("data")
        yield "s3://data"


def test_urls_and_paths_join_the_same_way():
    assert is_remote("s3://b/k") and is_remote("msc://profile/ds") and not is_remote("/tmp/x")
    assert not is_remote("ds/s3://x") and not is_remote(None)
    assert join("s3://b/ds/meta.yaml/..", "x.tar") == "s3://b/ds/x.tar"
    assert join("s3://b/ds", "../other/x.tar") == "s3://b/other/x.tar"
    assert join("/data/ds", "sub/x.tar") == "/data/ds/sub/x.tar"
    assert join("s3://b/ds", "/local/abs") == "/local/abs" and join("/data", "s3://b/k") == "s3://b/k"
    assert join("s3://b/data//ds", "x") == "s3://b/data//ds/x"  # keys may hold "//": kept
    assert join("s3://b/ds/", "x") == "s3://b/ds/x" and join("s3://b/ds", ".") == "s3://b/ds"
    with pytest.raises(DatasetError, match="climbs above the bucket"):
        join("s3://b/ds", "../../x")


def test_the_local_backend_names_what_is_not_a_file(tmp_path):
    from datareel.storage import NotFound

    (tmp_path / "plain").write_bytes(b"x")
    files = files_for(str(tmp_path))
    with pytest.raises(NotFound, match="is not a file"):
        files.info(str(tmp_path))
    with pytest.raises(NotFound, match="does not exist"):
        files.info(str(tmp_path / "plain" / "below"))  # a file used as a directory: ENOTDIR
    assert not files.exists(str(tmp_path)) and files.exists(str(tmp_path / "plain"))


def test_retry_options_are_checked():
    with pytest.raises(OptionError, match="attempts"):
        Retry(attempts=0)
    with pytest.raises(OptionError, match="first_delay"):
        Retry(first_delay=-1)


def test_the_same_bytes_come_back_locally_and_from_the_bucket(bucket, tmp_path):
    blob = bytes(range(256)) * 40
    local = str(tmp_path / "obj.bin")
    files_for(local).write(local, blob)
    remote = f"{bucket}/dir/obj.bin"
    files_for(remote).write(remote, blob)
    for path in (local, remote):
        files = files_for(path)
        assert files.info(path).size == len(blob) and files.exists(path)
        assert files.read(path) == blob
        assert files.read_range(path, 1000, 1512) == blob[1000:1512]
        assert files.read_range(path, 7, 7) == b""
    assert files_for(remote).info(remote).etag  # the store's ETag is reported
    assert files_for(local).info(local).etag is None


def test_a_missing_object_is_a_named_error_without_retries(bucket):
    files = RemoteFiles(Retry(attempts=4, first_delay=0))
    with pytest.raises(DatasetError, match=r"s3://data/nothing\.tar does not exist"):
        files.read_range(f"{bucket}/nothing.tar", 0, 10)
    assert files.requests == 1  # a 404 is permanent: not retried
    assert not files.exists(f"{bucket}/nothing.tar")


def test_a_read_past_the_end_is_refused_naming_the_url(bucket):
    url = f"{bucket}/short.bin"
    files = RemoteFiles(Retry(attempts=2, first_delay=0))
    files.write(url, b"0123456789")
    with pytest.raises(DatasetError, match=r"s3://data/short\.bin: reading bytes \[5, 50\) failed after 2 tries"):
        files.read_range(url, 5, 50)


@pytest.fixture
def faulty(bucket, monkeypatch):
    """A proxy in front of the server; clients made in the test go through it (a new bucket name gives
    MSC a new implicit profile, so its client is made with the proxy's endpoint)."""
    import os

    from s3_server import FaultyProxy

    proxies = []

    def make(**faults):
        proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"], **faults)
        proxies.append(proxy)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def _object(name: str, blob: bytes) -> str:
    import boto3

    from s3_server import make_bucket

    make_bucket(name)
    boto3.client("s3").put_object(Bucket=name, Key="obj.bin", Body=blob)
    return f"s3://{name}/obj.bin"


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_retried_and_the_data_is_identical(faulty, status):
    blob = bytes(range(256)) * 64
    url = _object(f"flaky-{status}", blob)
    proxy = faulty(fail_first=4, status=status)
    files = RemoteFiles(Retry(attempts=6, first_delay=0.01))
    assert files.read_range(url, 100, 9000) == blob[100:9000]
    assert proxy.ranged_gets == 5  # four failures (botocore's own retries among them), then the answer


def test_a_connection_dropped_mid_body_is_retried(faulty):
    blob = bytes(range(256)) * 64
    url = _object("dropping", blob)
    proxy = faulty(drop_first=2)
    files = RemoteFiles(Retry(attempts=6, first_delay=0.01))
    assert files.read_range(url, 0, len(blob)) == blob
    assert proxy.ranged_gets >= 3


def test_errors_that_persist_end_in_a_named_error_after_the_bounded_retries(faulty):
    url = _object("down", b"x" * 100)
    faulty(fail_first=10_000)
    files = RemoteFiles(Retry(attempts=2, first_delay=0.01))
    with pytest.raises(DatasetError, match=r"s3://down/obj\.bin: reading bytes \[0, 10\) failed after 2 tries"):
        files.read_range(url, 0, 10)
    assert files.requests == 2  # ours; MSC and botocore retry inside each (their bounded counts)


@settings(max_examples=examples(2))
@given(
    st.lists(st.tuples(st.integers(0, 1 << 22), st.integers(0, 1 << 20)), min_size=1, max_size=40),
    st.integers(0, 1 << 17),
    st.integers(1, 1 << 21),
)
def test_coalesced_gets_cover_each_range_once_and_respect_gap_and_limit(spans, gap, limit):
    from datareel.storage.remote import coalesce

    starts = np.array([s for s, _ in spans], dtype=np.int64)
    stops = starts + np.array([n for _, n in spans], dtype=np.int64)
    group = coalesce(starts, stops, gap=gap, limit=limit)
    assert group.shape == starts.shape and group.min() == 0
    groups = sorted(set(group.tolist()))
    assert groups == list(range(len(groups)))  # numbered 0.. without holes
    spans_of = [(int(starts[group == g].min()), int(stops[group == g].max())) for g in groups]
    for g, (first, end) in enumerate(spans_of):
        members = np.flatnonzero(group == g)
        running = None
        for i in members[np.argsort(starts[members], kind="stable")].tolist():  # each joins within the gap
            assert running is None or starts[i] <= running + gap
            running = int(stops[i]) if running is None else max(running, int(stops[i]))
        assert end - first <= limit or len(members) == 1  # one GET stays within the limit (or is one range)
        if g:  # a new GET starts only where the gap or the limit demands it
            previous_first, previous_end = spans_of[g - 1]
            assert first > previous_end + gap or max(previous_end, int(stops[members].max())) - previous_first > limit
            assert first >= previous_first


def test_remote_concurrency_setting_is_checked(monkeypatch):
    from datareel.storage.remote import concurrency

    monkeypatch.setenv("DATAREEL_REMOTE_CONCURRENCY", "3")
    assert concurrency() == 3
    for bad in ("0", "lots", "-2", "1000"):
        monkeypatch.setenv("DATAREEL_REMOTE_CONCURRENCY", bad)
        with pytest.raises(datareel.OptionError, match=f"DATAREEL_REMOTE_CONCURRENCY='{bad}'.*1 to 256"):
            concurrency()


def test_read_ranges_slices_each_range_from_its_merged_get_and_leaves_failures_out(monkeypatch):
    """Ranges with gaps between them come back byte-exact from one merged GET; a failed GET's ranges are
    left out (the reader then fetches those alone)."""
    blob = bytes(range(256)) * 64  # 16 KiB "object"
    calls = []

    def read_range(self, url, start, stop):
        calls.append((url, start, stop))
        if url.endswith("bad"):
            raise DatasetError(f"{url}: 503")
        return blob[start:stop]

    monkeypatch.setattr(RemoteFiles, "read_range", read_range)
    monkeypatch.setattr(RemoteFiles, "_resolve", lambda self, url: None)
    files = RemoteFiles()
    wanted = [("s3://b/x", 100, 300), ("s3://b/x", 5000, 5100), ("s3://b/x", 310, 400), ("s3://b/bad", 0, 10)]
    got = files.read_ranges(wanted)
    assert sorted(calls) == [("s3://b/bad", 0, 10), ("s3://b/x", 100, 5100)]  # one GET for the three ranges
    assert got == {("s3://b/x", a, b): blob[a:b] for _, a, b in wanted[:3]}


def test_an_etag_record_the_store_refuses_to_show_counts_as_absent():
    """Without s3:ListBucket, S3 answers 403 (not 404) for a missing key: a dataset prepared elsewhere (no
    etags.json) must still open; other failures are not hidden."""
    from datareel.sources.energon_meta import read_etags
    from datareel.storage import AccessDenied

    class Root:
        def __init__(self, error: Exception):
            self.error = error

        def __truediv__(self, other):
            return self

        def read_bytes(self):
            raise self.error

    assert read_etags(Root(AccessDenied("s3://b/ds/.nv-meta/etags.json: access denied"))) == {}
    with pytest.raises(DatasetError, match="503"):
        read_etags(Root(DatasetError("s3://b/ds/.nv-meta/etags.json: 503")))


def test_the_local_msc_profile_name_is_mscs_without_importing_msc():
    """EPath names the local profile as MSC does, and importing it does not import MSC (~0.3 s a process)."""
    import subprocess
    import sys

    from datareel.energon.epathlib import DEFAULT_PROFILE_NAME

    msc = pytest.importorskip("multistorageclient.config")
    assert msc.RESERVED_POSIX_PROFILE_NAME == DEFAULT_PROFILE_NAME
    code = "import sys, datareel.energon.epathlib; print('multistorageclient' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
        ).stdout.strip()
        == "False"
    )
