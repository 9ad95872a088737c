"""The threaded map (``Loader(..., map_threads=n)``): decode + resize to 224 of ~100 KB JPEGs, samples/s.

Dataset: ``--shards`` shards × ``--per-shard`` samples, each a ~100 KB JPEG (about 640×480, made with
Pillow from a smooth pattern plus noise, quality 90) and a ``.cls``, prepared as a WebDataset in a temp
dir (warm page cache).  Per sample, in ``encode_sample``: PIL decode (``--decode encoder``: the dataset
opened with ``decode=False``), or the reader's own decoding to a PIL image (``--decode reader``:
``image_decode="pil"``), then ``resize((224, 224), BILINEAR)`` to a uint8 CHW tensor; default collation.
Shuffled, micro-batch 32.  For each ``num_workers`` in 0 and 2, ``map_threads`` 0, 2 and 4 are measured
side by side, alternating within each repeat: a fresh loader, one warm-up batch (worker and thread start-up
not counted), then ``--batches`` timed batches.  Figures: samples/s, median (min–max) over ``--repeats``,
and the speed-up of each median over ``map_threads=0``'s; ``CPU/wall`` of the main process at
``num_workers=0`` (above 1.0: the GIL was released and threads ran at once).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import datareel
from datareel.cli.prepare import prepare_webdataset

THREADS = (0, 2, 4)
_GRID = np.mgrid[0:480, 0:640]  # (2, 480, 640): rows, columns


def jpeg(i: int) -> bytes:
    """A ~100 KB JPEG (640×480): a smooth colour pattern with noise, different for each ``i``."""
    rng = np.random.default_rng(i)
    y, x = _GRID
    base = np.stack([(x * (1 + i % 5) + y) % 256, (y * 2 + i) % 256, (x + y * (1 + i % 3)) % 256], axis=-1)
    noisy = base + rng.normal(0, 10, base.shape)  # (480, 640, 3)
    out = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(out, format="JPEG", quality=85)
    return out.getvalue()


def build(root: Path, shards: int, per_shard: int) -> int:
    """The shards, prepared; -> the mean JPEG size in bytes."""
    sizes = []
    for s in range(shards):
        with tarfile.open(root / f"shard-{s:03d}.tar", "w") as tar:
            for j in range(per_shard):
                i = s * per_shard + j
                for part, data in (("jpg", jpeg(i)), ("cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(f"{i:07d}.{part}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                    sizes += [len(data)] if part == "jpg" else []
    prepare_webdataset(root, progress=False)
    return int(statistics.mean(sizes))


class Resize:
    """Decode (when the reader did not) and resize to 224×224: a uint8 CHW tensor."""

    def encode_sample(self, sample):
        image = sample["jpg"]
        if isinstance(image, (bytes, bytearray, memoryview)):
            image = Image.open(io.BytesIO(image))
        small = image.convert("RGB").resize((224, 224), Image.BILINEAR)
        return {"image": torch.from_numpy(np.array(small)).permute(2, 0, 1), "cls": int(sample["cls"])}


def rate(root: Path, workers: int, threads: int, batches: int, decode: str) -> tuple[float, float]:
    """(samples/s, main-process CPU seconds per wall second) of ``batches`` batches after one warm-up."""
    opened = (
        datareel.open_dataset(root, decode=False)
        if decode == "encoder"
        else datareel.open_dataset(root, image_decode="pil")
    )
    loader = datareel.Loader(
        opened, global_batch_size=32, micro_batch_size=32, seed=1, num_workers=workers,
        task_encoder=Resize(), map_threads=threads,
    )  # fmt: skip
    it = iter(loader)
    next(it)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(it)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    loader.close()
    return batches * 32 / wall, cpu / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--per-shard", type=int, default=64)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode", choices=("encoder", "reader"), default="encoder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="datareel-bench-threads-") as tmp:
        root = Path(tmp)
        mean = build(root, args.shards, args.per_shard)
        print(f"{args.shards * args.per_shard} JPEGs of {mean / 1000:.0f} KB on average, decode in {args.decode}, "
              f"{os.cpu_count()} CPUs; samples/s, median (min–max) of {args.repeats}")  # fmt: skip
        print("| num_workers | " + " | ".join(f"map_threads={t}" for t in THREADS) + " | CPU/wall at N=0 |")
        print("|---|" + "---|" * (len(THREADS) + 1))
        for workers in (0, 2):
            got: dict[int, list[float]] = {t: [] for t in THREADS}
            load: dict[int, list[float]] = {t: [] for t in THREADS}
            for _ in range(args.repeats):
                for t in THREADS:
                    samples, busy = rate(root, workers, t, args.batches, args.decode)
                    got[t].append(samples)
                    load[t].append(busy)
            base = statistics.median(got[0])
            cells = [
                f"{statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f}) ×{statistics.median(v) / base:.2f}"
                for v in got.values()
            ]
            busy = " / ".join(f"{statistics.median(v):.2f}" for v in load.values()) if workers == 0 else "–"
            print(f"| {workers} | " + " | ".join(cells) + f" | {busy} |", flush=True)


if __name__ == "__main__":
    main()
