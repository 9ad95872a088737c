"""Mixing: cost of resolving deep positions, many-source throughput, and the discrepancy the blend achieves.

1. Resolve one micro-batch (32 positions) of a five-source weighted mix at position 0
   and at position 10^12, interleaved, many repeats: median µs and the ratio.
   Side by side, the same for a single source (the mix's overhead).
2. Throughput of a blend of 100 sources (sizes 10^4..10^6, random weights, shuffled): positions
   resolved per second in calls of 2,048 positions (64 micro-steps of 32: the loader's chunk) and of
   10^6, for the compiled plan (``MixNode``) and, side by side in the same run, the same split tree
   resolved node by node (the baseline before compiling), and a single source.
3. Over random weight sets (Dirichlet, 2..8 sources, weights >= 0.001): the largest
   |count_k(P) - w_k P| over every prefix P < 100,000, and the largest deviation from
   w_k * 1000 over every window of 1,000 positions.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import datareel
from datareel.blend import build_plan


def source(n: int, name: str):
    return datareel.from_sequence(range(n), name=name)


def timing() -> None:
    sizes = [1_000_000, 300_000, 70_000, 5_000, 123_457]
    mix = datareel.mix([(source(n, f"s{i}"), w) for i, (n, w) in enumerate(zip(sizes, [0.4, 0.25, 0.2, 0.1, 0.05]))])
    mixed, _ = build_plan(mix, seed=1, shuffle=True)
    single, _ = build_plan(source(1_000_000, "one"), seed=1, shuffle=True)
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(2000):
        for label, plan in (("five-source mix", mixed), ("single source", single)):
            for start in (0, 10**12):
                positions = np.arange(start, start + 32)
                t0 = time.perf_counter()
                plan.resolve(positions)
                times.setdefault((label, start), []).append(time.perf_counter() - t0)
    print("| plan | position 0, µs | position 10^12, µs | ratio of medians |")
    print("|---|---|---|---|")
    for label in ("five-source mix", "single source"):
        a, b = times[(label, 0)], times[(label, 10**12)]
        f = lambda v: f"{statistics.median(v) * 1e6:.1f} ({min(v) * 1e6:.1f}–{max(v) * 1e6:.1f})"  # noqa: E731
        print(f"| {label} | {f(a)} | {f(b)} | {statistics.median(b) / statistics.median(a):.2f} |")


def discrepancy(trials: int = 100, length: int = 100_000) -> None:
    rng = np.random.default_rng(0)
    worst_prefix = worst_window = 0.0
    for t in range(trials):
        k = int(rng.integers(2, 9))
        w = np.maximum(rng.dirichlet(np.full(k, 0.5)), 0.001)
        w /= w.sum()
        plan, _ = build_plan(
            datareel.mix([(source(10, f"s{i}"), float(x)) for i, x in enumerate(w)]), seed=t, shuffle=False
        )
        ids, _ = plan.resolve(np.arange(length))
        onehot = np.zeros((length + 1, k), dtype=np.int64)
        onehot[np.arange(1, length + 1), ids] = 1
        counts = np.cumsum(onehot, axis=0)  # (length + 1, k)
        worst_prefix = max(worst_prefix, float(np.abs(counts - np.arange(length + 1)[:, None] * w).max()))
        worst_window = max(worst_window, float(np.abs(counts[1000:] - counts[:-1000] - 1000 * w).max()))
    print(f"\nover {trials} random weight sets (2-8 sources, weights >= 0.001), {length:,} positions each:")
    print(f"largest |count_k(P) - w_k P| over all prefixes: {worst_prefix:.3f} (bound 1.5 for up to 8 sources)")
    print(f"largest deviation in a window of 1,000 positions: {worst_window:.3f} (bound < 3)")


def many_sources(count: int = 100, repeats: int = 7) -> None:
    from unittest import mock

    from datareel.blend import build as build_module

    rng = np.random.default_rng(0)
    blend = datareel.mix(
        [(source(int(rng.integers(10**4, 10**6)), f"s{i}"), float(rng.uniform(0.1, 1))) for i in range(count)]
    )
    compiled, _ = build_plan(blend, seed=1, shuffle=True)
    with mock.patch.object(build_module, "_compiled", lambda node: node):
        tree, _ = build_plan(blend, seed=1, shuffle=True)
    single, _ = build_plan(source(10**6, "one"), seed=1, shuffle=True)
    plans = {f"{count}-source mix, compiled": compiled, f"{count}-source mix, node by node": tree, "single": single}
    print("\n| plan | M positions/s, calls of 2,048 | M positions/s, calls of 10^6 |")
    print("|---|---|---|")
    rates: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for label, plan in plans.items():
            for size, calls in ((2048, 200), (10**6, 1)):
                start = int(rng.integers(0, 10**9))
                t0 = time.perf_counter()
                for c in range(calls):
                    plan.resolve(np.arange(start + c * size, start + (c + 1) * size))
                rates.setdefault((label, size), []).append(size * calls / (time.perf_counter() - t0) / 1e6)
    for label in plans:
        cells = [
            f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" for v in (rates[label, 2048], rates[label, 10**6])
        ]
        print(f"| {label} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    timing()
    many_sources()
    discrepancy()
