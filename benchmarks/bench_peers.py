"""datareel beside litdata, Grain's ElasticIterator and Energon 7.4.1, same samples, same run.

Run from the benchmark venv (the peers are never datareel dependencies)::

    python3 -m venv .venv-bench && .venv-bench/bin/pip install -c constraints.txt -e ".[bench,test]"
    .venv-bench/bin/python benchmarks/bench_peers.py --data /tmp/datareel-peers          # 200,000 samples
    .venv-bench/bin/python benchmarks/bench_peers.py --quick --data /tmp/datareel-peers  # 20,000: a check
    # beside an older checkout's full shuffle (git worktree add /tmp/base REV):  --baseline /tmp/base/src

The same generated samples are written once in each loader's native format (``_peer_data.py``):
"raw", 10 KiB payloads kept as bytes, and "jpeg", ~100 KB Pillow-made JPEGs decoded and resized to
224×224 in each loader's per-sample hook (``_peer_loaders.decode``). Every loader is shuffled, batch
32, ``num_workers`` 0 and 2 (or the peer's equivalent); loaders that need a datareel feature not in
this checkout (``BlockShuffle``, ``Loader(map_threads=)``) are reported "not available". Each
measurement is its own subprocess (imports and RNG state do not interfere): the loader is built,
``--warmup`` batches are taken (worker start-up, first chunk loads), then ``--batches`` batches are
timed. Figures: samples/s, median (min–max) over ``--repeats``, the loaders alternating within each
repeat; the ratio of medians to datareel's full shuffle at the same ``num_workers``; the CPU the
loader's processes used while timed (psutil, the process and its children), in % of one core, and
samples per CPU-second (on a shared machine a loader with more threads also takes a larger share of
the cores from other jobs: compare both). Every measured process runs torch with one intra-op thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FULL = {"raw": 200_000, "jpeg": 20_000}
QUICK = {"raw": 20_000, "jpeg": 2_000}
# (timed, warm-up) batches; the warm-up outlasts the deepest pipeline here (Grain's 16 read threads, each
# on one batch of 32: ~16 batches in flight), so the timed batches are made while timed
BATCHES = {"raw": (300, 24), "jpeg": (40, 20)}
QUICK_BATCHES = {"raw": (100, 20), "jpeg": (24, 20)}


def child(name: str, home: Path, kind: str, workers: int, batches: int, warmup: int) -> dict[str, float]:
    """One measurement in this process: samples/s and CPU % of the timed batches."""
    import torch

    from _peer_loaders import make
    from _timing import process_tree_cpu

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # as in DataLoader workers: no intra-op threads waiting for a busy core
    loader = make(name, home, kind, workers)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    cpu = process_tree_cpu

    c0, t0 = cpu(), time.perf_counter()
    for _ in range(batches):
        next(it)
    wall, used = time.perf_counter() - t0, cpu() - c0
    return {"rate": batches * 32 / wall, "cpu": 100 * used / wall}


BASELINE = "datareel full shuffle, baseline checkout"


def measure(name: str, home: Path, kind: str, workers: int, batches: int, warmup: int, baseline: str = ""):
    """``child`` in a fresh process -> its figures, or a line saying why there are none. The baseline
    loader is datareel's full shuffle with ``PYTHONPATH`` naming the baseline checkout's ``src``."""
    env = dict(os.environ)
    if name == BASELINE:
        name, env["PYTHONPATH"] = "datareel full shuffle", baseline
    cmd = [sys.executable, __file__, "--child", name, "--home", str(home), "--kind", kind]
    cmd += ["--workers", str(workers), "--batches", str(batches), "--warmup", str(warmup)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired:
        return "timed out (900 s)"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed (rc {done.returncode}): {tail[:200]}"
    return json.loads(lines[-1])


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def table(kind: str, names: list[str], results: dict, workers: list[int]) -> None:
    head = " | ".join(f"N={n} samples/s | N={n} ratio | N={n} CPU % | N={n} samples per CPU-s" for n in workers)
    print(f"\n{kind}: | loader | {head} |")
    print("|---|" + "---|---|---|---|" * len(workers))
    base = {n: results.get(("datareel full shuffle", n)) for n in workers}
    for name in names:
        cells = []
        for n in workers:
            got = results.get((name, n))
            if isinstance(got, str) or not got:
                cells += [got or "not run", "", "", ""]
                continue
            rates, cpus = [r["rate"] for r in got], [r["cpu"] for r in got]
            ref = base[n]
            ratio = float("nan")
            if ref and not isinstance(ref, str):
                ratio = statistics.median(rates) / statistics.median([r["rate"] for r in ref])
            per_cpu = [100 * r["rate"] / r["cpu"] for r in got if r["cpu"] > 0]
            cells += [fmt(rates), f"{ratio:.2f}×", f"{statistics.median(cpus):.0f}", fmt(per_cpu)]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 raw / 2,000 JPEG samples, fewer batches")
    parser.add_argument("--data", type=Path, help="keep the generated data here and reuse it (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", default="raw,jpeg")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--only", default="", help="comma-separated substrings of loader names to run")
    parser.add_argument("--baseline", default="", help="a datareel checkout's src/: its full shuffle beside")
    parser.add_argument("--child")
    parser.add_argument("--home", type=Path)
    parser.add_argument("--kind")
    parser.add_argument("--batches", type=int)
    parser.add_argument("--warmup", type=int)
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.home, args.kind, int(args.workers), args.batches, args.warmup)
        print(json.dumps(result), flush=True)
        return

    from _peer_data import build, warm
    from _peer_loaders import LOADERS, available

    counts, batch_plan = (QUICK, QUICK_BATCHES) if args.quick else (FULL, BATCHES)
    workers = [int(n) for n in args.workers.split(",")]
    import datareel

    print(f"datareel from {Path(datareel.__file__).parents[1]}; baseline: {args.baseline or 'none'}")
    with tempfile.TemporaryDirectory(prefix="datareel-peers-") as tmp:
        root = args.data or Path(tmp)
        for kind in args.kinds.split(","):
            names = [n for n, spec in LOADERS.items() if kind in spec[3]]
            names[1:1] = [BASELINE] if args.baseline else []
            if args.only:
                names = [n for n in names if any(s.strip() in n for s in args.only.split(","))]
            t0 = time.perf_counter()
            home = build(root, kind, counts[kind])
            warm(home)
            print(f"{kind}: {counts[kind]:,} samples in {home} (built/warmed in {time.perf_counter() - t0:.0f} s)")
            results: dict = {}
            for name in names:
                if name != BASELINE and not available(name):
                    for n in workers:
                        results[(name, n)] = "not available in this datareel"
            run = [n for n in names if n == BASELINE or available(n)]
            batches, warmup = batch_plan[kind]
            for n in workers:
                for r in range(args.repeats):
                    for name in run if r % 2 == 0 else run[::-1]:
                        got = measure(name, home, kind, n, batches, warmup, args.baseline)
                        if isinstance(got, str):
                            results[(name, n)] = got
                            print(f"  {name} N={n}: {got}", flush=True)
                        elif not isinstance(results.get((name, n)), str):
                            results.setdefault((name, n), []).append(got)
            print(f"{kind}: batch 32, {batches} timed batches after {warmup} warm-up ones, {args.repeats} repeats")
            table(kind, names, results, workers)


if __name__ == "__main__":
    main()
