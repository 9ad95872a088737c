"""Datasets of many shards: open cost, descriptors and memory, datareel vs Energon, same data, same run.

For each shard count (``--shards``, default 20, 2,000 and 20,000; ``--per-shard`` tiny samples each,
a few bytes of text), one dataset is written and prepared (``datareel prepare``; Energon reads it).
Each measurement runs in a fresh process, the two loaders alternating, ``--repeats`` times:

- **open**: CPU seconds of ``open_dataset`` (datareel) / ``get_train_dataset`` (Energon), imports
  excluded, and the CPU cost per shard between the smallest and the largest dataset;
- **first batch**: wall seconds from the start of opening to the loader's first batch (``num_workers=0``);
- after ``--batches`` batches of 32 (shuffled; Energon: ``shuffle_buffer_size=100``,
  ``max_samples_per_sequence=100``): open descriptors of the process and its peak RSS.

Figures: median (min–max) over the repeats.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from wds_helpers import write_tiny_shards

CHILD = r"""
import json, os, resource, sys, time, warnings
warnings.filterwarnings("ignore")
which, root, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
import torch  # imported before timing, by both
if which == "datareel":
    import datareel
else:
    from megatron.energon import Cooker, DefaultTaskEncoder, WorkerConfig, get_savable_loader, get_train_dataset
    from megatron.energon import stateless
cpu = time.process_time()
wall = time.perf_counter()
if which == "datareel":
    dataset = datareel.open_dataset(root, decode=False)
    opened = time.process_time() - cpu

    class Keys:
        def encode_sample(self, sample):
            return {"key": sample["__key__"]}

    loader = datareel.Loader(dataset, global_batch_size=32, micro_batch_size=32, seed=1, task_encoder=Keys())
else:
    class Passthrough(DefaultTaskEncoder):
        cookers = [Cooker(stateless(lambda sample: sample))]

        def batch(self, samples):
            return samples

    dataset = get_train_dataset(root, split_part="train", batch_size=32, shuffle_buffer_size=100,
                                max_samples_per_sequence=100, task_encoder=Passthrough(),
                                worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0))
    opened = time.process_time() - cpu
    loader = get_savable_loader(dataset)
it = iter(loader)
next(it)
first = time.perf_counter() - wall
for _ in range(batches - 1):
    next(it)
print(json.dumps({"open_cpu": opened, "first_batch": first, "fds": len(os.listdir("/proc/self/fd")),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(which: str, root: Path, batches: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which, str(root), str(batches)], capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise SystemExit(f"{which} on {root} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt(values: list[float], spec: str = "{:,.3f}") -> str:
    return f"{spec.format(statistics.median(values))} ({spec.format(min(values))}–{spec.format(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="20,2000,20000")
    parser.add_argument("--per-shard", type=int, default=5)
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from datareel.cli.prepare import prepare_webdataset

    counts = [int(n) for n in args.shards.split(",")]
    medians: dict[tuple[str, int], float] = {}
    print("| shards | samples | loader | open (CPU s) | first batch (s) | descriptors | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="datareel-bench-scale-") as tmp:
        for shards in counts:
            root = Path(tmp) / f"ds{shards}"
            write_tiny_shards(root, shards, args.per_shard)
            prepare_webdataset(root, progress=False)
            results: dict[str, list[dict[str, float]]] = {"datareel": [], "energon": []}
            for _ in range(args.repeats):
                for which in results:
                    results[which].append(run(which, root, args.batches))
            for which, runs in results.items():
                column = {key: [r[key] for r in runs] for key in runs[0]}
                medians[which, shards] = statistics.median(column["open_cpu"])
                print(
                    f"| {shards:,} | {shards * args.per_shard:,} | {which} | {fmt(column['open_cpu'])} "
                    f"| {fmt(column['first_batch'])} | {fmt(column['fds'], '{:.0f}')} "
                    f"| {fmt(column['rss_mb'], '{:.0f}')} |",
                    flush=True,
                )
            shutil.rmtree(root)
    low, high = counts[0], counts[-1]
    for which in ("datareel", "energon"):
        per_shard = (medians[which, high] - medians[which, low]) / (high - low) * 1e6
        print(f"{which}: open CPU per shard between {low:,} and {high:,} shards: {per_shard:.1f} µs")


if __name__ == "__main__":
    main()
