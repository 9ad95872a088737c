"""Client CPU per ranged GET (issue 28, item 1): boto3, multi-storage-client and obstore side by side in one
run, against SeaweedFS (``weed mini``) and moto's server, both started here on 127.0.0.1 in processes of
their own (so the figure is this process's CPU only: its threads and obstore's runtime included).

Each round is one micro-batch: ``--in-flight`` ranged GETs (default 32) of as many different 10 KiB
objects, all in flight together; a measurement is ``--gets`` GETs; CPU per GET = process CPU time / GETs.
Every client is measured in each repeat, in turn; the table gives the median over ``--repeats``.

Clients:

- ``boto3``: ``get_object(Range=...)`` on 32 threads (one client, a pool of 32 connections);
- ``multi-storage-client s3://``: MSC's implicit S3 profile as datareel made it before obstore, on 32 threads;
- ``obstore get_ranges``: one ``obstore.get_ranges`` call per object on 32 threads (no datareel code);
- ``obstore get_ranges_async (asyncio)``: the same calls' async form, gathered on one event loop;
- ``datareel read_ranges (obstore)``: ``RemoteFiles.read_ranges`` of the round, the default ``s3://`` path;
- ``datareel read_ranges (msc)``: the same with ``DATAREEL_S3_CLIENT=msc`` (the fallback).

    .venv/bin/python benchmarks/bench_get_cpu.py [--repeats 5] [--gets 2048] [--servers seaweedfs,moto]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZE = 10 << 10
BUCKET = "getcpu"


@contextmanager
def moto() -> Iterator[None]:
    """moto's S3 server in a process of its own on 127.0.0.1; the AWS environment points at it."""
    from datareel.testing import free_port

    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import boto3

        client, deadline = boto3.client("s3"), time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("moto_server did not start") from None
                time.sleep(0.2)
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(20)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def seaweedfs() -> Iterator[None]:
    from _seaweed import seaweedfs as run

    with run(BUCKET):
        yield


def clients(keys: list[str], in_flight: int) -> dict[str, Callable[[list[str]], None]]:
    """name -> a function that GETs bytes [0, SIZE) of each key of one round, all in flight together."""
    import boto3
    import botocore.config
    import obstore

    from datareel.storage.msc import _msc, _profile_and_path, make_client
    from datareel.storage.object_store import make_store
    from datareel.storage.remote import RemoteFiles, Retry

    pool = ThreadPoolExecutor(in_flight)
    config = botocore.config.Config(max_pool_connections=in_flight, retries={"total_max_attempts": 1})
    b3 = boto3.client("s3", config=config)
    profile, _ = _profile_and_path(f"s3://{BUCKET}/x")
    msc, rng = make_client(profile, Retry()), _msc().types.Range
    store = make_store("s3", BUCKET, Retry())
    os.environ["DATAREEL_REMOTE_CONCURRENCY"] = str(in_flight)
    ours = RemoteFiles()
    os.environ["DATAREEL_S3_CLIENT"] = "msc"
    theirs = RemoteFiles()
    del os.environ["DATAREEL_S3_CLIENT"], os.environ["DATAREEL_REMOTE_CONCURRENCY"]

    import asyncio

    loop = asyncio.new_event_loop()

    async def gather(ks: list[str]) -> list[bytes]:
        got = await asyncio.gather(*(obstore.get_ranges_async(store, k, starts=[0], ends=[SIZE]) for k in ks))
        return [bytes(g[0]) for g in got]

    def check(got: list[bytes]) -> None:
        if any(len(b) != SIZE for b in got):
            raise SystemExit("a GET came back short")

    return {
        "boto3": lambda ks: check(
            list(
                pool.map(lambda k: b3.get_object(Bucket=BUCKET, Key=k, Range=f"bytes=0-{SIZE - 1}")["Body"].read(), ks)
            )
        ),
        "multi-storage-client s3://": lambda ks: check(
            list(pool.map(lambda k: msc.read(k, byte_range=rng(offset=0, size=SIZE)), ks))
        ),
        "obstore get_ranges": lambda ks: check(
            list(pool.map(lambda k: bytes(obstore.get_ranges(store, k, starts=[0], ends=[SIZE])[0]), ks))
        ),
        "obstore get_ranges_async (asyncio)": lambda ks: check(loop.run_until_complete(gather(ks))),
        "datareel read_ranges (obstore)": lambda ks: check(
            list(ours.read_ranges([(f"s3://{BUCKET}/{k}", 0, SIZE) for k in ks]).values())
        ),
        "datareel read_ranges (msc)": lambda ks: check(
            list(theirs.read_ranges([(f"s3://{BUCKET}/{k}", 0, SIZE) for k in ks]).values())
        ),
    }


def measure(get: Callable[[list[str]], None], keys: list[str], gets: int, in_flight: int) -> tuple[float, float]:
    """(µs of process CPU per GET, GETs per second) over ``gets`` GETs in rounds of ``in_flight`` objects."""
    rounds = max(1, gets // in_flight)
    cpu, wall = time.process_time(), time.perf_counter()
    for r in range(rounds):
        first = (r * in_flight) % len(keys)
        get([keys[(first + i) % len(keys)] for i in range(in_flight)])
    n = rounds * in_flight
    return (time.process_time() - cpu) / n * 1e6, n / (time.perf_counter() - wall)


def run_server(name: str, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    import boto3

    with {"seaweedfs": seaweedfs, "moto": moto}[name]():
        s3 = boto3.client("s3")
        keys = [f"obj/{i:04d}.bin" for i in range(args.objects)]
        for key in keys:
            s3.put_object(Bucket=BUCKET, Key=key, Body=os.urandom(SIZE))
        made = clients(keys, args.in_flight)
        for get in made.values():  # warm-up: connections open, credentials read
            measure(get, keys, args.in_flight * 4, args.in_flight)
        runs: dict[str, list[tuple[float, float]]] = {c: [] for c in made}
        for _ in range(args.repeats):
            for client, get in made.items():
                runs[client].append(measure(get, keys, args.gets, args.in_flight))
        return {c: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for c, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gets", type=int, default=2048, help="GETs per measurement")
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--objects", type=int, default=256)
    parser.add_argument("--servers", default="seaweedfs,moto")
    args = parser.parse_args()
    servers = args.servers.split(",")
    results = {name: run_server(name, args) for name in servers}
    print(f"\nclient CPU per ranged GET, µs (median of {args.repeats}; 10 KiB objects, {args.in_flight} in flight;")
    print(f"{args.gets} GETs a measurement; GETs/s in brackets)\n")
    print("| client | " + " | ".join(servers) + " |")
    print("|---|" + "---|" * len(servers))
    for client in results[servers[0]]:
        cells = [f"{results[s][client][0]:,.0f} ({results[s][client][1]:,.0f}/s)" for s in servers]
        print(f"| {client} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
