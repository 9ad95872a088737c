"""How batches are computed: the DataLoader's worker options (free to change between save and restore), the
hooks each worker starts with, and the result pipe.

Where a dead worker is reported lives in :mod:`.deaths` (:class:`WorkerDeaths`), what workers can be sent in
:mod:`.picklable` (:func:`check_picklable`); both are importable from here as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import multiprocessing.connection
import multiprocessing.util
import os
import queue
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import BatchError, DatareelError, OptionError, check_int
from ..lifetime import die_with_parent
from .deaths import WORKER_DEATHS, WorkerDeaths, dead_workers
from .picklable import check_picklable, start_method

__all__ = [
    "RESULT_PIPE_BYTES",
    "WORKER_DEATHS",
    "WorkerDeaths",
    "WorkerOptions",
    "check_picklable",
    "dead_workers",
    "end_with_this_process",
    "guard_result_queue",
    "lost_worker",
    "passthrough",
    "start_iterator",
    "start_method",
    "widen_result_pipe",
    "worker_started",
]


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """``num_workers``, ``prefetch_factor``, ``pin_memory``, ``persistent_workers``,
    ``multiprocessing_context`` and ``timeout``, passed to ``torch.utils.data.DataLoader``."""

    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    multiprocessing_context: Any = None
    timeout: float = 0.0

    def __post_init__(self) -> None:
        check_int(self.num_workers, "num_workers")
        if self.prefetch_factor is not None:
            check_int(self.prefetch_factor, "prefetch_factor", minimum=1)
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise OptionError(f"timeout={timeout!r} must be a number of seconds >= 0 (0: wait forever)")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            raise OptionError(
                f"prefetch_factor={self.prefetch_factor!r} and persistent_workers="
                f"{self.persistent_workers!r} need worker processes; set num_workers >= 1 or drop them"
            )

    def dataloader(self, dataset: Dataset, sampler: Sampler, *, seed: int) -> DataLoader:
        """The DataLoader that executes descriptors: one batch per descriptor, made in the worker."""
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=sampler,
            collate_fn=passthrough,
            # its own generator: DataLoader draws a worker base seed per iterator, which would otherwise
            # advance the training loop's global torch generator (datareel needs no worker seeds)
            generator=torch.Generator().manual_seed(seed),
            **self.dataloader_kwargs(),
        )

    def dataloader_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "timeout": self.timeout,
        }
        if self.num_workers:
            kwargs["persistent_workers"] = self.persistent_workers
            kwargs["multiprocessing_context"] = self.multiprocessing_context
            if self.prefetch_factor is not None:
                kwargs["prefetch_factor"] = self.prefetch_factor
        return kwargs


def end_with_this_process(dataloader: DataLoader) -> None:
    """Before a DataLoader starts its workers: each ends with this process however it ends (torch's own
    check runs between batches only, so a worker busy in ``encode_sample`` outlived a SIGKILLed training
    process). The kernel's parent-death signal only when the workers start from the main thread (it
    follows the starting thread); the watchdog thread always (:func:`datareel.lifetime.die_with_parent`).

    And a worker that dies leaves no directory behind: a worker makes ``multiprocessing``'s temporary
    directory (``pymp-*``, for the socket that hands its batches' shared memory over) the first time it sends
    a tensor, and only a worker that exits normally removes it; made here, in this process, forked workers
    use this process's (removed when it exits) instead."""
    main = threading.current_thread() is threading.main_thread()
    dataloader.worker_init_fn = functools.partial(worker_started, os.getpid(), main)
    multiprocessing.util.get_temp_dir()


def worker_started(parent: int, pdeathsig: bool, worker_id: int) -> None:
    """The DataLoader's ``worker_init_fn``: the worker ends with the training process (see
    :func:`end_with_this_process`), and a batch that does not pickle is reported, not lost
    (:func:`_report_unpicklable_batches`)."""
    die_with_parent(parent, pdeathsig=pdeathsig)
    _report_unpicklable_batches(sys._getframe(1))


def _report_unpicklable_batches(caller: Any) -> None:
    """torch's worker puts each batch into a ``multiprocessing`` queue whose feeder thread pickles it later;
    one that does not pickle (a lambda or a generator in what ``batch`` / ``encode_batch`` returned) was
    printed and dropped there, and the training process waited for it forever. The worker's result
    queue (``data_queue`` in torch's worker loop, which calls this) now sends a :class:`BatchError` in
    its place: a property of the batch, raised by ``next()`` for that micro-batch."""
    queue = getattr(caller, "f_locals", {}).get("data_queue")
    if queue is not None and hasattr(queue, "_on_queue_feeder_error"):
        queue._on_queue_feeder_error = functools.partial(_unpicklable_batch, queue)


def _unpicklable_batch(queue: Any, error: BaseException, item: Any) -> None:
    if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int)):
        type(queue)._on_queue_feeder_error(error, item)  # not a batch (torch's own messages): as before
        return
    from torch._utils import ExceptionWrapper

    positions = item[1].get("__positions__") if isinstance(item[1], dict) else None
    which = f" (reel positions {positions[0]}..{positions[-1]})" if getattr(positions, "size", 0) else ""
    failure = BatchError(
        f"the micro-batch{which} a DataLoader worker made does not pickle ({type(error).__name__}: {error}), so "
        f"it cannot reach the training process: return tensors, numpy arrays, numbers, strings, and lists, "
        f"tuples or dicts of them from batch / encode_batch (no lambdas, generators, open files or locks)"
    )
    queue.put((item[0], ExceptionWrapper((BatchError, failure, None), where="in a DataLoader worker process")))


def passthrough(batch: Any) -> Any:
    """DataLoader collate_fn: batches are already made in the worker."""
    return batch


RESULT_PIPE_BYTES = 1 << 20
"""Bytes the workers' result pipe holds (Linux: 64 KiB by default; 1 MiB is the default ceiling for
unprivileged processes, ``/proc/sys/fs/pipe-max-size``)."""


def widen_result_pipe(iterator: Any) -> None:
    """Let a worker write a batch of up to ~1 MiB into the DataLoader's result pipe in one go: with the
    default 64 KiB, a 330 KiB batch crossed in 6 writes and reads, each a wait and a context switch for
    the training process (docs/performance.md). Best effort: a torch
    without the attribute, a platform without ``F_SETPIPE_SZ`` or a refusal (the per-user pipe budget)
    leaves the pipe as it is."""
    reader = getattr(getattr(iterator, "_worker_result_queue", None), "_reader", None)
    resize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if reader is None or resize is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fcntl.fcntl(reader.fileno(), resize, RESULT_PIPE_BYTES)


def start_iterator(dataloader: Any) -> Any:
    """``iter(dataloader)`` of a datareel DataLoader, with datareel's worker-death handling (the Loader's
    iterator and the Energon facade's val loop start theirs here): a worker dying during the start is reported
    by the first ``next()`` (:meth:`WorkerDeaths.starting`), the iterator's deaths are datareel's
    (:meth:`WorkerDeaths.install`), its result pipe widened and its results read through
    :class:`GuardedResults`.  Read ``WORKER_DEATHS.deaths`` before calling it; on a failing ``next()`` ask
    :func:`lost_worker` before stopping the workers."""
    with WORKER_DEATHS.starting():
        inner = iter(dataloader)
        if hasattr(inner, "_workers"):  # torch's multi-process iterator: its deaths are datareel's
            WORKER_DEATHS.install(inner)
    widen_result_pipe(inner)
    guard_result_queue(inner)  # a batch lost with its worker: reported as the worker's death
    return inner


LOST_WORKER_WAIT = 1.0
"""Seconds :func:`lost_worker` waits for a worker to finish ending after a broken connection to it."""


def lost_worker(iterator: Any, exc: BaseException) -> RuntimeError | None:
    """The report of a lost worker for what a multi-process DataLoader iterator's ``next()`` raised, where
    ``exc`` does not say it: the worker that made a batch died after sending it, and reading the batch's
    tensors (their memory comes through a socket to that worker) failed with a bare ``ConnectionResetError``
    or ``EOFError``, or another exception came while a worker lay dead.  ``None`` where ``exc`` is datareel's
    own, torch's report already (it names "DataLoader worker"), an interrupt, or no worker has ended.

    A broken connection waits up to :data:`LOST_WORKER_WAIT` seconds for the dying worker's exit status: its
    sockets and its sentinel close a moment before the kernel lets its parent reap it."""
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


DEATH_CHECK_SECONDS = 0.05
"""How long :class:`GuardedResults` waits for a batch at a time before it looks for a dead worker."""


class GuardedResults:
    """torch's result queue, whose ``get`` reports a worker's death (as torch's own check does) at a point
    where no lock is held.

    datareel's ``SIGCHLD`` handler raises nothing for its own workers (:class:`.deaths.WorkerDeaths`: torch's
    raised inside a queue's ``put`` or ``get`` left the queue's lock held, and stopping the workers hung).  A
    worker that dies while the training process waits for a batch is found here instead: ``get`` waits
    :data:`DEATH_CHECK_SECONDS` at a time, and when a ``SIGCHLD`` came meanwhile and one of the iterator's
    workers has ended, it ends the wait (``queue.Empty``, before the ``timeout`` the DataLoader asked for):
    torch's check behind it finds the dead worker, names it and raises.

    And a batch lost with its worker: a batch's tensors cross through a socket to the worker that made them;
    a worker that died after sending one made ``get`` fail with a bare ``ConnectionResetError`` or
    ``EOFError`` a moment before its exit status was visible, so torch (which then looks for dead workers)
    found none, ran its open-files check (ten temporary files) and raised the bare error.  Here ``get`` waits
    for the dead worker (:func:`lost_worker`) and raises its report, so torch finds it, names it and raises
    at once."""

    def __init__(self, results: Any, iterator: Any):
        self._queue, self._iterator = results, weakref.ref(iterator)
        self._deaths = WORKER_DEATHS.deaths

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not block:
            return self._get(block=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = DEATH_CHECK_SECONDS if deadline is None else deadline - time.monotonic()
            try:
                return self._get(timeout=max(0.0, min(DEATH_CHECK_SECONDS, left)))
            except queue.Empty:
                if self._a_worker_died() or (deadline is not None and left <= DEATH_CHECK_SECONDS):
                    raise

    def _get(self, **kwargs: Any) -> Any:
        try:
            return self._queue.get(**kwargs)
        except (OSError, EOFError) as exc:
            iterator = self._iterator()
            lost = lost_worker(iterator, exc) if iterator is not None else None
            if lost is None:
                raise
            raise lost from exc

    def _a_worker_died(self) -> bool:
        if self._deaths == WORKER_DEATHS.deaths:  # no child has ended since the last look
            return False
        self._deaths = WORKER_DEATHS.deaths
        iterator = self._iterator()
        return iterator is not None and bool(dead_workers(iterator))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)
