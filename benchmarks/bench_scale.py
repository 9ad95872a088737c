"""Datasets of many shards: open cost, descriptors and memory, datareel vs Energon, same data, same run.

For each shard count (``--shards``, default 20, 2,000 and 20,000; ``--per-shard`` tiny samples each,
a few bytes of text), one dataset is written and prepared (``datareel prepare``; Energon reads it).
Each measurement runs in a fresh process, the two loaders alternating, ``--repeats`` times:

- **open**: CPU seconds of ``open_dataset`` (datareel) / ``get_train_dataset`` (Energon), imports
  excluded, and the CPU cost per shard between the smallest and the largest dataset;
- **first batch**: wall seconds from the start of opening to the loader's first batch (``num_workers=0``);
- after ``--batches`` batches of 32 (shuffled; Energon: ``shuffle_buffer_size=100``,
  ``max_samples_per_sequence=100``): open descriptors of the process and its peak RSS.

With ``--full`` (datasets written by ``write_template_shards``: one ~1 KiB member per sample, fast to
build at 10^7 samples) each repeat adds: samples/s over the ``--batches`` after the first at
``num_workers=0`` and at 2 (each its own process), the rank's state after those batches (bytes of
``torch.save`` of ``state_dict()`` / ``save_state_rank()``), and a fresh process restoring that state:
wall seconds from the start of opening to the first batch after the restore.

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

from _timing import summary
from wds_helpers import write_template_shards, write_tiny_shards

CHILD = r"""
import io, json, os, resource, sys, time, warnings
warnings.filterwarnings("ignore")
which, root, batches, workers, state_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
restore = state_file != "-" and os.path.exists(state_file)
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

    loader = datareel.Loader(dataset, global_batch_size=32, micro_batch_size=32, seed=1, task_encoder=Keys(),
                             num_workers=workers)
    if restore:
        loader.load_state_dict(json.load(open(state_file)))
else:
    class Passthrough(DefaultTaskEncoder):
        cookers = [Cooker(stateless(lambda sample: sample))]

        def batch(self, samples):
            return samples

    config = WorkerConfig(rank=0, world_size=1, num_workers=workers)
    dataset = get_train_dataset(root, split_part="train", batch_size=32, shuffle_buffer_size=100,
                                max_samples_per_sequence=100, task_encoder=Passthrough(), worker_config=config)
    opened = time.process_time() - cpu
    loader = get_savable_loader(dataset)
    if restore:
        loader.restore_state_rank(torch.load(state_file, weights_only=False))
it = iter(loader)
next(it)
first = time.perf_counter() - wall
start = time.perf_counter()
for _ in range(batches - 1):
    next(it)
rate = 32 * (batches - 1) / (time.perf_counter() - start)
out = {"open_cpu": opened, "first_batch": first, "fds": len(os.listdir("/proc/self/fd")), "samples_s": rate,
       "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if state_file != "-" and not restore:
    state = loader.state_dict() if which == "datareel" else loader.save_state_rank()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    out["state_bytes"] = len(buffer.getvalue())  # torch.save of the rank's state, for both
    if which == "datareel":
        json.dump(state, open(state_file, "w"))
    else:
        torch.save(state, state_file)
print(json.dumps(out))
"""


def run(which: str, root: Path, batches: int, workers: int = 0, state: str = "-") -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which, str(root), str(batches), str(workers), state],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise SystemExit(f"{which} on {root} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt(values: list[float], spec: str = "{:,.3f}") -> str:
    return summary(values, fmt=spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="20,2000,20000")
    parser.add_argument("--per-shard", type=int, default=5)
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--full",
        action="store_true",
        help="also throughput at num_workers=0 and 2, restore and state size (datasets written from a tar "
        "header template, fast enough for 10^7 samples)",
    )
    args = parser.parse_args()
    from datareel.cli.prepare import prepare_webdataset

    counts = [int(n) for n in args.shards.split(",")]
    medians: dict[tuple[str, int], float] = {}
    head = "| shards | samples | loader | open (CPU s) | first batch (s) | descriptors | peak RSS (MB) |"
    if args.full:
        head += " samples/s N=0 | samples/s N=2 | restore to first batch (s) | state (bytes) |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    with tempfile.TemporaryDirectory(prefix="datareel-bench-scale-") as tmp:
        for shards in counts:
            root = Path(tmp) / f"ds{shards}"
            (write_template_shards if args.full else write_tiny_shards)(root, shards, args.per_shard)
            prepare_webdataset(root, progress=False)
            results: dict[str, list[dict[str, float]]] = {"datareel": [], "energon": []}
            for r in range(args.repeats):
                for which in results:
                    state = str(Path(tmp) / f"state-{shards}-{which}-{r}") if args.full else "-"
                    result = run(which, root, args.batches, 0, state)
                    if args.full:
                        result["samples_s_2"] = run(which, root, args.batches, 2)["samples_s"]
                        result["restore"] = run(which, root, 2, 0, state)["first_batch"]
                    results[which].append(result)
            for which, runs in results.items():
                column = {key: [r[key] for r in runs] for key in runs[0]}
                medians[which, shards] = statistics.median(column["open_cpu"])
                row = (
                    f"| {shards:,} | {shards * args.per_shard:,} | {which} | {fmt(column['open_cpu'])} "
                    f"| {fmt(column['first_batch'])} | {fmt(column['fds'], '{:.0f}')} "
                    f"| {fmt(column['rss_mb'], '{:.0f}')} |"
                )
                if args.full:
                    row += (
                        f" {fmt(column['samples_s'], '{:,.0f}')} | {fmt(column['samples_s_2'], '{:,.0f}')} "
                        f"| {fmt(column['restore'])} | {fmt(column['state_bytes'], '{:,.0f}')} |"
                    )
                print(row, flush=True)
            shutil.rmtree(root)
    low, high = counts[0], counts[-1]
    for which in ("datareel", "energon") if high > low else ():
        per_shard = (medians[which, high] - medians[which, low]) / (high - low) * 1e6
        print(f"{which}: open CPU per shard between {low:,} and {high:,} shards: {per_shard:.1f} µs")


if __name__ == "__main__":
    main()
