"""Reading from an S3-compatible server (SeaweedFS on 127.0.0.1) beside the same data on local disk, one run.

    .venv/bin/python benchmarks/bench_remote.py            # ~10 and ~100 KiB samples, N = 0 and 2
    .venv/bin/python benchmarks/bench_remote.py --quick    # a check run
    .venv/bin/python benchmarks/bench_remote.py --server moto   # moto instead (slow: ~5 ms of server CPU a GET)

The benchmark starts ``weed mini`` itself (``_seaweed.py``: 127.0.0.1, telemetry off, data in a temp dir,
stopped at the end, on Ctrl-C and on SIGTERM). Per sample size (one ``.bin`` member of 10 KiB or 100 KiB
per sample, 1,000 per shard, prepared by ``datareel prepare`` and uploaded): datareel's full shuffle and
``BlockShuffle(block=16)`` (if this checkout has it), ``num_workers`` 0 and 2, local disk and the bucket
alternating within each repeat, and the full shuffle through multi-storage-client (``DATAREEL_S3_CLIENT=msc``,
the path before obstore, if this checkout has the switch). Micro-batch = global batch = 32. Each
measurement is its own subprocess (``--child``): loader built, ``--warmup`` batches, then at least
``--batches`` batches and at least ``--seconds`` seconds timed, with a node block cache of its own, empty
at the start (``DATAREEL_NODE_CACHE``; within a measurement it serves the DataLoader workers as in
training). Figures:

- samples/s, median (min–max) over ``--repeats``; the ratio bucket / local disk of medians;
- requests per sample and bytes read per byte used: SeaweedFS's own Prometheus counters over the timed
  window (``SeaweedFS_s3_request_total`` of every type, ``..._bucket_traffic_sent_bytes_total``; server
  side, so DataLoader workers count too), divided by the samples handed out and by their bytes in the tar
  (header and padding included: the sample's range in the ``.tar.idx``);
- reader CPU per GET: CPU of the reading processes (main and workers, psutil) over the window / GETs: the
  whole read path (parsing, collation, the DataLoader), an upper bound on the client's own share;
- with ``--ranks`` (first size only): the same counters with ``W`` ranks simulated one after the other
  (rank r of W, micro-batch 32 / W, so ``m·W = 32`` divides the period), N = 0;
- client CPU per ranged GET alone (10 KiB, 32 in flight): datareel's ``RemoteFiles.read_ranges`` with
  each client, beside obstore's ``get_ranges`` and boto3 on 32 threads; ranges 2 MiB apart, so none is
  merged; GETs counted by the server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))

BUCKET = "bench"
SIZES = {"10KiB": 10 * 1024, "100KiB": 100 * 1024}


def has_block() -> bool:
    import datareel

    return hasattr(datareel, "BlockShuffle")


def has_msc_switch() -> bool:
    try:
        from datareel.storage.object_store import ENV_CLIENT  # noqa: F401
    except ImportError:
        return False
    return True


def build(root: Path, size: int, shards: int, per_shard: int = 1000) -> float:
    """``shards`` tars of ``per_shard`` one-member samples of ``size`` bytes, prepared; -> bytes per sample
    in the tar (the sample's range in the ``.tar.idx``)."""
    import io
    import tarfile

    import numpy as np

    from datareel.cli.prepare import prepare_webdataset

    root.mkdir(parents=True)
    payload = os.urandom(size + 97)
    for s in range(shards):
        with tarfile.open(root / f"shard-{s:04d}.tar", "w") as tar:
            for j in range(per_shard):
                i = s * per_shard + j
                info = tarfile.TarInfo(f"{i:08d}.bin")
                info.size = size
                tar.addfile(info, io.BytesIO(payload[i % 97 : i % 97 + size]))
    prepare_webdataset(root, progress=False)
    idx = [np.fromfile(p, dtype="<u8") for p in sorted(root.glob("*.tar.idx"))]
    return float(sum(int(a[-1] - a[0]) for a in idx) / sum(len(a) - 1 for a in idx))


def child(spec: dict) -> dict:
    """One measurement in this process (``spec``: url, workers, block, batches, warmup, seconds, metrics port,
    rank, world): samples/s, CPU, and the server's counters over the timed window."""
    import datareel
    from _seaweed import Metrics
    from _timing import process_tree_cpu

    world = spec.get("world", 1)
    loader = datareel.Loader(
        datareel.open_dataset(spec["url"], decode=False),
        global_batch_size=32,
        micro_batch_size=32 // world,
        rank=spec.get("rank", 0),
        world_size=world,
        seed=1,
        num_workers=spec["workers"],
        shuffle=datareel.BlockShuffle(block=16) if spec["block"] else True,
    )
    metrics = Metrics(spec["metrics"]) if spec.get("metrics") else None
    cpu = process_tree_cpu

    it = iter(loader)
    for _ in range(spec["warmup"]):
        next(it)
    m0 = metrics.read() if metrics else {}
    c0, t0, n, batches = cpu(), time.perf_counter(), 0, 0
    while batches < spec["batches"] or time.perf_counter() - t0 < spec["seconds"]:
        n, batches = n + len(next(it)["__key__"]), batches + 1
    wall, used = time.perf_counter() - t0, cpu() - c0
    m1 = metrics.read() if metrics else {}
    loader.close()
    gets = m1.get("GET", 0) - m0.get("GET", 0)
    requests = sum(m1.get(k, 0) - m0.get(k, 0) for k in m1 if k != "sent_bytes")
    sent = m1.get("sent_bytes", 0) - m0.get("sent_bytes", 0)
    return {"rate": n / wall, "samples": n, "cpu_s": used, "gets": gets, "requests": requests, "sent": sent}


def measure(spec: dict, env: dict | None = None) -> dict | str:
    """``child(spec)`` in a fresh process with ``env`` added and a node cache of its own, empty at the start
    (``DATAREEL_NODE_CACHE``: what one measurement fetches is not served to the next)."""
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    cache = tempfile.mkdtemp(prefix="datareel-bench-node-cache-")
    try:
        env = {**os.environ, "DATAREEL_NODE_CACHE": cache, **(env or {})}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    except subprocess.TimeoutExpired:
        return "timed out (600 s)"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed (rc {done.returncode}): {tail[:300]}"
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer shards, batches and repeats: a check run")
    parser.add_argument("--server", choices=["seaweedfs", "moto"], default="seaweedfs")
    parser.add_argument("--sizes", default="10KiB,100KiB")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--batches", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--ranks", default="1,2,4,8", help="simulated world sizes for the counters ('' skips)")
    parser.add_argument("--only-ranks", action="store_true", help="the simulated-ranks table only, block shuffle")
    parser.add_argument("--ranks-warmup", type=int, default=16, help="micro-batches a rank reads before counting")
    parser.add_argument("--ranks-batches", type=int, default=64, help="micro-batches a rank reads while counted")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    from _remote_tables import client_cpu_table, ranks_table, throughput_table

    repeats = args.repeats or (1 if args.quick else 3)
    batches = args.batches or (20 if args.quick else 40)
    seconds = args.seconds if args.seconds is not None else (0.5 if args.quick else 2.0)
    shards = {"10KiB": 4 if args.quick else 20, "100KiB": 2 if args.quick else 8}
    workers = [int(n) for n in args.workers.split(",")]
    orders = [False, True] if has_block() else [False]
    if not has_block():
        print("BlockShuffle: not available in this datareel (full shuffle only)")
    msc = has_msc_switch()
    with tempfile.TemporaryDirectory(prefix="datareel-bench-remote-") as tmp, _server(args.server) as metrics:
        from _seaweed import upload

        port = metrics.url.rsplit(":", 1)[1].split("/")[0] if metrics else None
        print(f"server: {args.server}; machine load {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs", flush=True)
        sizes = args.sizes.split(",")
        for name in sizes:
            root = Path(tmp) / name
            per_sample = build(root, SIZES[name], shards[name])
            url = upload(root, BUCKET, name)
            base = {"warmup": 3, "batches": batches, "seconds": seconds, "metrics": port and int(port)}
            rows: dict = {}
            for n in workers if not args.only_ranks else []:
                for r in range(repeats):
                    for block in orders if r % 2 == 0 else orders[::-1]:
                        for where in ("local", "s3", "s3 msc") if msc and not block else ("local", "s3"):
                            spec = {**base, "url": str(root) if where == "local" else url, "workers": n, "block": block}
                            env = {"DATAREEL_S3_CLIENT": "msc"} if where == "s3 msc" else {}
                            got = measure(spec, env)
                            key = (block, n, where)
                            if isinstance(got, str):
                                print(f"  {name} {key}: {got}", flush=True)
                            rows.setdefault(key, []).append(got)
            if not args.only_ranks:
                throughput_table(name, per_sample, rows, workers, orders, msc, repeats)
            if args.ranks and name == sizes[0]:  # the counters hardly depend on the size
                worlds = [int(w) for w in args.ranks.split(",")]
                ranked = [True] if args.only_ranks and has_block() else orders
                ranks_table(name, per_sample, url, port, worlds, ranked, measure, args.ranks_warmup, args.ranks_batches)
        if not args.only_ranks:
            client_cpu_table(BUCKET, metrics)


def _server(kind: str):
    if kind == "moto":
        from _remote_tables import moto

        return moto(BUCKET)
    from _seaweed import seaweedfs

    return seaweedfs(BUCKET)


if __name__ == "__main__":
    main()
