"""``datareel demo``: checkpoint on 4 ranks × 2 workers, resume on 3 × 1 and 2 × 0.

The demo writes a small token dataset into a temporary directory, runs an
uninterrupted single-rank reference, then a 4-rank job that checkpoints, and
resumes that checkpoint on two other topologies.  Every global batch (positions,
keys, tokens and per-sample augmentation) must equal the reference's, and every
sample must appear exactly once per epoch.  Exit status 0 only if all holds.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .loader import Loader
from .sample import sample_rng
from .simulate import make_ranks, take_global_batches
from .sources.sequence import from_sequence


class TokenFile:
    """Rows of a ``.npy`` token matrix as dict samples; memory-mapped lazily in each worker."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._rows: np.ndarray | None = None
        self._len = int(np.load(self.path, mmap_mode="r").shape[0])

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._rows is None:
            self._rows = np.load(self.path, mmap_mode="r")
        return {"__key__": f"doc-{i:05d}", "id": i, "tokens": np.array(self._rows[i])}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_rows": None}


class NoisyEncoder:
    """A task encoder whose augmentation draws from the per-sample RNG."""

    def encode_sample(self, sample: dict[str, Any]) -> dict[str, Any]:
        sample["noise"] = int(sample_rng().integers(0, 1_000_000))
        return sample


@dataclass(frozen=True, kw_only=True)
class Run:
    label: str
    world_size: int
    num_workers: int
    micro_batch_size: int
    first: int
    batches: list[list[Any]]
    ok: bool | None = None


def write_dataset(directory: Path, samples: int, seq_len: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    path = directory / "tokens.npy"
    np.save(path, rng.integers(0, 32_000, size=(samples, seq_len), dtype=np.int32))
    return path


def run_demo(
    *, samples: int = 100, global_batch_size: int = 24, total: int = 12, checkpoint_at: int = 5,
    seed: int = 1234, out: Any = print,
) -> bool:
    """Run the scenario; print a table and a verdict; return whether everything matched."""
    with tempfile.TemporaryDirectory(prefix="datareel-demo-") as tmp:
        dataset = from_sequence(TokenFile(write_dataset(Path(tmp), samples, 16, seed)), name="demo-tokens")
        common = dict(global_batch_size=global_batch_size, seed=seed, task_encoder=NoisyEncoder())
        reference = take_global_batches(make_ranks(dataset, world_size=1, micro_batch_size=4, **common), total)

        first = make_ranks(dataset, world_size=4, num_workers=2, micro_batch_size=2, **common)
        saved = take_global_batches(first, checkpoint_at)
        states = [json.dumps(loader.state_dict(), sort_keys=True) for loader in first]
        for loader in first:
            loader.close()
        runs = [Run(label="4 ranks × 2 workers, then checkpoint", world_size=4, num_workers=2,
                    micro_batch_size=2, first=0, batches=saved)]
        for world_size, workers, micro in ((3, 1, 2), (2, 0, 3)):
            ranks: list[Loader] = make_ranks(dataset, world_size=world_size, num_workers=workers,
                                             micro_batch_size=micro, **common)
            for loader in ranks:
                loader.load_state_dict(json.loads(states[0]))
            runs.append(Run(label=f"resume on {world_size} ranks × {workers} workers", world_size=world_size,
                            num_workers=workers, micro_batch_size=micro, first=checkpoint_at,
                            batches=take_global_batches(ranks, total - checkpoint_at)))
            for loader in ranks:
                loader.close()

    checks = [_compare(run, reference) for run in runs]
    same_state = len(set(states)) == 1
    once = _exactly_once_per_epoch(reference, samples)
    out(f"datareel demo: {samples} samples, global batch {global_batch_size}, {total} global batches "
        f"(= {total * global_batch_size / samples:.2f} epochs), checkpoint after global batch {checkpoint_at - 1}\n")
    out(f"{'run':<40}{'micro':>6}{'accum':>6}  {'global batches':<15}{'result'}")
    out(f"{'uninterrupted reference (1 rank)':<40}{4:>6}{global_batch_size // 4:>6}  {'0-' + str(total - 1):<15}reference")
    for run, ok in zip(runs, checks):
        accum = global_batch_size // (run.micro_batch_size * run.world_size)
        span = f"{run.first}-{run.first + len(run.batches) - 1}"
        out(f"{run.label:<40}{run.micro_batch_size:>6}{accum:>6}  {span:<15}{'identical' if ok else 'DIFFERENT'}")
    out(f"\ncheckpoint: {len(states[0])} bytes of JSON, identical on all 4 ranks: {'yes' if same_state else 'NO'}")
    out(f"every sample exactly once per epoch in the reference: {'yes' if once else 'NO'}")
    passed = all(checks) and same_state and once
    out("\nPASS: every global batch after the restore equals the uninterrupted run's" if passed
        else "\nFAIL: the resumed runs differ from the uninterrupted run")
    return passed


def _compare(run: Run, reference: list[list[Any]]) -> bool:
    expected = reference[run.first : run.first + len(run.batches)]
    return len(run.batches) == len(expected) and run.batches == expected


def _exactly_once_per_epoch(batches: list[list[Any]], samples: int) -> bool:
    ids = [record["id"] for batch in batches for record in batch]
    for start in range(0, len(ids), samples):
        epoch = ids[start : start + samples]
        if len(set(epoch)) != len(epoch) or (len(epoch) == samples and sorted(epoch) != list(range(samples))):
            return False
    return True
