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

from ..errors import WorkerLost


class WorkerDeaths:
    """Where a dead worker process is reported: in the training process's ``next()``, never in the training step,
    and never from inside the signal handler.

    torch's DataLoader installs a ``SIGCHLD`` handler that raises its ``RuntimeError`` ("DataLoader worker
    ... is killed by signal") in the main thread at whatever line it runs: in the training step after a
    batch was handed out (the step lost its batch while the cursor counted it), in a finalizer that swallows
    it, in the middle of reading the planning process's pipe, or inside torch's own ``next()`` just after it
    took a lock (a queue's ``put`` or ``get``).  Raised there, the lock was never released, and stopping the
    workers (which puts to the same queue) waited for it forever: a killed worker hung the training process.

    This store wraps torch's handler once (main thread only).  For datareel's own workers (those of the
    DataLoader iterators passed to :meth:`install`) the handler raises nothing: it counts the signal in
    :attr:`deaths`, and the reader of an iterator's results (:class:`~datareel.execute.workers.GuardedResults`)
    and each ``next()`` look at their own workers (:func:`dead_workers`) when the count moved, at points
    where no lock is held.  torch's handler still runs, with datareel's workers hidden from it, so it reports
    every other DataLoader's dead worker (a user's own, beside datareel) as it does without datareel; while a
    datareel ``next()`` waits for workers (:meth:`wait`) or an iterator starts (:meth:`starting`), that call
    is put off to their end, where no lock of datareel's DataLoader is held.

    One raise is left: a read of a batch that a dead worker left half-written waits for the rest for ever, so
    a death signalled while the main thread is inside a result read (:attr:`reading`) raises
    :class:`~datareel.errors.WorkerLost` out of it, but only where the handler interrupted the pipe's read
    itself; where it ran elsewhere in the read (a gc callback or a finalizer, which would drop the exception)
    the signal comes again a moment later, for as long as the read goes on.
    """

    def __init__(self) -> None:
        self.deaths = 0  # SIGCHLDs (a child ended) the main thread has seen
        self._waiting = 0  # the main thread is inside a multi-process DataLoader's next()
        self._starting = 0  # the main thread is starting a datareel DataLoader iterator (:meth:`starting`)
        self._deferred = 0  # SIGCHLDs that came while it did either: torch's handler runs at their end
        self._installed = False
        self.reading: Any = None  # the results reader (``lost()``) the main thread is inside, blocked maybe
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
        self._starting += 1
        try:
            yield
        finally:
            self._starting -= 1
        self._run_deferred()

    def _wrap(self) -> None:
        if self._installed or threading.get_ident() != self._main or not hasattr(signal, "SIGCHLD"):
            return
        from torch.utils.data._utils import signal_handling

        torch_handler = signal.getsignal(signal.SIGCHLD)
        if not getattr(signal_handling, "_SIGCHLD_handler_set", False) or not callable(torch_handler):
            return
        self._torch_handler = torch_handler

        def handler(signum: int, frame: Any) -> None:
            self.deaths += 1  # datareel's iterators look at their own workers at their next safe point
            if self._starting or self._waiting:  # inside a datareel DataLoader, maybe holding one of its locks
                self._deferred += 1
                reading, lost = self.reading, ""
                if reading is not None:  # reading a batch, which a dead worker may have left half-written
                    lost = reading.lost()
                if lost:  # signalled again soon while the read goes on (a raise in a gc callback is dropped)
                    self._again(reading)
                    if _in_a_read(frame):  # out of the read: only this iterator's reader lock stays held
                        raise WorkerLost(lost)
                return
            with self._hidden():
                torch_handler(signum, frame)  # any other DataLoader's dead worker: raised as torch does

        signal.signal(signal.SIGCHLD, handler)
        self._installed = True

    def _again(self, reading: Any) -> None:
        """The signal once more, in :data:`AGAIN_SECONDS`, while the main thread is still inside ``reading``:
        a raise from the handler where it ran now would be swallowed, and the read that follows may wait for
        the rest of a batch its dead worker never wrote."""

        def again() -> None:
            if self.reading is reading:
                signal.pthread_kill(self._main, signal.SIGCHLD)

        timer = threading.Timer(AGAIN_SECONDS, again)
        timer.daemon = True
        timer.start()

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
        """End a wait entered by :meth:`wait`; torch's handler runs now for signals put off meanwhile (with
        datareel's workers hidden: another DataLoader's dead worker is raised here)."""
        if counted:
            self._waiting -= 1
            self._run_deferred()

    def _run_deferred(self) -> None:
        if self._deferred and self._installed and not (self._waiting or self._starting):
            self._deferred = 0
            with self._hidden():
                self._torch_handler(signal.SIGCHLD, None)


WORKER_DEATHS = WorkerDeaths()

AGAIN_SECONDS = 0.01
"""How soon a death signal the handler could not raise from (:func:`_in_a_read`) comes again."""

READ_MODULES = frozenset(
    {
        "multiprocessing.connection",
        "multiprocessing.queues",
        "multiprocessing.reduction",
        "multiprocessing.resource_sharer",
        "selectors",
        "socket",
        "torch.multiprocessing.reductions",
    }
)
"""The modules whose code a result read runs (the pipe, its poll, a batch's shared tensors received)."""

_READER = __name__.rpartition(".")[0] + ".lost"  # the module of GuardedResults, whose ``_get`` is the read


def _in_a_read(frame: Any) -> bool:
    """Whether the handler interrupted the read itself: every frame from ``frame`` up to the result reader's
    ``GuardedResults._get`` runs the read's own code (:data:`READ_MODULES`), and none is a ``__del__``.  A gc
    callback, a finalizer or a weakref callback run inside the read (Python drops what they raise) breaks the
    chain, and so does the same code run outside a read."""
    while frame is not None:
        if frame.f_code.co_name == "_get" and frame.f_globals.get("__name__") == _READER:
            return True
        if frame.f_globals.get("__name__") not in READ_MODULES or frame.f_code.co_name == "__del__":
            return False
        frame = frame.f_back
    return False


def dead_workers(iterator: Any) -> str:
    """The worker processes of a live multi-process DataLoader iterator (torch's ``_workers``) that have
    ended, in words (``""``: none, a single-process iterator, or one already shut down)."""
    if getattr(iterator, "_shutdown", True):
        return ""
    workers, status = getattr(iterator, "_workers", []), getattr(iterator, "_workers_status", [])
    dead = [w for w, active in zip(workers, status) if active and not w.is_alive()]
    return ", ".join(f"pid {w.pid} {_ended(w.exitcode)}" for w in dead)


def lost_work(iterator: Any) -> str:
    """:func:`dead_workers` of a DataLoader iterator that still waits for batches it sent out: a worker that
    ended idle at the end of a pass costs nothing (the next pass starts fresh ones)."""
    if getattr(iterator, "_rcvd_idx", 0) >= getattr(iterator, "_send_idx", 1):
        return ""
    return dead_workers(iterator)


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with code {code}"
