"""The tables of ``bench_remote.py`` (throughput, simulated ranks, client CPU per GET) and its moto option.

Not used by tests. Medians (min–max) over the repeats; counters from the server (:class:`_seaweed.Metrics`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

LOOKAHEAD = "DATAREEL_LOOKAHEAD_BYTES"


def fmt(values: list[float], f: str = "{:,.0f}") -> str:
    return f"{f.format(statistics.median(values))} ({f.format(min(values))}–{f.format(max(values))})"


def _ok(values: list) -> list[dict]:
    return [v for v in values if isinstance(v, dict)]


def _counters(got: list[dict], per_sample: float) -> tuple[str, str, str]:
    """requests per sample, bytes read per byte used, reader CPU per GET (ms): medians over ``got``."""
    if not got or not any(g["gets"] for g in got):
        return "n/a", "n/a", "n/a"
    req = [g["requests"] / g["samples"] for g in got]
    ratio = [g["sent"] / (g["samples"] * per_sample) for g in got]
    cpu = [1000 * g["cpu_s"] / g["gets"] for g in got if g["gets"]]
    return fmt(req, "{:.3f}"), fmt(ratio, "{:.2f}"), fmt(cpu, "{:.2f}")


def throughput_table(name: str, per_sample: float, rows: dict, workers: list[int], orders, msc: bool, repeats: int):
    print(f"\n{name} samples ({per_sample:,.0f} bytes each in the tar), {repeats} repeats:")
    print(
        "| order | num_workers | client | local disk samples/s | bucket samples/s | bucket / local "
        "| requests per sample | bytes read per byte used | reader CPU per GET, ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for block in orders:
        for n in workers:
            local = _ok(rows.get((block, n, "local"), []))
            for where in ("s3", "s3 msc") if msc and not block else ("s3",):
                remote = _ok(rows.get((block, n, where), []))
                if not local or not remote:
                    errors = [v for v in rows.get((block, n, where), []) if isinstance(v, str)]
                    print(f"| {'block' if block else 'full'} | {n} | {where} | {errors[:1]} |")
                    continue
                lr, rr = [g["rate"] for g in local], [g["rate"] for g in remote]
                ratio = statistics.median(rr) / statistics.median(lr)
                order = "BlockShuffle(block=16)" if block else "full shuffle"
                client = "multi-storage-client" if where == "s3 msc" else "default (obstore)"
                req, used, cpu = _counters(remote, per_sample)
                print(f"| {order} | {n} | {client} | {fmt(lr)} | {fmt(rr)} | {ratio:.2f} | {req} | {used} | {cpu} |")
    sys.stdout.flush()


def ranks_table(
    name: str, per_sample: float, url: str, port, worlds: list[int], orders, measure: Callable, warmup=16, batches=64
) -> None:
    """W ranks simulated one after another (rank r of W, micro-batch 32/W, num_workers 0): the server's
    counters summed over the ranks, ``warmup`` micro-batches (16: one block's span), ``batches`` timed; lookahead off
    (``DATAREEL_LOOKAHEAD_BYTES=0``: up to 64 MiB fetched ahead would count in so short a window)."""
    if not port:
        print("simulated ranks: needs the server's counters (SeaweedFS)")
        return
    print(f"\n{name}: W ranks simulated, G = 32, m = 32/W, N = 0, lookahead off, ", end="")
    print(f"{batches} micro-batches a rank after {warmup}:")
    print("| order | W | m | requests per sample | GETs per sample | bytes read per byte used |")
    print("|---|---|---|---|---|---|")
    for block in orders:
        for world in worlds:
            total = {"samples": 0, "gets": 0.0, "requests": 0.0, "sent": 0.0}
            for rank in range(world):
                spec = {"url": url, "workers": 0, "block": block, "warmup": warmup, "batches": batches, "seconds": 0.0}
                got = measure({**spec, "metrics": int(port), "rank": rank, "world": world}, {LOOKAHEAD: "0"})
                if isinstance(got, str):
                    print(f"| {'block' if block else 'full'} | {world} | rank {rank}: {got} |")
                    break
                for key in total:
                    total[key] += got[key]
            else:
                order = "BlockShuffle(block=16)" if block else "full shuffle"
                s = total["samples"]
                print(
                    f"| {order} | {world} | {32 // world} | {total['requests'] / s:.4f} | {total['gets'] / s:.4f} "
                    f"| {total['sent'] / (s * per_sample):.3f} |",
                    flush=True,
                )


def client_cpu_table(bucket: str, metrics, calls: int = 40, size: int = 10 * 1024, spacing: int = 2 << 20) -> None:
    """Client CPU per ranged GET, 32 in flight: 32 ranges of ``size`` bytes, ``spacing`` apart (never merged),
    ``calls`` times, after one warm-up call; CPU of this process (all its threads) / GETs the server saw."""
    import boto3

    key = "probe/probe.bin"
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=os.urandom(32 * spacing))
    starts = [i * spacing for i in range(32)]
    url = f"s3://{bucket}/{key}"

    def datareel_files(client: str):
        from datareel.storage.remote import RemoteFiles

        saved = {k: os.environ.get(k) for k in ("DATAREEL_S3_CLIENT", "DATAREEL_REMOTE_CONCURRENCY")}
        os.environ.update({"DATAREEL_S3_CLIENT": client, "DATAREEL_REMOTE_CONCURRENCY": "32"})
        try:
            files = RemoteFiles()
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        wanted = [(url, s, s + size) for s in starts]
        return lambda: files.read_ranges(wanted)

    def obstore_direct():
        import obstore
        from obstore.store import S3Store

        store = S3Store(bucket, endpoint=os.environ["AWS_ENDPOINT_URL"], client_options={"allow_http": True})
        return lambda: obstore.get_ranges(store, key, starts=starts, ends=[s + size for s in starts])

    def boto3_threads():
        client = boto3.client("s3", config=__import__("botocore.config").config.Config(max_pool_connections=32))
        pool = ThreadPoolExecutor(32)

        def one(s: int) -> bytes:
            return client.get_object(Bucket=bucket, Key=key, Range=f"bytes={s}-{s + size - 1}")["Body"].read()

        return lambda: list(pool.map(one, starts))

    makers = {
        "datareel RemoteFiles.read_ranges, obstore (default)": lambda: datareel_files("obstore"),
        "datareel RemoteFiles.read_ranges, DATAREEL_S3_CLIENT=msc": lambda: datareel_files("msc"),
        "obstore.get_ranges (direct)": obstore_direct,
        "boto3 get_object, 32 threads": boto3_threads,
    }
    print(f"\nclient CPU per ranged GET ({size // 1024} KiB, 32 ranges per call, {calls} calls, one process):")
    print("| client | GETs counted | GETs/s | client CPU per GET, µs |")
    print("|---|---|---|---|")
    for name, make in makers.items():
        try:
            call = make()
            call()  # connections, threads, the runtime
            g0 = metrics.read()["GET"] if metrics else 0
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(calls):
                call()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            gets = (metrics.read()["GET"] - g0) if metrics else calls * 32
        except Exception as exc:  # an old checkout without the switch, a missing client
            print(f"| {name} | failed: {type(exc).__name__}: {str(exc)[:150]} | | |")
            continue
        print(f"| {name} | {gets:,.0f} | {gets / wall:,.0f} | {1e6 * cpu / gets:,.0f} |", flush=True)


@contextmanager
def moto(bucket: str) -> Iterator[None]:
    """moto's S3 server as its own process on 127.0.0.1 (no request counters: those columns say n/a)."""
    import boto3

    from datareel.testing import free_port
    from s3_server import ENV

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.environ.update({**ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true"})
    try:
        for _ in range(200):
            try:
                boto3.client("s3").create_bucket(Bucket=bucket)
                break
            except Exception:
                time.sleep(0.05)
        yield None
    finally:
        server.terminate()
        server.wait()
