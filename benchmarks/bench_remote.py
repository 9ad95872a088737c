"""Read throughput from an S3-compatible server vs the same data on local disk, same run.

Dataset: 10 shards × 200 samples (a short ``.txt`` and a 10 KiB ``.bin`` each), prepared locally
and uploaded to moto's S3 server on 127.0.0.1, run as its own process (``moto_server``) so that it
does not share the reader's interpreter; it is a Python server, so it is the bottleneck it would not
be in a real object store, and the benchmark also reports its ceiling (boto3 ranged GETs of one
sample, back to back and 8 at a time). Micro-batch 32, ``num_workers`` 0 and 2, shuffled (``--order
shuffled``, one GET per sample) or in order (``--order sequential``, consecutive samples of a shard
coalesced into one GET); each repeat builds fresh loaders, takes one warm-up batch, then times
``--batches`` batches; local and remote alternate. Figures: samples/s, median (min–max) over
``--repeats``; requests per sample counted in the main process (``num_workers=0``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import datareel
from bench_webdataset import write_shards
from datareel.cli.prepare import prepare_webdataset
from datareel.storage.remote import remote_files
from datareel.testing import free_port


def build(root: Path, shards: int = 10, per_shard: int = 200) -> None:
    root.mkdir(parents=True)
    write_shards(root, shards, per_shard)
    prepare_webdataset(root, progress=False)


@contextmanager
def moto_process():
    """moto's S3 server as its own process on 127.0.0.1, with the AWS environment pointing at it."""
    from s3_server import ENV

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.environ.update({**ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
    try:
        import boto3

        for _ in range(200):  # up within ~10 s
            try:
                boto3.client("s3").list_buckets()
                break
            except Exception:
                time.sleep(0.05)
        yield
    finally:
        server.terminate()
        server.wait()


def rate(path: str, workers: int, batches: int, shuffle: bool) -> float:
    loader = datareel.Loader(
        datareel.open_dataset(path, decode=False),
        global_batch_size=32,
        micro_batch_size=32,
        seed=1,
        num_workers=workers,
        shuffle=shuffle,
    )
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    elapsed = time.perf_counter() - start
    loader.close()
    return batches * 32 / elapsed


def raw_gets(client, threads: int, count: int = 300) -> tuple[float, float]:
    """The server's own ceiling: boto3 ranged GETs of one sample's size, ``threads`` at a time.
    -> (GETs per second, milliseconds of this (client) process's CPU per GET)"""

    def get(i: int) -> None:
        offset = (i * 10752) % (200 * 10752)
        client.get_object(Bucket="bench", Key="wds/shard-000.tar", Range=f"bytes={offset}-{offset + 10751}")[
            "Body"
        ].read()

    start, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(get, range(count)))
    return count / (time.perf_counter() - start), (time.process_time() - cpu) * 1000 / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--order", choices=["shuffled", "sequential"], default="shuffled")
    args = parser.parse_args()
    shuffle = args.order == "shuffled"
    import boto3

    from s3_server import make_bucket

    with tempfile.TemporaryDirectory() as tmp, moto_process():
        root = Path(tmp) / "wds"
        build(root)
        make_bucket("bench")
        client = boto3.client("s3")
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            client.upload_file(str(path), "bench", f"wds/{path.relative_to(root).as_posix()}")
        url = "s3://bench/wds"
        files = remote_files()
        before = files.requests
        rate(url, 0, args.batches, shuffle)
        per_sample = (files.requests - before) / ((args.batches + 1) * 32)
        print("| num_workers | local samples/s | S3 (moto) samples/s | ratio of medians |")
        print("|---|---|---|---|")
        for workers in (0, 2):
            local, remote = [], []
            for _ in range(args.repeats):
                local.append(rate(str(root), workers, args.batches, shuffle))
                remote.append(rate(url, workers, args.batches, shuffle))
            fmt = lambda xs: f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"  # noqa: E731
            ratio = statistics.median(remote) / statistics.median(local)
            print(f"| {workers} | {fmt(local)} | {fmt(remote)} | {ratio:.2f} |")
        print(f"order: {args.order}; requests per sample (N=0, opening included): {per_sample:.3f}")
        raw_gets(client, 1, 20)  # warm the connection pool
        ceiling = ", ".join(
            "{:,.0f}/s and {:.1f} ms of client CPU per GET ({} at a time)".format(*raw_gets(client, n), n)
            for n in (1, 8)
        )
        print(f"the server's ceiling, boto3 ranged GETs of one sample: {ceiling}")


if __name__ == "__main__":
    main()
