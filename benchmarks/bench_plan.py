"""Plan throughput: reel positions resolved to (source, index) per second, one core.

Baseline, measured in the same run: the conventional way of shuffling an epoch,
materialising ``numpy.random.Generator.permutation(n)`` for the epoch and
indexing it (O(n) memory, and O(n) work to reach any epoch).
"""

from __future__ import annotations

import argparse

import numpy as np

from _timing import measure, summary
from datareel.plan.nodes import ReelPlan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunk", type=int, default=1_000_000, help="positions per resolve call")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    print(
        "| source size | start position | datareel plan, M positions/s "
        "| baseline materialised permutation, M positions/s |"
    )
    print("|---|---|---|---|")
    for n, start in ((1_000_000, 0), (1_000_000, 10**12), (2**20 + 1, 0), (10**9, 10**15)):
        plan = ReelPlan.single(size=n, name="bench", seed=7, shuffle=True)
        positions = np.arange(start, start + args.chunk, dtype=np.int64)
        ours = measure(lambda plan=plan, positions=positions: plan.resolve(positions), args.repeats)

        def baseline(positions: np.ndarray = positions, n: int = n) -> None:
            epoch, offset = np.divmod(positions, n)
            rng = np.random.default_rng([7, int(epoch[0])])
            perm = rng.permutation(n)  # the whole epoch, whatever the chunk
            perm[offset]

        base = measure(baseline, args.repeats) if n <= 10**7 else None
        rate = lambda ts: [args.chunk / t / 1e6 for t in ts]  # noqa: E731
        print(
            f"| {n:,} | {start:.0e} | {summary(rate(ours), fmt='{:.1f}')} | "
            f"{summary(rate(base), fmt='{:.1f}') if base else 'n/a (a 10^9 permutation needs 8 GB)'} |"
        )

    # Random access: one micro-batch of 8 positions in an arbitrary epoch (what a restore needs).
    n = 1_000_000
    plan = ReelPlan.single(size=n, name="bench", seed=7, shuffle=True)
    rng = np.random.default_rng(0)
    starts = iter(rng.integers(0, 10**12, size=10_000).tolist())

    def ours_one() -> None:
        s0 = next(starts)
        plan.resolve(np.arange(s0, s0 + 8))

    def base_one() -> None:
        s0 = next(starts)
        np.random.default_rng([7, s0 // n]).permutation(n)[np.arange(s0, s0 + 8) % n]

    ours = measure(ours_one, args.repeats * 10)
    base = measure(base_one, args.repeats)
    print(
        f"\nrandom access, 8 positions in a random epoch of a 10^6 source: datareel "
        f"{summary(ours, 1e6, '{:.0f}')} µs, baseline {summary(base, 1e6, '{:.0f}')} µs (median, min–max)"
    )


if __name__ == "__main__":
    main()
