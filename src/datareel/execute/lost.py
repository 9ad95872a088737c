"""A DataLoader iterator that lost a worker: how the training process finds the death while it waits for a batch
(:class:`GuardedResults`), how it reports it (:func:`lost_worker`), and how it stops the rest of the iterator's
workers (:func:`stop_iterator`), without ever taking a lock a dead worker may hold.

A worker killed at an arbitrary instruction may die holding a lock it shares with the training process: the
stop event's (each worker takes it for every index it receives) or the result queue's write lock.  A
``multiprocessing`` lock is a bare semaphore: nobody ever releases it.  torch's own handling took the stop event's
lock twice after a death (its check marks the dead worker unavailable, its shutdown sets the event) and then
waited for ever: now and then a killed worker hung the training process (CI, 60 s and 120 s).
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import queue
import threading
import time
import weakref
from typing import Any

from torch.utils.data._utils import signal_handling

from ..errors import DatareelError, WorkerLost
from .deaths import WORKER_DEATHS, dead_workers

LOST_WORKER_WAIT = 1.0
"""Seconds :func:`lost_worker` waits for a worker to finish ending after a broken connection to it."""

DEATH_CHECK_SECONDS = 0.05
"""How long :class:`GuardedResults` waits for a batch at a time before it looks for a dead worker."""

STOP_WAIT = 5.0
"""Seconds :func:`stop_iterator` waits for each killed worker's exit."""


class Reported:
    """In place of a DataLoader iterator that could not start because a worker died (a persistent one, while
    torch resumed it): its first ``next()`` raises ``error``, where a worker's death is always reported, never
    by ``iter()``."""

    def __init__(self, error: BaseException):
        self.error = error

    def __iter__(self) -> Reported:
        return self

    def __next__(self) -> Any:
        raise self.error


def lost_worker(iterator: Any, exc: BaseException) -> RuntimeError | None:
    """The report of a lost worker for what a multi-process DataLoader iterator's ``next()`` raised, where
    ``exc`` does not say it in those words: :class:`WorkerLost`; the worker that made a batch died after
    sending it, and reading the batch's tensors (their memory comes through a socket to that worker) failed
    with a bare ``ConnectionResetError`` or ``EOFError``; or another exception came while a worker lay dead.
    ``None`` where ``exc`` is datareel's own, torch's report already (it names "DataLoader worker"), an
    interrupt, or no worker has ended.

    A broken connection waits up to :data:`LOST_WORKER_WAIT` seconds for the dying worker's exit status: its
    sockets and its sentinel close a moment before the kernel lets its parent reap it."""
    if isinstance(exc, WorkerLost):
        return RuntimeError(str(exc))
    if not isinstance(exc, Exception) or isinstance(exc, DatareelError) or "DataLoader worker" in str(exc):
        return None
    dead = dead_workers(iterator)
    if not dead and isinstance(exc, (OSError, EOFError)) and not getattr(iterator, "_shutdown", True):
        sentinels = [w.sentinel for w in getattr(iterator, "_workers", []) if hasattr(w, "sentinel")]
        deadline = time.monotonic() + LOST_WORKER_WAIT
        if sentinels and multiprocessing.connection.wait(sentinels, timeout=LOST_WORKER_WAIT):  # one has ended
            while not dead and time.monotonic() < deadline:
                time.sleep(0.001)
                dead = dead_workers(iterator)
    if not dead:
        return None
    return RuntimeError(f"DataLoader worker process ended unexpectedly: {dead} ({type(exc).__name__}: {exc})")


def guard_result_queue(iterator: Any) -> None:
    """Read a multi-process DataLoader iterator's results (torch's ``_data_queue``: the workers' result queue,
    or the pin-memory thread's) through :class:`GuardedResults`, once per iterator."""
    results = getattr(iterator, "_data_queue", None)
    if results is None or isinstance(results, GuardedResults) or not hasattr(iterator, "_workers"):
        return
    iterator._data_queue = GuardedResults(results, iterator)


class GuardedResults:
    """torch's result queue, whose ``get`` raises :class:`WorkerLost` for a worker that died, at a point where
    the training process holds no lock, before torch's own check (which would take the stop event's lock).

    datareel's ``SIGCHLD`` handler raises nothing for its own workers (:class:`.deaths.WorkerDeaths`: torch's
    raised inside a queue's ``put`` or ``get`` left the queue's lock held, and stopping the workers hung).  A
    worker that dies while the training process waits for a batch is found here instead: ``get`` waits
    :data:`DEATH_CHECK_SECONDS` at a time, and looks at the workers when a ``SIGCHLD`` came meanwhile and before
    it gives up (torch's 5-s check, its ``timeout``).

    And a batch lost with its worker: a batch's tensors cross through a socket to the worker that made them;
    a worker that died after sending one made ``get`` fail with a bare ``ConnectionResetError`` or
    ``EOFError`` a moment before its exit status was visible.  Here ``get`` waits for the dead worker
    (:func:`lost_worker`) and reports it."""

    def __init__(self, results: Any, iterator: Any):
        self._queue, self._iterator = results, weakref.ref(iterator)
        self._deaths = WORKER_DEATHS.deaths

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not block:
            return self._get(block=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = DEATH_CHECK_SECONDS if deadline is None else deadline - time.monotonic()
            last = deadline is not None and left <= DEATH_CHECK_SECONDS
            try:
                return self._get(timeout=max(0.0, min(DEATH_CHECK_SECONDS, left)))
            except queue.Empty:
                if last:  # before torch's own check: a death the count did not show (the next read looks first)
                    self._raise_if_a_worker_died(look=True)
                    raise

    def _get(self, **kwargs: Any) -> Any:
        """One read.  A worker killed halfway through writing a batch leaves the read blocked for ever (the
        rest never comes, and the pipe never closes): a death signalled during the read raises out of it
        (:class:`.deaths.WorkerDeaths`), and one signalled before it is looked for here first."""
        main = threading.current_thread() is threading.main_thread()
        if main:
            WORKER_DEATHS.reading = self
        try:
            self._raise_if_a_worker_died(look=False)
            return self._queue.get(**kwargs)
        except (OSError, EOFError) as exc:
            iterator = self._iterator()
            lost = lost_worker(iterator, exc) if iterator is not None else None
            if lost is None:
                raise
            raise WorkerLost(str(lost)) from exc
        finally:
            if main:
                WORKER_DEATHS.reading = None

    def lost(self) -> str:
        """A dead worker of this reader's iterator, in words (``""``: none)."""
        iterator = self._iterator()
        dead = dead_workers(iterator) if iterator is not None else ""
        return f"DataLoader worker process ended unexpectedly: {dead}" if dead else ""

    def _raise_if_a_worker_died(self, *, look: bool) -> None:
        if self._deaths == WORKER_DEATHS.deaths and not look:  # no child has ended since the last look
            return
        self._deaths = WORKER_DEATHS.deaths
        lost = self.lost()
        if lost:
            raise WorkerLost(lost)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def stop_iterator(inner: Any, *, broken: bool = False) -> None:
    """Stop a torch DataLoader iterator's worker processes now (nothing for a single-process iterator or one
    already stopped).  Where every worker lives and the iterator is not ``broken``, torch's own shutdown: each
    is told to stop and its exit awaited.  Where one has died, nothing the workers share is touched (a lock the
    dead one held stays held for ever): the iterator is marked shut down, its workers leave torch's
    ``SIGCHLD`` registry, the live ones are killed and reaped, and its queues are closed.  So too for a
    ``broken`` iterator (its ``next()`` failed: a timeout, an interrupt), whose workers are thrown away with
    their work: torch's shutdown waited up to 5 s for a worker still busy with the batch that timed out."""
    shutdown = getattr(inner, "_shutdown_workers", None)
    if shutdown is None or getattr(inner, "_shutdown", True):
        return
    workers = getattr(inner, "_workers", [])
    if not broken and all(w.is_alive() for w in workers):
        with contextlib.suppress(Exception):
            shutdown()
        return
    inner._shutdown = True  # torch's shutdown (its __del__ too) does nothing more
    try:
        if getattr(inner, "_worker_pids_set", False):
            inner._worker_pids_set = False
            with contextlib.suppress(Exception):
                signal_handling._remove_worker_pids(id(inner))
        pinning = getattr(inner, "_pin_memory_thread_done_event", None)  # a threading.Event of this process
        if pinning is not None:
            pinning.set()  # the pin-memory thread ends within torch's 5-s poll; it is a daemon thread
        for w in workers:
            if w.is_alive():
                w.kill()
        for w in workers:
            w.join(timeout=STOP_WAIT)
    finally:
        for q in [*getattr(inner, "_index_queues", []), getattr(inner, "_worker_result_queue", None)]:
            if q is not None:
                with contextlib.suppress(Exception):
                    q.cancel_join_thread()
                    q.close()
