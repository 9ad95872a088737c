"""Read throughput from an S3-compatible server vs the same data on local disk, same run.

Dataset: 10 shards × 200 samples (a short ``.txt`` and a 10 KiB ``.bin`` each), prepared locally
and uploaded to moto's S3 server on 127.0.0.1 (started here, as the tests do; it is a Python server,
so it is the bottleneck it would not be in a real object store). Shuffle on, micro-batch 32,
``num_workers`` 0 and 2; each repeat builds fresh loaders, takes one warm-up batch, then times
``--batches`` batches; local and remote alternate. Figures: samples/s, median (min–max) over
``--repeats``; requests per sample counted in the main process (``num_workers=0``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import datareel
from bench_webdataset import write_shards
from datareel.cli.prepare import prepare_webdataset
from datareel.storage.remote import remote_files


def build(root: Path, shards: int = 10, per_shard: int = 200) -> None:
    root.mkdir(parents=True)
    write_shards(root, shards, per_shard)
    prepare_webdataset(root, progress=False)


def rate(path: str, workers: int, batches: int) -> float:
    loader = datareel.Loader(
        datareel.open_dataset(path, decode=False),
        global_batch_size=32,
        micro_batch_size=32,
        seed=1,
        num_workers=workers,
    )
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    elapsed = time.perf_counter() - start
    loader.close()
    return batches * 32 / elapsed


def raw_gets(client, count: int = 300) -> float:
    """The server's own ceiling: boto3 ranged GETs of one sample's size, back to back, per second."""
    start = time.perf_counter()
    for i in range(count):
        offset = (i * 10752) % (200 * 10752)
        client.get_object(Bucket="bench", Key="wds/shard-000.tar", Range=f"bytes={offset}-{offset + 10751}")[
            "Body"
        ].read()
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import boto3

    from s3_server import make_bucket, s3_server

    with tempfile.TemporaryDirectory() as tmp, s3_server():
        root = Path(tmp) / "wds"
        build(root)
        make_bucket("bench")
        client = boto3.client("s3")
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            client.upload_file(str(path), "bench", f"wds/{path.relative_to(root).as_posix()}")
        url = "s3://bench/wds"
        files = remote_files()
        before = files.requests
        rate(url, 0, args.batches)
        per_sample = (files.requests - before) / ((args.batches + 1) * 32)
        print("| num_workers | local samples/s | S3 (moto) samples/s | ratio of medians |")
        print("|---|---|---|---|")
        for workers in (0, 2):
            local, remote = [], []
            for _ in range(args.repeats):
                local.append(rate(str(root), workers, args.batches))
                remote.append(rate(url, workers, args.batches))
            fmt = lambda xs: f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"  # noqa: E731
            ratio = statistics.median(remote) / statistics.median(local)
            print(f"| {workers} | {fmt(local)} | {fmt(remote)} | {ratio:.2f} |")
        print(f"requests per sample (N=0, opening included): {per_sample:.3f}")
        print(f"the server's ceiling, boto3 ranged GETs back to back: {raw_gets(client):,.0f}/s")


if __name__ == "__main__":
    main()
