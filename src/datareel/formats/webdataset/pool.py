"""Scanning shards in parallel for ``datareel prepare``: in shard order, a bounded number under way, and
the scanning processes ended with the run however it ends (an error, Ctrl-C, SIGTERM, the caller
closing the generator)."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

from tqdm import tqdm

from ...lifetime import die_with_parent

T = TypeVar("T")


def scan_in_order(
    scan: Callable[[str], T], shards: list[str], workers: int | None, progress: bool, *, processes: bool
) -> Iterator[T]:
    """``scan(shard)`` for every shard, in shard order, ``workers`` at a time (processes or threads), with a
    progress bar. At most ``2 * workers`` scans are under way or waiting to be taken, so memory holds a
    few shards' results whatever the dataset size. A shard's error is raised in order; the rest are
    cancelled.

    Worker processes end with this process however it ends, and at once when the scan stops early (an
    error, Ctrl-C, SIGTERM under :func:`terminated_cleanly`, the consumer closing the generator): they are
    terminated, not waited for (a scan of a large shard takes minutes)."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(shards)))
    with tqdm(total=len(shards), unit="shard", desc="indexing", disable=not progress) as bar:
        if workers == 1:
            for shard in shards:
                yield scan(shard)
                bar.update()
            return
        pool: Executor
        if processes:
            main = threading.current_thread() is threading.main_thread()  # the death signal follows this thread
            pool = ProcessPoolExecutor(workers, initializer=_pool_worker_started, initargs=(os.getpid(), main))
        else:
            pool = ThreadPoolExecutor(workers)
        pending: deque[Future[T]] = deque()
        todo = iter(shards)
        finished = False
        try:
            for shard in itertools.islice(todo, 2 * workers):
                pending.append(pool.submit(scan, shard))
            while pending:
                result = pending.popleft().result()
                for shard in itertools.islice(todo, 1):
                    pending.append(pool.submit(scan, shard))
                yield result
                bar.update()
            finished = True
        finally:
            if not finished:
                _stop_pool(pool)
            pool.shutdown(wait=True, cancel_futures=True)


def _pool_worker_started(parent: int, pdeathsig: bool) -> None:
    """A scanning process: Ctrl-C (sent to the whole process group) and SIGTERM are the parent's to handle
    (it terminates the pool: no traceback from every worker, no handler inherited by fork raising here),
    and the process ends with its parent however that ends (:func:`datareel.lifetime.die_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent, pdeathsig=pdeathsig)


def _stop_pool(pool: Executor) -> None:
    """Cancel what has not started and terminate the processes of a process pool (threads cannot be
    stopped: a running scan of a thread pool finishes)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # ProcessPoolExecutor's
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
    if manager is not None:
        manager.join(timeout=10)  # it sees its processes gone and ends


@contextlib.contextmanager
def terminated_cleanly() -> Iterator[None]:
    """Inside: SIGTERM, where it would end the process on the spot, raises ``SystemExit(143)`` instead, so
    the cleanup of an exception runs (the scanning processes terminated, the staging directory removed)
    before the process exits with the status a shell shows for SIGTERM. Main thread only, and only where
    SIGTERM has its default action (a handler the caller installed stays); a second SIGTERM ends the
    process at once."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
