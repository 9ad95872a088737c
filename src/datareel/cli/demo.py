"""``datareel demo``: checkpoint on 4 ranks × 2 workers, resume on 3 × 1 and 2 × 0.

The demo writes a small token dataset as WebDataset shards and prepares it (into a temporary directory, or
``keep``'s, which then also holds the checkpoint, for the operating commands), runs an
uninterrupted single-rank reference, then a 4-rank job that checkpoints, and
resumes that checkpoint on two other topologies.  Every global batch (positions,
keys, tokens and per-sample augmentation) must equal the reference's, and every
sample must appear exactly once per epoch.  Exit status 0 only if all holds.

Ranks are simulated in one process by default; ``--distributed`` runs each
phase as real processes joined by torch.distributed (gloo on 127.0.0.1),
checkpointing with ``save_state_global`` and restoring with
``restore_state_global``.

Each phase is announced on stderr as it starts and when it ends (with its time): the distributed
demo starts real processes for each phase and takes a minute or more; ``--quiet`` drops these lines.

The demo's data and encoder are in :mod:`.demo_data`, its table and verdict in :mod:`.demo_report`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..blend import open_dataset
from ..loader import Loader
from ..sources.base import Source
from ..sources.sequence import from_sequence
from ..testing.simulate import make_ranks, take_global_batches, unbatch
from .demo_data import NoisyEncoder, TokenFile, write_dataset, write_shards
from .demo_report import keep_directory, kept, report

__all__ = [
    "DEMO_PHASES",
    "Job",
    "NoisyEncoder",
    "Phase",
    "TokenFile",
    "assemble",
    "demo_source",
    "job_loaders",
    "report",
    "run_demo",
    "run_phase_distributed",
    "run_phase_local",
    "run_scenario",
    "write_dataset",
    "write_shards",
]


@dataclass(frozen=True, kw_only=True)
class Phase:
    """One job of the scenario: a topology and how many global batches it consumes."""

    world_size: int
    num_workers: int
    micro_batch_size: int
    batches: int
    restore: str = "src0"  # distributed restore: "src0" broadcasts rank 0's state, "every" has each rank pass it

    @property
    def label(self) -> str:
        return f"{self.world_size} ranks × {self.num_workers} workers"


@dataclass(frozen=True, kw_only=True)
class Job:
    """Everything a (possibly remote) rank needs to run one phase."""

    data: str
    seed: int
    global_batch_size: int
    phase: Phase
    state_in: str | None
    out_dir: str


def demo_source(data: str) -> Source:
    """The dataset at ``data``: a prepared directory of shards (:func:`write_shards`), or a ``.npy`` token file
    (:func:`write_dataset`)."""
    if Path(data).is_dir():
        return open_dataset(data)
    return from_sequence(TokenFile(data), name="demo-tokens")


def job_loaders(job: Job, *, distributed: bool = False) -> list[Loader]:
    """A job's loaders: one per simulated rank, or (distributed) this process's only one."""
    dataset = demo_source(job.data)
    common = dict(
        global_batch_size=job.global_batch_size,
        seed=job.seed,
        task_encoder=NoisyEncoder(),
        num_workers=job.phase.num_workers,
        micro_batch_size=job.phase.micro_batch_size,
    )
    if distributed:
        return [Loader(dataset, **common)]
    return make_ranks(dataset, world_size=job.phase.world_size, **common)


def run_phase_local(job: Job) -> tuple[list[list[Any]], str | None]:
    """Run a phase with ranks simulated in this process. -> (global batches, saved state JSON)."""
    ranks = job_loaders(job)
    if job.state_in:
        state = json.loads(Path(job.state_in).read_text())
        for loader in ranks:
            loader.load_state_dict(state)
    batches = take_global_batches(ranks, job.phase.batches)
    states = {json.dumps(loader.state_dict(), sort_keys=True) for loader in ranks}
    for loader in ranks:
        loader.close()
    return batches, (states.pop() if len(states) == 1 else None)


def _rank_main(rank: int, world_size: int, job: Job) -> None:
    """One real rank of a distributed phase: restore, consume, save globally, write records."""
    (loader,) = job_loaders(job, distributed=True)
    if job.state_in:
        if job.phase.restore == "every":
            loader.restore_state_global(json.loads(Path(job.state_in).read_text()), src_rank=None)
        else:
            state = json.loads(Path(job.state_in).read_text()) if rank == 0 else None
            loader.restore_state_global(state, src_rank=0)
    it = iter(loader)
    steps = [unbatch(next(it)) for _ in range(job.phase.batches * loader.accumulation_steps)]
    state = loader.save_state_global(dst_rank=0)
    loader.close()
    _write_atomic(Path(job.out_dir) / f"rank{rank}.json", json.dumps(steps))
    if rank == 0:
        _write_atomic(Path(job.out_dir) / "state.json", json.dumps(state, sort_keys=True))


def run_phase_distributed(job: Job, timeout: float = 300.0) -> tuple[list[list[Any]], str | None]:
    """Run a phase as ``world_size`` real processes. -> (global batches, saved state JSON)."""
    from ..testing.launch import run_local

    os.makedirs(job.out_dir, exist_ok=True)
    run_local(_rank_main, job.phase.world_size, job, timeout=timeout)
    per_rank = [json.loads((Path(job.out_dir) / f"rank{r}.json").read_text()) for r in range(job.phase.world_size)]
    return assemble(per_rank, job.phase.batches), (Path(job.out_dir) / "state.json").read_text()


def assemble(per_rank: list[list[list[Any]]], batches: int) -> list[list[Any]]:
    """Global batches from each rank's micro-steps: batch b = steps b·A .. b·A+A-1, ranks in order."""
    steps = len(per_rank[0]) // batches
    return [
        [record for a in range(b * steps, (b + 1) * steps) for rank in per_rank for record in rank[a]]
        for b in range(batches)
    ]


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


DEMO_PHASES = (
    Phase(world_size=4, num_workers=2, micro_batch_size=2, batches=5),
    Phase(world_size=3, num_workers=1, micro_batch_size=2, batches=7, restore="src0"),
    Phase(world_size=2, num_workers=0, micro_batch_size=3, batches=7, restore="every"),
)


def run_scenario(
    data: Path,
    phases: tuple[Phase, ...],
    *,
    seed: int,
    global_batch_size: int,
    work: Path,
    runner: Callable[[Job], tuple[list[list[Any]], str | None]],
    note: Callable[[str], Any] | None = None,
    where: str = "ranks simulated in this process",
) -> tuple[list[list[Any]], list[tuple[Phase, int, list[list[Any]]]], str | None]:
    """Phase 0 runs from the start and checkpoints; every later phase resumes that checkpoint. ``note``
    is told each phase as it starts and when it ends (``where`` says how the ranks run).

    -> (reference global batches, [(phase, first global batch, its global batches)], checkpoint JSON)
    """
    first, rest = phases[0], phases[1:]
    total = first.batches + max(p.batches for p in rest)
    count = len(phases) + 1

    def timed(n: int, what: str, run: Callable[[], Any]) -> Any:
        if note is None:
            return run()
        note(f"[{n}/{count}] {what} ...")
        start = time.monotonic()
        result = run()
        note(f"[{n}/{count}] done in {time.monotonic() - start:.1f} s")
        return result

    ref_job = Job(
        data=str(data),
        seed=seed,
        global_batch_size=global_batch_size,
        state_in=None,
        out_dir=str(work / "reference"),
        phase=Phase(world_size=1, num_workers=0, micro_batch_size=global_batch_size, batches=total),
    )
    reference, _ = timed(
        1, f"uninterrupted reference on 1 rank: global batches 0-{total - 1}", lambda: run_phase_local(ref_job)
    )
    job = Job(
        data=str(data),
        seed=seed,
        global_batch_size=global_batch_size,
        phase=first,
        state_in=None,
        out_dir=str(work / "phase0"),
    )
    what = f"{first.label} ({where}): global batches 0-{first.batches - 1}, then checkpoint"
    batches, state = timed(2, what, lambda: runner(job))
    results = [(first, 0, batches)]
    if state is None:
        return reference, results, None
    state_path = work / "checkpoint.json"
    state_path.write_text(state)
    for i, phase in enumerate(rest, start=1):
        job = Job(
            data=str(data),
            seed=seed,
            global_batch_size=global_batch_size,
            phase=phase,
            state_in=str(state_path),
            out_dir=str(work / f"phase{i}"),
        )
        span = f"{first.batches}-{first.batches + phase.batches - 1}"
        what = f"resume on {phase.label} ({where}): global batches {span}"
        results.append((phase, first.batches, timed(i + 2, what, lambda job=job: runner(job))[0]))
    return reference, results, state


def run_demo(
    *,
    samples: int = 100,
    global_batch_size: int = 24,
    seed: int = 1234,
    distributed: bool = False,
    out: Callable[[str], Any] = print,
    progress: bool = False,
    keep: Path | str | None = None,
) -> bool:
    """Run the scenario; print a table and a verdict; return whether everything matched. ``progress``:
    each phase announced on stderr as it starts and ends. ``keep``: a new or empty directory (else
    :class:`~datareel.errors.OptionError`) that keeps the dataset and the checkpoint, and the commands to try
    on them are printed."""
    kept_in = None if keep is None else keep_directory(Path(keep))
    with tempfile.TemporaryDirectory(prefix="datareel-demo-") as tmp:
        work = Path(tmp)
        data = write_shards((kept_in or work) / "dataset", samples, seed=seed)
        runner = run_phase_distributed if distributed else run_phase_local
        reference, results, state = run_scenario(
            data,
            DEMO_PHASES,
            seed=seed,
            global_batch_size=global_batch_size,
            work=work,
            runner=runner,
            note=_to_stderr if progress else None,
            where="real processes, gloo" if distributed else "ranks simulated in this process",
        )
    passed = report(
        reference,
        results,
        state,
        samples=samples,
        global_batch_size=global_batch_size,
        mode="real processes, gloo on 127.0.0.1" if distributed else "ranks simulated in one process",
        out=out,
        phases=len(DEMO_PHASES),
    )
    if kept_in is not None:
        if state is not None:
            _write_atomic(kept_in / "checkpoint.json", state)
        out(kept(kept_in, data, state, DEMO_PHASES, samples=samples, global_batch_size=global_batch_size))
    return passed


def _to_stderr(line: str) -> None:
    sys.stderr.write(f"datareel demo: {line}\n")
    sys.stderr.flush()
