"""How batches are computed: the DataLoader's worker options (free to change between save and restore), the
hooks each worker starts with, and the result pipe.

Where a dead worker is reported lives in :mod:`.deaths` (:class:`WorkerDeaths`), how an iterator that lost one
finds, reports and stops it in :mod:`.lost`, what workers can be sent in :mod:`.picklable`
(:func:`check_picklable`); all are importable from here as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import multiprocessing.connection
import multiprocessing.util
import os
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import BatchError, OptionError, check_int
from ..lifetime import die_with_parent
from .deaths import WORKER_DEATHS, WorkerDeaths, dead_workers, lost_work
from .lost import GuardedResults, Reported, WorkerLost, guard_result_queue, lost_worker, stop_iterator
from .picklable import check_picklable, start_method

__all__ = [
    "RESULT_PIPE_BYTES",
    "WORKER_DEATHS",
    "GuardedResults",
    "WorkerDeaths",
    "WorkerLost",
    "WorkerOptions",
    "check_picklable",
    "dead_workers",
    "end_with_this_process",
    "guard_result_queue",
    "lost_work",
    "lost_worker",
    "passthrough",
    "start_iterator",
    "start_method",
    "stop_iterator",
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
    :func:`lost_worker` before stopping the workers (:func:`stop_iterator`)."""
    with WORKER_DEATHS.starting():
        try:
            inner = iter(dataloader)
        except WorkerLost as exc:  # a persistent worker died while torch resumed it: the first next() says so
            stop_iterator(getattr(dataloader, "_iterator", None))
            dataloader._iterator = None  # the next iter() starts fresh workers
            return Reported(RuntimeError(str(exc)))
        if hasattr(inner, "_workers"):  # torch's multi-process iterator: its deaths are datareel's
            WORKER_DEATHS.install(inner)
    widen_result_pipe(inner)
    guard_result_queue(inner)  # a batch lost with its worker: reported as the worker's death
    if hasattr(inner, "_workers") and getattr(dataloader, "_iterator", None) is inner:
        _keep_shutdown_parts(dataloader, inner)
    return inner


def _keep_shutdown_parts(dataloader: Any, inner: Any) -> None:
    """The persistent workers a DataLoader keeps (``inner``) stop as torch stops them when both are collected.
    Dropped in a reference cycle, the collector finalized torch's queues and pipes (their finalizers and
    ``__del__``) before torch's ``__del__`` told the workers to stop through them, and that ``__del__`` then
    waited its 5-s join for each worker.  A finalizer of the DataLoader holds those queues, events and processes
    (never the iterator or the dataset: a user's encoder that points back at the loader would keep it alive for
    ever), so they are not part of the garbage; it lets go of them once the DataLoader is gone, and torch's own
    shutdown then runs with them intact."""
    kept = getattr(dataloader, "_datareel_kept", None)
    if kept is None:
        kept = dataloader._datareel_kept = _KeptParts()  # one finalizer per DataLoader
        weakref.finalize(dataloader, kept.release).atexit = False
    kept.parts = [getattr(inner, name, None) for name in _PARTS]


_PARTS = (
    "_workers",
    "_index_queues",
    "_worker_result_queue",
    "_data_queue",
    "_workers_done_event",
    "_pin_memory_thread",
    "_pin_memory_thread_done_event",
)
"""What torch's shutdown of a multi-process iterator goes through (none of it holds the dataset)."""


class _KeptParts:
    """The parts of the iterator a DataLoader keeps that its shutdown needs, held until the DataLoader goes."""

    parts: list[Any]

    def release(self) -> None:
        self.parts = []
