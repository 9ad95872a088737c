"""Time to the first batch with DataLoader workers (not used by tests).

    python benchmarks/bench_first_batch.py [--rounds 5] [--workers 2 8]

Each measurement is a fresh Python process, timed from just before it starts until its first micro-batch is in
hand: import datareel, open a prepared WebDataset (16 shards × 256 samples of a 4 KiB payload and a caption),
build ``Loader(num_workers=N)`` and take ``next(iter(loader))``; ``restore`` first loads a state saved 300
global batches in.  Median and range over ``--rounds`` processes for N = 2 and 8.  Run it beside an older
revision with ``benchmarks/side_by_side.sh REV 1 bench_first_batch``.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from _timing import summary

CHILD = r"""
import json, sys, time
t0 = float(sys.argv[1])
import datareel
root, workers, state = sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = datareel.open_dataset(root, split="train", decode=False)
loader = datareel.Loader(data, global_batch_size=16, micro_batch_size=16, num_workers=workers, seed=1)
if state != "-":
    loader.load_state_dict(json.loads(open(state).read()))
batch = next(iter(loader))
print(time.time() - t0)
loader.close()
"""


def build(root: Path) -> None:
    """16 shards × 256 samples (``bin``: 4 KiB, ``txt``: a caption), prepared as one train split."""
    from datareel.cli.prepare import prepare_webdataset

    payload = bytes(range(256)) * 16
    for s in range(16):
        with tarfile.open(root / f"part-{s:02d}.tar", "w") as tar:
            for i in range(256):
                key = f"{s:02d}{i:04d}"
                for ext, data in (("bin", payload), ("txt", f"caption {key}".encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    prepare_webdataset(root, sample_type="CrudeWebdataset", progress=False)


def saved_state(root: Path) -> Path:
    """A state saved after 300 global batches (made in this process, without workers)."""
    import datareel

    loader = datareel.Loader(
        datareel.open_dataset(root, split="train", decode=False), global_batch_size=16, micro_batch_size=16, seed=1
    )
    it = iter(loader)
    for _ in range(300):
        next(it)
    path = root.parent / "state.json"
    path.write_text(json.dumps(loader.state_dict()))
    return path


def once(root: Path, workers: int, state: Path | None) -> float:
    start = time.time()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, repr(start), str(root), str(workers), str(state) if state else "-"],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "wds"
        root.mkdir()
        build(root)
        state = saved_state(root)
        for workers in args.workers:
            for kind, given in (("fresh", None), ("restore", state)):
                times = [once(root, workers, given) for _ in range(args.rounds)]
                print(f"first batch, N={workers}, {kind:7}: {summary(times)} s (median (min–max) of {args.rounds})")


if __name__ == "__main__":
    main()
