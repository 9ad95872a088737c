"""WebDataset read throughput: datareel vs Energon's get_savable_loader, same data, same run.

Dataset: 20 shards × 1,000 samples, each a short ``.txt`` and a 10 KiB ``.bin``
(prepared once, by ``energon prepare``, in a temp dir; warm page cache for
both).  Shuffle on, micro-batch 32, ``num_workers`` 0 and 2.  Energon:
``get_train_dataset(shuffle_buffer_size=100, max_samples_per_sequence=100)`` +
``get_savable_loader``, a crude dataset with a pass-through cooker.  Each
repeat builds a fresh loader, takes one warm-up batch (worker start-up is not
counted), then times ``--batches`` batches.  Figures: samples/s, median
(min–max) over ``--repeats`` repeats, loaders measured alternately.  Beside them,
:class:`Probe`, the near-limit baseline issue 14 names: a bare loop of
``os.pread`` and tar-header parsing over the same data, shuffled, in one process.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import datareel


def build(root: Path, shards: int = 20, per_shard: int = 1000) -> None:
    write_shards(root, shards, per_shard)
    energon = str(Path(sys.executable).parent / "energon")
    subprocess.run(
        [energon, "prepare", str(root), "--non-interactive", "--split-ratio=1,0,0", "--sample-type=CrudeWebdataset"],
        check=True,
        capture_output=True,
    )


def write_shards(root: Path, shards: int, per_shard: int) -> None:
    """``shards`` tar files of ``per_shard`` samples: a short ``.txt`` and a 10 KiB ``.bin`` each."""
    payload = os.urandom(10 * 1024)
    for s in range(shards):
        with tarfile.open(root / f"shard-{s:03d}.tar", "w") as tar:
            for j in range(per_shard):
                i = s * per_shard + j
                for part, data in (("txt", f"sample {i}".encode()), ("bin", payload[i % 97 :] + payload[: i % 97])):
                    info = tarfile.TarInfo(f"{i:07d}.{part}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def datareel_loader(root: Path, workers: int):
    return datareel.Loader(
        datareel.open_dataset(root), global_batch_size=32, micro_batch_size=32, seed=1, num_workers=workers
    )


def energon_loader(root: Path, workers: int):
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        WorkerConfig,
        get_savable_loader,
        get_train_dataset,
        stateless,
    )

    class Passthrough(DefaultTaskEncoder):
        cookers = [Cooker(stateless(lambda sample: sample))]

        def batch(self, samples):
            return samples

    dataset = get_train_dataset(
        str(root),
        split_part="train",
        batch_size=32,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        task_encoder=Passthrough(),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
    )
    return get_savable_loader(dataset)


class Probe:
    """The near-limit baseline: one Python loop of ``os.pread`` and a minimal tar header parse (name, size)
    over the same data in a shuffled order, 32 samples (dicts of part -> bytes) per batch."""

    def __init__(self, root: Path, workers: int):
        import numpy as np

        ranges = []
        for shard in sorted(root.glob("*.tar")):
            fd = os.open(shard, os.O_RDONLY)
            idx = np.fromfile(f"{shard}.idx", dtype="<u8").tolist()
            ranges += [(fd, a, b - a) for a, b in zip(idx, idx[1:])]
        order = np.random.default_rng(1).permutation(len(ranges)).tolist()
        self.ranges = [ranges[i] for i in order]

    def __iter__(self):
        batch = []
        for fd, start, size in itertools.cycle(self.ranges):
            blob, pos, sample = os.pread(fd, size, start), 0, {}
            while pos + 512 <= len(blob):
                name = blob[pos : pos + 100].split(b"\0", 1)[0].decode()
                length = int(blob[pos + 124 : pos + 136].split(b"\0", 1)[0] or b"0", 8)
                sample[name.partition(".")[2]] = blob[pos + 512 : pos + 512 + length]
                pos += 512 + (length + 511) // 512 * 512
            batch.append(sample)
            if len(batch) == 32:
                yield batch
                batch = []


def rate(make, root: Path, workers: int, batches: int) -> float:
    loader = make(root, workers)
    it = iter(loader)
    next(it)  # warm-up: worker start-up and first fills are not counted
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    elapsed = time.perf_counter() - t0
    del it, loader
    return batches * 32 / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import warnings

    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    with tempfile.TemporaryDirectory(prefix="datareel-bench-wds-") as tmp:
        root = Path(tmp)
        build(root)
        print(
            "| num_workers | datareel samples/s | Energon samples/s | ratio of medians "
            "| pread probe samples/s (one process) | datareel / probe |"
        )
        print("|---|---|---|---|---|---|")
        for workers in (0, 2):
            ours, theirs, probe = [], [], []
            for _ in range(args.repeats):
                ours.append(rate(datareel_loader, root, workers, args.batches))
                theirs.append(rate(energon_loader, root, workers, args.batches))
                probe.append(rate(Probe, root, 0, args.batches))
            fmt = lambda v: f"{statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})"  # noqa: E731
            print(
                f"| {workers} | {fmt(ours)} | {fmt(theirs)} "
                f"| {statistics.median(ours) / statistics.median(theirs):.2f} "
                f"| {fmt(probe)} | {statistics.median(ours) / statistics.median(probe):.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
