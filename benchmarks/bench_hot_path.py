"""The hot path of one process (N=0, default encoder, raw bytes) beside a plain loop over the same bytes.

Dataset: ``--shards`` tar shards × 1,000 samples, each 3 parts of 1 KiB (``a.bin``, ``b.bin``, ``c.bin``),
prepared by ``datareel prepare`` (once, under ``--data``). datareel: ``open_dataset(decode=False)``,
``Loader(global_batch_size=32, micro_batch_size=32, num_workers=0)``, full shuffle and
``BlockShuffle(16)``. The plain loop: the same shuffled samples ``os.pread`` one by one and sliced at member
offsets recorded beforehand into three columns of ``bytes`` (what a reader that parses nothing per sample
does). Figures: µs of CPU per sample (process time over the timed batches), median over ``--repeats``, the
plain loop measured alternately in the same run; and the Python function calls per sample of one timed
stretch (a cProfile count: every call, C functions included)::

    .venv/bin/python benchmarks/bench_hot_path.py --data /tmp/datareel-hot
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

import datareel

PARTS = ("a.bin", "b.bin", "c.bin")


def build(root: Path, shards: int) -> None:
    """``shards`` tar files of 1,000 samples of three 1 KiB parts, then ``datareel prepare``."""
    if (root / ".nv-meta" / ".info.json").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for s in range(shards):
        with tarfile.open(root / f"shard-{s:04d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for j in range(1000):
                for part in PARTS:
                    data = rng.bytes(1024)
                    info = tarfile.TarInfo(f"{s * 1000 + j:08d}.{part}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    cli = str(Path(sys.executable).parent / "datareel")
    subprocess.run([cli, "prepare", str(root), "--split-ratio", "1,0,0"], check=True, capture_output=True)


def datareel_batches(root: Path, shuffle: object):
    kwargs = {} if shuffle is None else {"shuffle": shuffle}
    loader = datareel.Loader(
        datareel.open_dataset(root, decode=False),
        global_batch_size=32,
        micro_batch_size=32,
        seed=1,
        num_workers=0,
        **kwargs,
    )
    return iter(loader)


class PlainLoop:
    """The floor: shuffled samples read with one ``os.pread`` each and cut at recorded member offsets."""

    def __init__(self, root: Path, shards: int):
        self.fds, self.spans = [], []
        for s in range(shards):
            path = root / f"shard-{s:04d}.tar"
            self.fds.append(os.open(path, os.O_RDONLY))
            with tarfile.open(path) as tar:  # recorded once, outside the timing
                members = tar.getmembers()
            for j in range(1000):
                m = members[3 * j : 3 * j + 3]
                start = m[0].offset
                self.spans.append(
                    (s, start, m[-1].offset_data + m[-1].size, [(x.offset_data - start, x.size) for x in m])
                )
        self.order = np.random.default_rng(1).permutation(len(self.spans)).tolist()
        self.at = 0

    def __next__(self):
        columns: list[list[bytes]] = [[], [], []]
        for i in self.order[self.at : self.at + 32]:
            s, start, stop, members = self.spans[i]
            blob = os.pread(self.fds[s], stop - start, start)
            for column, (offset, size) in zip(columns, members):
                column.append(blob[offset : offset + size])
        self.at = (self.at + 32) % (len(self.order) - 32)
        return columns


def cpu_per_sample(batches, count: int) -> float:
    start = time.process_time()
    for _ in range(count):
        next(batches)
    return (time.process_time() - start) / (count * 32) * 1e6


def calls_per_sample(batches, count: int) -> float:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(count):
        next(batches)
    profile.disable()
    stats = pstats.Stats(profile, stream=io.StringIO())
    return sum(row[1] for row in stats.stats.values()) / (count * 32)  # primitive + recursive calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/datareel-hot"))
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    build(args.data, args.shards)
    makers = {
        "plain loop (recorded offsets)": lambda: PlainLoop(args.data, args.shards),
        "datareel full shuffle": lambda: datareel_batches(args.data, None),
        "datareel BlockShuffle(16)": lambda: datareel_batches(args.data, datareel.BlockShuffle(block=16)),
    }
    cpu: dict[str, list[float]] = {name: [] for name in makers}
    calls: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, make in makers.items():
            batches = make()
            for _ in range(20):  # warm-up: first opens, the first blocks
                next(batches)
            cpu[name].append(cpu_per_sample(batches, args.batches))
            if name not in calls:
                calls[name] = calls_per_sample(batches, 50)
    floor = statistics.median(cpu["plain loop (recorded offsets)"])
    print("| reader | CPU µs a sample, median (min–max) | × plain loop | Python calls a sample |")
    print("|---|---|---|---|")
    for name, values in cpu.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.1f} ({min(values):.1f}–{max(values):.1f}) | {median / floor:.2f} | "
            f"{calls[name]:.1f} |"
        )


if __name__ == "__main__":
    main()
