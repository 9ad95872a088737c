"""The locality shuffle's read cost and shuffle quality, simulated from the plan (no data read), beside the
full shuffle in the same run; and the plan's resolve throughput, block order beside the full shuffle.

For each topology (W ranks, micro-batch m, G = 256 or m W when larger): requests per sample when a rank
fetches each block part (16 samples, cut at 1,000-sample shards) once, the same with 2 DataLoader workers
each fetching on its own, bytes read per byte used, distinct blocks per global batch / G, and the share of
positions whose block is the next position's or the next global batch's.  Then the same for mixes and for
windows of 1, 2 and 4 blocks.  Run: ``python benchmarks/bench_locality.py [--samples 1048576]``.
"""

from __future__ import annotations

import argparse

import numpy as np

import datareel
from _timing import measure, summary
from datareel.testing.locality import read_profile

TOPOLOGIES = [(1, 256), (2, 128), (4, 64), (8, 32), (8, 16), (16, 8), (128, 2)]


def row(name: str, data, W: int, m: int, shuffle, positions: int) -> str:
    G = max(256, W * m)
    L = datareel.Loader(data, global_batch_size=G, micro_batch_size=m, world_size=W, rank=0, shuffle=shuffle)
    r = read_profile(L, positions, shard_size=1000)
    w2 = read_profile(L, positions, shard_size=1000, per_worker=True, workers=2)
    return (
        f"| {name} | {W} × {m} (G {G}) | {r.requests_per_sample:.4f} | {w2.requests_per_sample:.4f} | "
        f"{r.read_per_used:.3f} | {r.blocks_per_batch:.3f} | {r.adjacent_same_block:.4f} | "
        f"{r.next_batch_same_block:.3f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1 << 20)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    n = args.samples
    data = datareel.from_sequence(np.arange(n), name="x")
    window = n // 2  # inside one epoch
    print(
        "| order | W × m | requests / sample | … with 2 workers apart | read / used | blocks / G | "
        "same block as p+1 | same block as p+G |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for W, m in TOPOLOGIES:
        print(row("full shuffle", data, W, m, True, window))
        print(row("BlockShuffle(16)", data, W, m, datareel.BlockShuffle(block=16), window))
    for w in (2, 4):
        print(row(f"BlockShuffle(16, window={w})", data, 8, 32, datareel.BlockShuffle(block=16, window=w), window))
    halves = [datareel.from_sequence(np.arange(n), name=f"s{i}") for i in range(4)]
    for weights in ((1, 1), (1, 1, 1, 1), (3, 7)):
        mixed = datareel.mix(list(zip(halves, weights)))
        label = f"BlockShuffle(16), mix {':'.join(map(str, weights))}"
        print(row(label, mixed, 8, 32, datareel.BlockShuffle(block=16), window))

    print("\nresolve throughput, 8 ranks × m 32, one rank's micro-batches (µs per micro-batch, median (min–max))")
    for name, shuffle in (("full shuffle", True), ("BlockShuffle(16)", datareel.BlockShuffle(block=16))):
        L = datareel.Loader(data, global_batch_size=256, micro_batch_size=32, world_size=8, rank=0, shuffle=shuffle)
        starts = np.random.default_rng(0).integers(0, n - 32, size=200)

        def resolve(L=L, starts=starts) -> None:
            for s in starts.tolist():
                L.plan.resolve(np.arange(s, s + 32))

        print(f"  {name}: {summary(measure(resolve, args.repeats), 1e6 / len(starts), '{:.1f}')}")


if __name__ == "__main__":
    main()
