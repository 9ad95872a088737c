"""Small timing helpers shared by the benchmarks (not used by tests)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def measure(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn`` (after one warm-up call)."""
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def summary(values: list[float], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """'median (min–max)' of ``values × scale``."""
    v = sorted(x * scale for x in values)
    return f"{fmt.format(statistics.median(v))} ({fmt.format(v[0])}–{fmt.format(v[-1])})"


def process_tree_cpu() -> float:
    """CPU seconds (user + system) of this process and all its children so far (DataLoader workers too)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for p in me.children(recursive=True):
        try:
            total += sum(p.cpu_times()[:2])
        except psutil.Error:
            pass
    return total
