"""Iterating a run through a torch DataLoader: the :class:`Driver` a loader drives its runs with, and the
:class:`LoaderIterator` that hands batches out.

The driver owns the loader's current :class:`~datareel.run.Run`, its DataLoader (remade after a worker
failure) and its live iterators.  Each iterator starts from the current run: the driver puts that run and
the iterator's :class:`~datareel.reel.CursorQueue` in the sampler's :class:`~datareel.reel.sampler.RunFeed`
before the DataLoader starts the sampler.  Only a batch the iterator hands out moves the cursor: the
iterator takes that batch's cursor from its queue and the driver's run becomes the run at it, so
prefetched batches never count; after a restore (:meth:`Driver.restart`) they are simply made again.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from .errors import BatchError, DatareelError
from .execute.encoder import positions_tensor
from .execute.workers import (
    WORKER_DEATHS,
    WorkerOptions,
    dead_workers,
    end_with_this_process,
    lost_work,
    lost_worker,
    start_iterator,
    stop_iterator,
)
from .reel import Cursor, CursorQueue
from .reel.sampler import DescriptorSampler, RunFeed
from .run import Run

log = logging.getLogger("datareel")


class Driver:
    """A loader's current run, the DataLoader that executes it on ``rank``, and the iterators over it.

    ``maker`` is the picklable batch maker workers run; ``workers`` the DataLoader's options.  The run
    changes only here: :meth:`advance` (an iterator handed a batch out), :meth:`restart` (a restore).
    The run is a :class:`~datareel.run.Run`, or any value with its face here (``cursor``, ``stream(rank)``,
    ``at(cursor)``, ``check_sizes()``, ``seed``, ``reel``, ``resume_note()``): ``datareel.energon``'s val order
    is driven by this driver too (:class:`datareel.energon.val.ValRun`).
    """

    def __init__(self, run: Run, rank: int, workers: WorkerOptions, maker: Any):
        self.run, self.rank, self.workers, self.maker = run, rank, workers, maker
        self.feed = RunFeed()  # where each iteration starts, read by the sampler
        self.generation = 0  # bumped by each iter(), restore and close: older iterators refuse
        self.iterators: weakref.WeakSet[LoaderIterator] = weakref.WeakSet()  # live ones: close() stops their workers
        self.dataloader: DataLoader[Any] | None = None

    def iterate(self) -> LoaderIterator:
        """A new iterator from the current run (older ones stop working)."""
        self.run.check_sizes()  # before any data moves: every batch ahead is whole micro-steps
        self.generation += 1
        self._retire()
        return LoaderIterator(self, self.generation)

    def advance(self, cursor: Cursor) -> None:
        """A batch was handed out (or a finite pass ended): the run continues at ``cursor``."""
        self.run = self.run.at(cursor)

    def restart(self, run: Run) -> None:
        """Continue from ``run`` (a restored state); iterators made before stop working."""
        self.generation += 1
        self.run = run
        self._retire()

    def _retire(self) -> None:
        """Stop the worker processes of the iterators that now refuse (made before a restore or a newer
        ``iter()``) at once, not whenever the garbage collector finds them: one left in a reference cycle
        stalled the collection that found it by torch's 5-s join per worker (its queues are finalized first,
        so its workers never hear the stop).  Persistent workers (torch's kept iterator) serve the next
        iteration and stay."""
        kept = getattr(self.dataloader, "_iterator", None)
        for iterator in list(self.iterators):
            if iterator.generation != self.generation and iterator.inner is not kept:
                iterator.stop_workers()

    def start(self, queue: CursorQueue) -> Any:
        """The DataLoader iterator of a new iteration from the current run, its cursors going to ``queue``."""
        self.feed.start(self.run, queue)  # read by the sampler when the DataLoader starts it
        try:
            dataloader = self._dataloader()
            end_with_this_process(dataloader)  # workers started now end with this process, however it ends
            return start_iterator(dataloader)  # a worker dying now is reported by the first next(), not by iter()
        except BaseException:  # e.g. persistent workers that did not resume: the next iter() starts fresh ones
            self.dataloader = None
            raise

    def _dataloader(self) -> DataLoader[Any]:
        persistent = getattr(self.dataloader, "_iterator", None)  # torch's kept iterator (persistent_workers)
        if persistent is not None and dead_workers(persistent):  # a worker died between iterations
            stop_iterator(persistent)
            self.dataloader = None
        if self.dataloader is None:
            sampler = DescriptorSampler(self.feed, self.rank)
            self.dataloader = self.workers.dataloader(self.maker, sampler, seed=self.run.seed)
        return self.dataloader

    def discard_workers(self) -> None:
        """Forget the DataLoader after a worker failure: the next ``iter()`` starts new workers (a
        persistent DataLoader would otherwise reuse the broken ones), and older iterators refuse."""
        self.generation += 1
        self.dataloader = None

    def close(self) -> None:
        """Stop worker processes (those of live iterators too, and a persistent DataLoader's kept ones) and a
        planning process."""
        kept = getattr(self.dataloader, "_iterator", None)
        self.discard_workers()
        for iterator in list(self.iterators):
            iterator.stop_workers()
        stop_iterator(kept)
        getattr(self.run.reel, "close", lambda: None)()


def answer_from_run(name: str, doc: str | None = None) -> Any:
    """For a class that holds its :class:`Driver` as ``_driver`` (the Loader): the current run's ``name``, as a
    read-only property, or as a method where the run's is one; documented as :class:`~datareel.run.Run` does."""
    answer = getattr(Run, name, None)
    if callable(answer):
        return functools.wraps(answer)(lambda self, *args, **kwargs: getattr(self._driver.run, name)(*args, **kwargs))
    return property(lambda self: getattr(self._driver.run, name), doc=doc or answer.__doc__)


class LoaderIterator:
    """One pass over the loader from its cursor at creation; moves the cursor on each hand-out.

    Only a batch returned by :meth:`__next__` counts.  Anything else that ends a ``next()`` (a worker that
    died, however: killed, ``os._exit``, a crash; torch's ``timeout``; ``KeyboardInterrupt``; a failing
    reel) leaves the cursor where it was and ends this iterator (the DataLoader may have consumed a
    descriptor it never returned): a new ``iter(loader)`` makes that micro-batch again.  A worker's death
    is reported inside ``next()`` only (:class:`~datareel.execute.workers.WorkerDeaths`), never in the
    training step, where torch's signal handler would raise it after the batch was handed out.
    """

    def __init__(self, driver: Driver, generation: int):
        self.driver, self.generation = driver, generation
        self.queue = CursorQueue()  # the cursors of the batches this iterator has not handed out yet
        self.deaths = WORKER_DEATHS.deaths  # before the start: a worker that dies in it is looked for in next()
        self.inner = driver.start(self.queue)
        self.workers = hasattr(self.inner, "_workers")  # torch's multi-process iterator
        driver.iterators.add(self)
        # An iterator dropped inside a reference cycle: the collector finalizes torch's queues before torch's
        # iterator can tell its workers to stop, and each worker then cost a 5-s join and a SIGTERM.  This
        # finalizer holds torch's iterator out of the cycle and stops its workers while its queues still work.
        # Persistent workers (torch's kept iterator) serve the next iteration and are not stopped here.
        self._finalizer: weakref.finalize[Any, Any] | None = None
        if self.workers and self.inner is not getattr(driver.dataloader, "_iterator", None):
            self._finalizer = weakref.finalize(self, stop_iterator, self.inner)
            self._finalizer.atexit = False  # at exit torch's own hooks stop them

    def __iter__(self) -> LoaderIterator:
        return self

    def stop_workers(self, *, broken: bool = False) -> None:
        """Stop this iterator's worker processes now, not whenever the garbage collector finds it (a
        process forked meanwhile would inherit the iterator and complain when it collects it); ``broken``:
        its ``next()`` failed, and its workers are killed with their work (:func:`stop_iterator`)."""
        stop_iterator(self.inner, broken=broken)
        if self._finalizer is not None:
            self._finalizer.detach()
        self.inner = iter(())

    def __next__(self) -> Any:
        driver = self.driver
        if driver.generation != self.generation:
            raise DatareelError(
                "this iterator was made before load_state_dict(), close() or a newer iter(loader); "
                "call iter(loader) again to continue from the loader's cursor"
            )
        try:
            if self.deaths != WORKER_DEATHS.deaths:  # a worker died while the training loop ran: ours?
                self.deaths = WORKER_DEATHS.deaths
                dead = lost_work(self.inner)  # a worker that ended idle at a pass's end costs nothing
                if dead:
                    raise RuntimeError(f"DataLoader worker process ended unexpectedly: {dead}")
            waiting = self.workers and WORKER_DEATHS.wait()
            try:
                batch = next(self.inner)
            finally:
                WORKER_DEATHS.done(waiting)
        except StopIteration:
            if self.queue.end is not None:  # a finite pass ended: every rank ends at the same cursor
                driver.advance(self.queue.end)
            raise
        except BatchError:  # this micro-batch failed in the making: it counts as consumed (a caller going on skips it)
            driver.advance(self.queue.take())
            raise
        except BaseException as exc:  # a worker died or timed out, an interrupt, ...: the DataLoader is broken
            lost = lost_worker(self.inner, exc) if self.workers else None  # before the workers are stopped
            driver.discard_workers()
            self.stop_workers(broken=True)
            if lost is not None:  # a worker's death however torch surfaced it: always the same report
                self._report(lost)
                raise lost from exc
            self._report(exc)
            raise
        if isinstance(batch, dict) and isinstance(batch.get("__positions__"), np.ndarray):
            batch["__positions__"] = positions_tensor(batch["__positions__"])
        driver.advance(self.queue.take())
        return batch

    def _report(self, exc: BaseException) -> None:
        """Tell the training loop, on the exception that ended this iterator, how to continue."""
        note = (
            f"datareel: this iterator ended ({type(exc).__name__}) and the loader dropped its worker processes; "
            f"the micro-batch it was making does not count as consumed: {self.driver.run.resume_note()}"
        )
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(note)
        else:
            log.error("%s", note)
