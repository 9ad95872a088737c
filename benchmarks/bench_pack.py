"""Pack planning throughput: input reel positions planned into packs per second (main process).

For each window size: plan 16 consecutive windows of a 10^6-sample source with
lengths from a table (uniform 1..2000, max_length 4096: ~4 samples per pack) —
resolve positions, look up lengths, first-fit-decreasing.  Side by side in the
same run, the baseline: resolving the same positions without packing.
Median (min–max) over 5 repeats.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import datareel
from datareel.blend import build_plan
from datareel.reel import PackedReel, Packing


def main() -> None:
    n = 1_000_000
    table = np.random.default_rng(0).integers(1, 2001, n)
    source = datareel.from_sequence(range(n), name="tokens")
    plan, leaves = build_plan(source, seed=1, shuffle=True)
    print("| window | packing: positions/s | baseline (resolve only): positions/s | samples per pack |")
    print("|---|---|---|---|")
    for window in (256, 1024, 4096):
        packing = Packing(max_length=4096, length=lambda s, idx: table[idx], window=window)
        packed_rates, plain_rates, per_pack = [], [], []
        for _ in range(5):
            reel = PackedReel(plan, leaves, packing, None)
            t0 = time.perf_counter()
            packs = sum(len(reel.window(w)) for w in range(100, 116))
            packed_rates.append(16 * window / (time.perf_counter() - t0))
            per_pack.append(16 * window / packs)
            t0 = time.perf_counter()
            for w in range(100, 116):
                plan.resolve(np.arange(w * window, (w + 1) * window))
            plain_rates.append(16 * window / (time.perf_counter() - t0))
        f = lambda v: f"{statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})"  # noqa: E731
        print(f"| {window} | {f(packed_rates)} | {f(plain_rates)} | {statistics.median(per_pack):.2f} |")


if __name__ == "__main__":
    main()
