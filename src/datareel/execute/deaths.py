"""Where a dead DataLoader worker process is reported: :class:`WorkerDeaths` (one store, :data:`WORKER_DEATHS`)
and :func:`dead_workers`, the ended workers of an iterator in words.

The loader's iterator (:mod:`datareel.iteration`) and the Energon facade's val loop enter a wait around
each ``next()`` of their DataLoader; torch's ``SIGCHLD`` report of a datareel worker's death is raised only
there, never in the training step.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import weakref
from collections.abc import Iterator
from typing import Any


class WorkerDeaths:
    """Where a dead worker process is reported: in the training process's ``next()``, never in the training step.

    torch's DataLoader installs a ``SIGCHLD`` handler that raises its ``RuntimeError`` ("DataLoader worker
    ... is killed by signal") in the main thread at whatever line it runs: in the training step after a
    batch was handed out, between the loader taking a batch's cursor and returning the batch (the cursor
    then counts a batch nobody received), in a finalizer that swallows it, or in the middle of reading the
    planning process's pipe.  A training step interrupted that way lost its batch while the cursor
    counted it: the next iterator skipped it.

    This store wraps torch's handler once (main thread only) and lets it raise a death of datareel's own
    workers (those of the DataLoader iterators passed to :meth:`install`) only while the main thread waits
    inside a datareel ``next()`` for workers (:meth:`wait`), outside the sampler (:meth:`outside`); at any
    other moment torch's handler runs with datareel's workers hidden from it, so it reports every other
    DataLoader's dead worker (a user's own, beside datareel) exactly as it does without datareel, and a
    signal it did not raise for is counted in :attr:`deaths`: each datareel iterator looks at its own
    workers (:func:`dead_workers`) in its next ``next()``.  torch's own check at each wait (every 5 s, and
    when its ``timeout`` expires) still finds the rest.
    """

    def __init__(self) -> None:
        self.deaths = 0  # SIGCHLDs (a child ended) while no datareel iterator waited for workers
        self._waiting = 0  # the main thread is inside a multi-process DataLoader's next()
        self._starting = 0  # the main thread is starting a datareel DataLoader iterator (:meth:`starting`)
        self._deferred = 0  # SIGCHLDs that came while it did
        self._installed = False
        self._main = threading.main_thread().ident
        self._ours: weakref.WeakSet[Any] = weakref.WeakSet()  # datareel's multi-process DataLoader iterators

    def install(self, iterator: Any) -> None:
        """Count ``iterator`` (a multi-process DataLoader iterator) as datareel's, and wrap torch's
        ``SIGCHLD`` handler (once; only after torch has installed it, from the main thread)."""
        self._ours.add(iterator)
        self._wrap()

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Around ``iter(dataloader)`` of a datareel DataLoader and its :meth:`install`: torch forks the workers
        and sends them their first descriptors there, and a worker that died meanwhile (at its first sample)
        was raised by torch's handler from ``iter(loader)``, before the iterator was datareel's, its half-made
        workers left running.  Now every ``SIGCHLD`` that comes meanwhile is counted in :attr:`deaths` (the
        iterator's first ``next()`` looks at its workers), and once the iterator is installed torch's handler
        runs once with datareel's workers hidden, so another DataLoader's dead worker is still raised."""
        if threading.get_ident() != self._main or not hasattr(signal, "SIGCHLD"):
            yield
            return
        from torch.utils.data._utils import signal_handling

        signal_handling._set_SIGCHLD_handler()  # torch's, as its first iterator would set it; then wrapped
        self._wrap()
        deferred = self._deferred
        self._starting += 1
        try:
            yield
        finally:
            self._starting -= 1
        if self._deferred != deferred and self._installed and not self._starting:
            with self._hidden():
                self._torch_handler(signal.SIGCHLD, None)

    def _wrap(self) -> None:
        if self._installed or threading.get_ident() != self._main or not hasattr(signal, "SIGCHLD"):
            return
        from torch.utils.data._utils import signal_handling

        torch_handler = signal.getsignal(signal.SIGCHLD)
        if not getattr(signal_handling, "_SIGCHLD_handler_set", False) or not callable(torch_handler):
            return
        self._torch_handler = torch_handler

        def handler(signum: int, frame: Any) -> None:
            if self._starting:  # a datareel iterator is being started: its first next() reports it
                self._deferred += 1
                self.deaths += 1
                return
            if self._waiting:
                torch_handler(signum, frame)  # inside datareel's next(): the loader's iterator catches it
                return
            with self._hidden():
                torch_handler(signum, frame)  # any other DataLoader's dead worker: raised as torch does
            self.deaths += 1

        signal.signal(signal.SIGCHLD, handler)
        self._installed = True

    @contextlib.contextmanager
    def _hidden(self) -> Iterator[None]:
        """datareel's workers out of torch's registry of worker pids (what its handler checks), for a moment."""
        from torch.utils.data._utils import signal_handling

        hidden = []
        for iterator in list(self._ours):
            if getattr(iterator, "_worker_pids_set", False):
                pids = tuple(w.pid for w in getattr(iterator, "_workers", []))
                try:
                    signal_handling._remove_worker_pids(id(iterator))
                except Exception:  # not registered after all: leave it
                    continue
                hidden.append((id(iterator), pids))
        try:
            yield
        finally:
            for key, pids in hidden:
                signal_handling._set_worker_pids(key, pids)

    def wait(self) -> bool:
        """Enter a wait for workers (returns whether it counts: main thread only); :meth:`done` ends it."""
        if threading.get_ident() != self._main:
            return False
        self._waiting += 1
        return True

    def done(self, counted: bool) -> None:
        if counted:
            self._waiting -= 1

    @contextlib.contextmanager
    def outside(self) -> Iterator[None]:
        """The sampler's own work inside a wait (the planning process's pipe, say): no report there."""
        if threading.get_ident() != self._main:
            yield
            return
        waiting, self._waiting = self._waiting, 0
        try:
            yield
        finally:
            self._waiting = waiting


WORKER_DEATHS = WorkerDeaths()


def dead_workers(iterator: Any) -> str:
    """The worker processes of a live multi-process DataLoader iterator (torch's ``_workers``) that have
    ended, in words (``""``: none, a single-process iterator, or one already shut down)."""
    if getattr(iterator, "_shutdown", True):
        return ""
    workers, status = getattr(iterator, "_workers", []), getattr(iterator, "_workers_status", [])
    dead = [w for w, active in zip(workers, status) if active and not w.is_alive()]
    return ", ".join(f"pid {w.pid} {_ended(w.exitcode)}" for w in dead)


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with code {code}"
