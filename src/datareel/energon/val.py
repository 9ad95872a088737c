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

:class:`ValPlan` turns those batches into datareel descriptors (reel position = the sample's
index in the concatenated datasets, which keys its randomness) and makes them in a
``torch.utils.data.DataLoader`` over datareel's stateless batch maker, in that order.

A pass whose ``next()`` fails (a worker that died however it died, ``KeyboardInterrupt``, ...) is a
pass left early: the next ``for`` continues it after the last batch handed out, with fresh workers
(the DataLoader's sampler ran ahead of what was handed out, so the pass is replayed from its start
without making the batches handed out); a :class:`~datareel.BatchError` counts as handed out.  A
dead worker is reported by ``next()``, never in the loop's own code (as datareel's Loader does:
:class:`~datareel.execute.workers.WorkerDeaths`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from ..errors import BatchError
from ..execute.batch import BatchMaker
from ..execute.workers import (
    WORKER_DEATHS,
    WorkerOptions,
    dead_workers,
    end_with_this_process,
    lost_worker,
    start_iterator,
    stop_iterator,
)
from ..reel.base import Descriptor
from .passes import Batches, Passes

log = logging.getLogger("datareel")


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


class _Feed(Sampler[Descriptor]):
    """The DataLoader's sampler: the descriptors of the plan's current pass (its iterator holds no plan:
    the DataLoader that holds it is the plan's)."""

    def __init__(self, plan: ValPlan):
        super().__init__()
        self._plan = weakref.ref(plan)

    def __iter__(self) -> Iterator[Descriptor]:
        plan = self._plan()
        if plan is None or plan.passes is None:
            return iter(())
        return _descriptors(plan.slices, plan.passes, plan.skip)


def _descriptors(slices: list[WorkerSlice], passes: Passes, skip: int) -> Iterator[Descriptor]:
    """The pass's descriptors, but the first ``skip`` (handed out before the pass failed).  Lazy: torch's
    DataLoader makes an iterator of its sampler that it never reads."""
    for step, (worker, (start, stop)) in enumerate(passes):
        if step < skip:
            continue
        positions, sources, indices = slices[worker].arrays(start, stop)
        yield Descriptor(step, positions, sources, indices)


def _pending(inner: Any) -> bool:
    """Whether torch's DataLoader iterator has batches still to hand out (sent to workers, not yet returned)."""
    return bool(getattr(inner, "_rcvd_idx", 0) < getattr(inner, "_send_idx", 1))


class ValPlan:
    """One rank's Energon val batches, made by datareel's batch maker in worker processes."""

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
        self.passes: Passes | None = None  # the wrapped workers' streams over `bases` (given by iterate)
        self.skip = 0  # batches of the pass the sampler leaves out (handed out before the pass failed)
        self._failed: tuple[list[Any], int] | None = None  # the failed pass: (its start's marks, batches handed out)
        self._current: tuple[list[Any], int] | None = None  # the pass being iterated: (start's marks, handed out)
        self._dataloader: Any = None
        self._inner: Any = None  # a weak reference to the DataLoader iterator of the current pass

    def iterate(self, passes: Passes) -> Iterator[Any]:
        """One pass of ``passes`` (this rank's wrapped worker streams over :attr:`bases`): the batches,
        made by a DataLoader in the pass's order; after a pass failed, the rest of that pass."""
        self.passes = passes
        if self._failed is not None:
            start, handed = self._failed
            self._failed = None
            passes.seek(start)
        else:
            start, handed = passes.mark(), 0
        self.skip = handed
        self._current = (start, handed)
        inner: Any = None
        while True:
            try:
                if inner is None:
                    deaths = WORKER_DEATHS.deaths  # before the start: a worker dying in it is looked for here
                    inner = self._start()
                if deaths != WORKER_DEATHS.deaths:  # a worker died while the loop ran: ours?
                    deaths = WORKER_DEATHS.deaths
                    dead = dead_workers(inner)
                    if dead and _pending(inner):  # an idle worker at the pass's end costs nothing: it ends
                        raise RuntimeError(f"DataLoader worker process ended unexpectedly: {dead}")
                waiting = hasattr(inner, "_workers") and WORKER_DEATHS.wait()
                try:
                    batch = next(inner)
                finally:
                    WORKER_DEATHS.done(waiting)
            except StopIteration:
                self._current = None
                return
            except BaseException as exc:  # a worker died, an interrupt, a batch that failed: the pass goes on later
                failed = isinstance(exc, BatchError)  # a property of the batch: it counts as handed out
                handed += int(failed)
                self._failed, self._current = (start, handed), None
                lost = lost_worker(inner, exc) if hasattr(inner, "_workers") else None  # before the workers stop
                self._stop(inner, broken=True)
                report = exc if lost is None else lost  # a worker's death however torch surfaced it: one report
                note = (
                    f"datareel: this val pass ended ({type(report).__name__}); the next `for` over the loader "
                    f"continues this pass after the {handed} batches handed out"
                    + (" (the one that failed counts)" if failed else " (the batch being made is made again)")
                    + ", with fresh workers"
                )
                if hasattr(report, "add_note"):  # Python 3.11+
                    report.add_note(note)
                else:
                    log.error("%s", note)
                if lost is not None:
                    raise lost from exc
                raise
            handed += 1
            self._current = (start, handed)
            yield batch

    def position(self, passes: Passes) -> tuple[list[Any], int]:
        """Where this rank's pass over ``passes`` stands: its start's marks and the batches handed out since
        (:mod:`.val_state`)."""
        if self._current is not None:
            return self._current
        if self._failed is not None:
            return self._failed
        return passes.mark(), 0

    def continue_at(self, marks: list[Any], handed: int) -> None:
        """The next pass continues from ``marks``, leaving out the ``handed`` batches already handed out."""
        self._failed, self._current = (marks, handed), None

    def _start(self) -> Any:
        """The DataLoader's iterator for a pass (its workers reported as datareel's Loader's are)."""
        persistent = getattr(self._dataloader, "_iterator", None)  # torch's kept iterator (persistent_workers)
        if persistent is not None and dead_workers(persistent):  # a worker died between passes: fresh ones
            self._stop(persistent)
        if self._dataloader is None:
            self._dataloader = self.workers.dataloader(self.maker, _Feed(self), seed=self.seed)
            end_with_this_process(self._dataloader)  # workers end with this process, however it ends
        inner = start_iterator(self._dataloader)  # a worker dying in the start is reported by next()
        self._inner = weakref.ref(inner)
        return inner

    def _stop(self, inner: Any, *, broken: bool = False) -> None:
        """Forget the DataLoader and stop its workers (``broken``: killed with their work, its ``next()``
        failed): a persistent DataLoader would reuse broken ones."""
        stop_iterator(inner, broken=broken)
        self._dataloader = self._inner = None

    def close(self) -> None:
        """Stop the worker processes of the current pass now."""
        self._stop(self._inner() if self._inner is not None else None)
