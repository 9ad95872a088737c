"""Time to first batch after restoring at cursor 10^12 vs cursor 0 (10^6-sample source).

Each repeat builds a fresh Loader (num_workers=0), restores a state at the given
cursor and takes one micro-batch. The two cursors are measured interleaved in
the same run; the figure of interest is the ratio of medians (target <= 1.2).
Where the datareel measured has batch-size schedules, the same is measured with
Megatron's ramp-up ``RampUp(64, 64, 10^7, 1024)`` as the global batch size.
"""

from __future__ import annotations

import argparse
import statistics
import time

import datareel
from datareel.reel.cursor import Cursor
from datareel.state import make_state


class Rows:
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> dict:
        return {"id": i}


def first_batch_seconds(dataset, state: dict, global_batch_size) -> float:
    t0 = time.perf_counter()
    loader = datareel.Loader(
        dataset, global_batch_size=global_batch_size, micro_batch_size=8, rank=3, world_size=8, seed=1
    )
    loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=31)
    args = parser.parse_args()
    dataset = datareel.from_sequence(Rows(), name="rows")
    sizes = {"G=64": 64}
    if hasattr(datareel, "RampUp"):  # the release measured has batch-size schedules
        sizes["RampUp(64, 64, 1e7, 1024)"] = datareel.RampUp(64, 64, 10_000_000, 1024)
    for label, global_batch_size in sizes.items():
        template = datareel.Loader(
            dataset, global_batch_size=global_batch_size, micro_batch_size=8, rank=3, world_size=8, seed=1
        ).state_dict()
        # a state at each cursor, its check written for it (both cursors lie on the 64-position micro-step grid)
        states = {c: make_state(Cursor(c), template["spec"]) for c in (0, 10**12)}
        times: dict[int, list[float]] = {c: [] for c in states}
        for c in states:
            first_batch_seconds(dataset, states[c], global_batch_size)  # warm-up
        for _ in range(args.repeats):
            for c, state in states.items():
                times[c].append(first_batch_seconds(dataset, state, global_batch_size))
        med = {c: statistics.median(ts) for c, ts in times.items()}
        for c, ts in times.items():
            print(
                f"{label}, cursor {c:.0e}: median {med[c] * 1e3:.3f} ms "
                f"(min {min(ts) * 1e3:.3f} – max {max(ts) * 1e3:.3f}) over {len(ts)}"
            )
        print(f"{label}, ratio of medians (10^12 / 0): {med[10**12] / med[0]:.3f}")


if __name__ == "__main__":
    main()
