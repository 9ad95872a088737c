"""Energon's val order: which samples each (rank, worker) reads, and the batches it makes of them.

``get_val_dataset`` reads in order, with no shuffle, and megatron.energon 7.4.1 shares the work
out like this (checked beside it in tests/energon/test_energon_val_loops.py):

- the ``W × max(N, 1)`` workers of all ranks split each dataset into one contiguous slice each,
  in (rank, worker) order; each gets ``floor(n / workers)`` samples and the ``n mod workers``
  extra ones go to the workers that a generalized bit-reversal order (:func:`spread`) puts first,
  that order starting after the worker the previous dataset's extras ended with (its rotation);
- a worker reads its slice of each dataset in turn and cuts what it reads into batches (the last
  one partial, unless ``batch_drop_last``);
- the rank's loader takes its workers' batches in turn (:class:`~.passes.Passes`).

:class:`ValRun` turns those batches into datareel descriptors (reel position = the sample's
index in the concatenated datasets, which keys its randomness), and datareel's own driver
(:class:`datareel.iteration.Driver`, the one a Loader drives its run with) makes them in a
``torch.utils.data.DataLoader`` over datareel's stateless batch maker, in that order.  So a val pass fails
and continues as a Loader's iteration does: a pass whose ``next()`` fails (a worker that died however it
died, ``KeyboardInterrupt``, ...) is a pass left early, and the next ``for`` continues it after the last
batch handed out, with fresh workers (the sampler ran ahead of what was handed out, so the pass is replayed
from its start without making the batches handed out); a :class:`~datareel.BatchError` counts as handed
out; a dead worker is reported by ``next()``, never in the loop's own code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..execute.batch import BatchMaker
from ..execute.workers import WorkerOptions
from ..iteration import Driver
from ..reel.base import Descriptor
from .passes import Batches, Passes


def spread(n: int) -> list[int]:
    """``range(n)`` in the order that spreads extra samples over workers (a bit reversal for powers of
    two): each half ordered the same way, then interleaved, the first half's first."""
    if n <= 2:
        return list(range(n))
    half = n // 2
    left, right = spread(half), [half + i for i in spread(n - half)]
    out = []
    for i in range(len(right)):  # right is never shorter
        if i < len(left):
            out.append(left[i])
        out.append(right[i])
    return out


def slice_counts(samples: int, workers: int, rotation: int) -> list[int]:
    """Samples of one dataset per global worker (rank-major), the extras rotated by ``rotation``."""
    least = int(samples / workers)  # Energon's rounding (a float quotient)
    extra = samples % workers
    counts = [least + (1 if (g - rotation) % workers < extra else 0) for g in range(workers)]
    out = [0] * workers
    for position, g in enumerate(spread(workers)):
        out[g] = counts[position]
    return out


class WorkerSlice:
    """One worker's samples: ``segments`` of ``(source_id, first_index, count, first_position)``."""

    def __init__(self, segments: list[tuple[int, int, int, int]]):
        self.segments = [s for s in segments if s[2] > 0]
        self.size = sum(s[2] for s in self.segments)

    def arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions int64[k], source_ids int32[k], indices int64[k]) of samples ``[start, stop)``."""
        positions, sources, indices = [], [], []
        offset = 0
        for source_id, first, count, position in self.segments:
            lo, hi = max(start - offset, 0), min(stop - offset, count)
            if lo < hi:
                positions.append(np.arange(position + lo, position + hi, dtype=np.int64))
                indices.append(np.arange(first + lo, first + hi, dtype=np.int64))
                sources.append(np.full(hi - lo, source_id, dtype=np.int32))
            offset += count
        return np.concatenate(positions), np.concatenate(sources), np.concatenate(indices)


def worker_slices(sizes: Sequence[int], world_size: int, rank: int, num_workers: int) -> list[WorkerSlice]:
    """This rank's workers' samples of the concatenated datasets of ``sizes``."""
    per_rank = max(num_workers, 1)
    workers = per_rank * world_size
    segments: list[list[tuple[int, int, int, int]]] = [[] for _ in range(per_rank)]
    before = 0
    for source_id, size in enumerate(sizes):
        counts = slice_counts(size, workers, before % workers)
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        for w in range(per_rank):
            g = rank * per_rank + w
            segments[w].append((source_id, starts[g], counts[g], before + starts[g]))
        before += size
    return [WorkerSlice(s) for s in segments]


@dataclass(frozen=True)
class ValCursor:
    """Where a val pass stands: the marks of its start (:meth:`~.passes.Passes.mark`) and the batches of it
    handed out; ``then``: the marks right after them, where one stream makes every batch of the rank."""

    marks: Any
    handed: int
    then: Any = None


class ValRun:
    """Energon's val order as a run that datareel's driver (:class:`datareel.iteration.Driver`) drives, as it
    drives a Loader's: this rank's descriptors of the current pass from :attr:`cursor`; the cursor after
    each, and at the pass's end the start of the next pass.  ``passes``: the rank's wrapped worker streams
    (shared by every run of one loader: a stream seeks first, so a sampler that ran ahead of what was handed
    out costs nothing).

    A pass goes on from its start's marks without the batches handed out; a pass the loop left (``break``)
    goes on from the streams' state instead, as Energon's does (:meth:`ValPlan.iterate`)."""

    reel = None  # nothing to close

    def __init__(self, slices: list[WorkerSlice], passes: Passes, cursor: ValCursor, seed: int):
        self.slices, self.passes, self.cursor, self.seed = slices, passes, cursor, seed

    def at(self, cursor: ValCursor) -> ValRun:
        return ValRun(self.slices, self.passes, cursor, self.seed)

    def check_sizes(self) -> None:
        """Nothing to check: each worker cuts its own slice into batches."""

    def stream(self, rank: int) -> Iterator[tuple[Descriptor | None, ValCursor]]:
        """The pass's descriptors after the ``handed`` ones, each with the cursor after it (:func:`_descriptors`)."""
        return _descriptors(self)

    def resume_note(self) -> str:
        return (
            f"the next `for` over the loader continues this pass after the {self.cursor.handed} batches handed "
            f"out (the batch being made is made again), with fresh workers"
        )


def _descriptors(run: ValRun) -> Iterator[tuple[Descriptor | None, ValCursor]]:
    """``run``'s descriptors from its cursor, each with the cursor after it, and at the end the next pass's
    start (lazy: torch makes a sampler iterator it never reads)."""
    passes, single = run.passes, len(run.passes.workers) == 1
    marks, handed = run.cursor.marks, run.cursor.handed
    passes.seek(marks)
    for step, (worker, (start, stop)) in enumerate(passes):
        if step >= handed:
            positions, sources, indices = run.slices[worker].arrays(start, stop)
            after = ValCursor(marks, step + 1, passes.mark() if single else None)
            yield Descriptor(step, positions, sources, indices), after
    yield None, ValCursor(passes.mark(), 0)  # the next pass starts where this one left the streams


class ValPlan:
    """One rank's Energon val batches, made by datareel's batch maker in worker processes, driven by datareel's
    driver (:class:`datareel.iteration.Driver`) over a :class:`ValRun`."""

    def __init__(
        self,
        maker: BatchMaker,
        sizes: Sequence[int],
        *,
        world_size: int,
        rank: int,
        num_workers: int,
        batch_size: int,
        drop_last: bool,
        prefetch_factor: int | None,
        seed: int,
    ):
        self.maker, self.seed, self.sizes = maker, seed, list(sizes)
        self.slices = worker_slices(sizes, world_size, rank, num_workers)
        self.bases = [Batches(s.size, batch_size, drop_last) for s in self.slices]
        self.workers = WorkerOptions(
            num_workers=num_workers,
            prefetch_factor=prefetch_factor if num_workers else None,
            persistent_workers=bool(num_workers),
        )
        self.driver: Driver | None = None  # made with the wrapped streams (the first pass)
        self.left = False  # the last pass was left by the loop (neither ended nor failed)

    def _driver(self, passes: Passes) -> Driver:
        if self.driver is None:
            run = ValRun(self.slices, passes, ValCursor(passes.mark(), 0), self.seed)
            self.driver = Driver(run, 0, self.workers, self.maker)  # the run is this rank's already
        return self.driver

    def iterate(self, passes: Passes) -> Iterator[Any]:
        """One pass of ``passes`` (this rank's wrapped worker streams over :attr:`bases`): after a pass that
        failed, the rest of it; after a pass the loop left (``break``, without worker processes: with them the
        facade keeps the pass), a new pass from where the one stream stands, as Energon starts one from its
        dataset's state (so a pass left right after its partial last batch goes on with a whole pass)."""
        driver = self._driver(passes)
        cursor = driver.run.cursor
        if self.left and cursor.then is not None:
            driver.restart(driver.run.at(ValCursor(cursor.then, 0)))
        self.left = True
        try:
            yield from driver.iterate()
        except GeneratorExit:  # the loop left the pass
            raise
        except BaseException:  # it failed: the next pass goes on from the batch after the last handed out
            self.left = False
            raise
        self.left = False

    def position(self, passes: Passes) -> tuple[Any, int]:
        """Where this rank's pass over ``passes`` stands: its start's marks and the batches handed out since
        (:mod:`.val_state`)."""
        cursor = self._driver(passes).run.cursor
        return cursor.marks, cursor.handed

    def continue_at(self, passes: Passes, marks: Any, handed: int) -> None:
        """The next pass continues from ``marks``, leaving out the ``handed`` batches already handed out."""
        driver = self._driver(passes)
        driver.restart(driver.run.at(ValCursor(marks, handed)))

    @property
    def _dataloader(self) -> Any:
        """The DataLoader of the passes (the driver's), for a look at its workers."""
        return self.driver.dataloader if self.driver is not None else None

    def close(self) -> None:
        """Stop the worker processes of the current pass now."""
        if self.driver is not None:
            self.driver.close()
