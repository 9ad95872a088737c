"""``datareel prepare`` at 10^5–10^6+ samples: wall time and peak memory, side by side in one run.

For each size (``--sizes``, samples; ``--per-shard`` tiny one-part samples per shard, written from a
tar header template) the dataset is indexed by, in turn, ``--repeats`` times:

- ``datareel prepare`` from the working tree (``--workers 2``);
- the same command from a baseline checkout (``--baseline SRC_DIR``, e.g. a ``git worktree`` of the
  revision before streaming prepare), when given;
- ``energon prepare`` (Energon 7.4.1) for sizes up to ``--energon-max`` (it is several times slower).

Each run is a fresh process (imports included; the CLI as a user runs it). "Peak RSS" is the
largest peak resident set of any process of the run (the main process or an indexing worker),
read from ``getrusage(RUSAGE_CHILDREN)`` of a wrapper. Figures: median (min–max).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _timing import summary
from wds_helpers import ENERGON, write_template_shards

WRAPPER = r"""
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, code)
"""


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """-> (wall seconds, peak RSS MB of the largest process) of one run of ``command``."""
    out = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True, env=env)
    wall, rss, code = out.stdout.split()
    if int(code) or out.returncode:
        raise SystemExit(f"{command} failed:\n{out.stderr[-3000:]}")
    return float(wall), float(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--per-shard", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="src/ directory of a baseline checkout")
    parser.add_argument("--energon-max", type=int, default=1_000_000)
    args = parser.parse_args()
    src = str(Path(__file__).resolve().parents[1] / "src")
    print("| samples | shards | indexer | wall (s) | peak RSS, largest process (MB) |")
    print("|---|---|---|---|---|")
    for samples in (int(n) for n in args.sizes.split(",")):
        shards = max(1, samples // args.per_shard)
        with tempfile.TemporaryDirectory(prefix="datareel-bench-prepare-") as tmp:
            root = Path(tmp) / "ds"
            write_template_shards(root, shards, samples // shards)
            runs: dict[str, list[tuple[float, float]]] = {"datareel": []}
            if args.baseline:
                runs["datareel (baseline)"] = []
            if samples <= args.energon_max:
                runs["energon"] = []
            for _ in range(args.repeats):
                for which in runs:
                    shutil.rmtree(root / ".nv-meta", ignore_errors=True)
                    for idx in root.rglob("*.idx"):
                        idx.unlink()
                    env = dict(os.environ)
                    if which == "energon":
                        command = [ENERGON, "prepare", str(root), "--non-interactive", "--split-ratio=1,0,0"]
                    else:
                        env["PYTHONPATH"] = args.baseline if which.endswith("(baseline)") else src
                        command = [sys.executable, "-m", "datareel", "prepare", str(root), "--quiet", "--workers", "2"]
                    runs[which].append(measure(command, env))
            for which, values in runs.items():
                walls, rsss = [v[0] for v in values], [v[1] for v in values]
                print(
                    f"| {samples:,} | {shards:,} | {which} | {summary(walls, fmt='{:,.1f}')} "
                    f"| {summary(rsss, fmt='{:,.0f}')} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
