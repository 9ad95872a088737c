"""How batches are computed: the DataLoader's worker options (free to change between save and restore), and
where a dead worker process is reported (:class:`WorkerDeaths`)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import multiprocessing
import os
import signal
import sys
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import BatchError, OptionError, check_int
from ..lifetime import die_with_parent


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
    follows the starting thread); the watchdog thread always (:func:`datareel.lifetime.die_with_parent`)."""
    main = threading.current_thread() is threading.main_thread()
    dataloader.worker_init_fn = functools.partial(worker_started, os.getpid(), main)


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
        self._installed = False
        self._main = threading.main_thread().ident
        self._ours: weakref.WeakSet[Any] = weakref.WeakSet()  # datareel's multi-process DataLoader iterators

    def install(self, iterator: Any) -> None:
        """Count ``iterator`` (a multi-process DataLoader iterator) as datareel's, and wrap torch's
        ``SIGCHLD`` handler (once; only after torch has installed it, from the main thread)."""
        self._ours.add(iterator)
        if self._installed or threading.get_ident() != self._main or not hasattr(signal, "SIGCHLD"):
            return
        from torch.utils.data._utils import signal_handling

        torch_handler = signal.getsignal(signal.SIGCHLD)
        if not getattr(signal_handling, "_SIGCHLD_handler_set", False) or not callable(torch_handler):
            return

        def handler(signum: int, frame: Any) -> None:
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


def start_method(context: Any) -> str:
    """The start method worker processes get: ``context`` (a name, a multiprocessing context or ``None``:
    the process's default, read without fixing it)."""
    if context is None:
        return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if isinstance(context, str):
        return context
    return str(context.get_start_method())


def check_picklable(whole: Any, parts: list[tuple[str, Any]], context: Any) -> None:
    """Under the ``spawn`` or ``forkserver`` start method, refuse now, before any process starts, what the
    worker (or planning) processes could not be sent: ``whole`` is what they receive, ``parts`` the
    user's objects inside it, named (``task_encoder``, ``error_handler``, each dataset source), checked
    first so the message names the one at fault.  ``fork`` copies the process and pickles nothing."""
    method = start_method(context)
    if method == "fork":
        return
    for name, obj in [*parts, ("the loader's worker state", whole)]:
        found = _unpicklable(obj, name, depth=0)
        if found is not None:
            raise OptionError(_unpicklable_message(*found, method))


def _pickle_error(obj: Any) -> BaseException | None:
    try:
        ForkingPickler.dumps(obj)
    except Exception as exc:  # AttributeError (a local class), PicklingError, TypeError (a lock, a file), ...
        return exc
    return None


def _unpicklable(obj: Any, path: str, depth: int) -> tuple[str, Any, BaseException] | None:
    """``(path, object, error)`` of the innermost attribute or item of ``obj`` that does not pickle (a few
    levels deep), or ``None`` if ``obj`` pickles."""
    error = _pickle_error(obj)
    if error is None:
        return None
    if depth < 4 and not isinstance(obj, type):
        if isinstance(obj, dict):
            items = [(f"{path}[{k!r}]", v) for k, v in list(obj.items())[:64]]
        elif isinstance(obj, (list, tuple)):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(obj[:64])]
        else:
            items = [(f"{path}.{k}", v) for k, v in list(getattr(obj, "__dict__", {}).items())[:64]]
        for inner_path, inner in items:
            found = _unpicklable(inner, inner_path, depth + 1)
            if found is not None:
                return found
    return path, obj, error


def _unpicklable_message(path: str, obj: Any, error: BaseException, method: str) -> str:
    kind = obj if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    qualname = getattr(kind, "__qualname__", type(obj).__qualname__)
    what = f"{getattr(kind, '__module__', '?')}.{qualname}"
    head = (
        f"{path} ({what}) cannot be sent to the loader's worker processes: multiprocessing_context={method!r} "
        f"starts each one fresh and pickles what it runs, classes and functions by reference (module and name)"
    )
    if "<locals>" in qualname or "<lambda>" in qualname:
        local = "a lambda" if "<lambda>" in qualname else "a class or function defined inside a function"
        return (
            f"{head}, and {local} ({qualname!r}) cannot be found that way ({type(error).__name__}: {error}); "
            f"define it at module level (outside any function), or use multiprocessing_context='fork'"
        )
    return (
        f"{head}, and this object does not pickle ({type(error).__name__}: {error}); make it picklable "
        f"(module-level classes and functions; no lambdas, open files, locks or generators), or use "
        f"multiprocessing_context='fork'"
    )
