"""Energon's ``megatron.energon.flavors.webdataset.aggregator_pool``: forked worker processes turn tasks
into streams of items, and one aggregator in the calling process consumes them in batches.

:class:`AggregatorPool` takes tasks with :meth:`~AggregatorPool.submit_task`; :meth:`~AggregatorPool.process`
forks ``num_workers`` workers, each of which takes tasks from a shared queue, runs
``user_produce_data(task)`` and sends what it yields in lists of at most ``batch_size`` items (a task's
items never share a list with another task's).  The calling process hands each list to the
:class:`BaseAggregator`'s ``on_item`` as it arrives and returns ``get_final_result_data()`` once every
worker is done.  Workers are forked (they inherit the pool, the functions and the aggregator as they
are), through a fork context: the process-wide start method is left alone.

Where datareel differs: a worker whose ``user_produce_data`` raises, or that dies, stops the pool with a
:class:`~datareel.errors.DatareelError` naming the worker and the task (Energon waits for it forever);
``num_workers`` below 1 is refused (Energon returns without running a task).
"""

from __future__ import annotations

import multiprocessing
import queue
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from ....errors import DatareelError, OptionError, brief, picklable

T_result = TypeVar("T_result")
T_aggregation_data = TypeVar("T_aggregation_data")
T_input_data = TypeVar("T_input_data")

POLL_S = 1.0
"""How often the aggregator, while no batch arrives, checks that the workers it waits for are alive."""
_ITEMS, _DONE, _FAILED = "items", "done", "failed"  # the kinds of message a worker sends


class BaseAggregator(ABC, Generic[T_aggregation_data, T_result]):
    """What consumes the workers' items, in the process that calls :meth:`AggregatorPool.process`."""

    def on_start(self, aggregator_pool: AggregatorPool[Any, Any, Any]) -> None:
        """Called once, before the first batch."""

    @abstractmethod
    def on_item(self, items: list[T_aggregation_data], aggregator_pool: AggregatorPool[Any, Any, Any]) -> None:
        """Called with each batch of items a worker sent, in the order they arrive."""

    def on_finish(self, aggregator_pool: AggregatorPool[Any, Any, Any]) -> None:
        """Called once, after the last batch of the last worker."""

    def get_final_result_data(self) -> T_result:
        """What :meth:`AggregatorPool.process` returns (called after :meth:`on_finish`)."""
        return None  # type: ignore[return-value]  # an aggregator with a result overrides this


def _work(pool: AggregatorPool[Any, Any, Any], worker_id: int) -> None:
    """A worker: run ``user_produce_data`` on each task until the end marker, sending its items in batches;
    a failure is sent (with its traceback) instead of raised, so the aggregator can name it."""
    task: Any = None
    try:
        while (task := pool.task_queue.get()) is not None:
            batch: list[Any] = []
            for item in pool.user_produce_data(task):
                batch.append(item)
                if len(batch) >= pool.batch_size:
                    pool.result_queue.put((_ITEMS, worker_id, batch))
                    batch = []
            if batch:
                pool.result_queue.put((_ITEMS, worker_id, batch))
    except BaseException as exc:
        pool.result_queue.put((_FAILED, worker_id, (brief(task), traceback.format_exc(), picklable(exc))))
        return
    pool.result_queue.put((_DONE, worker_id, None))


class AggregatorPool(Generic[T_input_data, T_aggregation_data, T_result]):
    """``num_workers`` forked processes run ``user_produce_data`` on the submitted tasks; ``aggregator``
    consumes their items, at most ``batch_size`` at a time, in this process."""

    def __init__(
        self,
        num_workers: int,
        user_produce_data: Callable[[T_input_data], Iterable[Any]],
        aggregator: BaseAggregator[T_aggregation_data, T_result],
        *,
        batch_size: int = 1,
    ) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise OptionError(f"AggregatorPool(num_workers={num_workers!r}): needs at least 1 worker process")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise OptionError(f"AggregatorPool(batch_size={batch_size!r}): a batch holds at least 1 item")
        try:
            self._context = multiprocessing.get_context("fork")
        except ValueError:
            raise OptionError(
                "AggregatorPool forks its workers (they inherit the pool as it is), and this platform has no "
                "fork start method; run it on Linux or macOS"
            ) from None
        self.num_workers = num_workers
        self.user_produce_data = user_produce_data
        self.aggregator = aggregator
        self.batch_size = batch_size
        self.task_queue: Any = self._context.Queue()
        self.result_queue: Any = self._context.Queue()

    def submit_task(self, task: T_input_data) -> None:
        """Queue ``task`` for a worker (``None`` is the workers' end marker and cannot be a task)."""
        if task is None:
            raise OptionError("AggregatorPool.submit_task(None): None marks the end of the tasks; submit a value")
        self.task_queue.put(task)

    def process(self) -> T_result:
        """Fork the workers, feed every batch they send to the aggregator and return its final result.

        Raises :class:`~datareel.errors.DatareelError` when a worker fails or dies (the others are stopped),
        and whatever the aggregator raises (likewise)."""
        for _ in range(self.num_workers):
            self.task_queue.put(None)  # one end marker per worker, after every task
        workers = [
            self._context.Process(target=_work, args=(self, i), daemon=True, name=f"datareel-aggregator-{i}")
            for i in range(self.num_workers)
        ]
        try:
            for worker in workers:
                worker.start()
            result = self._aggregate(workers)
        except BaseException:
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()
            for worker in workers:
                if worker.pid is not None:
                    worker.join()
            raise
        for worker in workers:
            worker.join()
        return result

    def _aggregate(self, workers: list[Any]) -> T_result:
        """Hand each batch to the aggregator until every worker has said it is done."""
        self.aggregator.on_start(self)
        running, exited = set(range(self.num_workers)), set[int]()
        while running:
            try:
                kind, worker_id, payload = self.result_queue.get(timeout=POLL_S)
            except queue.Empty:
                self._check_alive(workers, running, exited)
                continue
            if kind == _ITEMS:
                self.aggregator.on_item(payload, self)
            elif kind == _DONE:
                running.discard(worker_id)
            else:
                task, trace, exc = payload
                raise DatareelError(
                    f"AggregatorPool worker {worker_id} failed on task {task} in user_produce_data "
                    f"{getattr(self.user_produce_data, '__qualname__', self.user_produce_data)!r}:\n{trace}"
                    f"fix the task or the function, then process again"
                ) from exc
        self.aggregator.on_finish(self)
        return self.aggregator.get_final_result_data()

    @staticmethod
    def _check_alive(workers: list[Any], running: set[int], exited: set[int]) -> None:
        """Raise if a worker that has not said it is done has died (a signal, out of memory, ``os._exit``):
        its last batches and its task are lost.  One that exited normally may have sent its last message just
        after the aggregator stopped waiting: it counts as lost only if still not done at the next check
        (``exited`` holds those seen before)."""
        for worker_id in sorted(running):
            code = workers[worker_id].exitcode
            if code == 0 and worker_id not in exited:
                exited.add(worker_id)
            elif code is not None:
                raise DatareelError(
                    f"AggregatorPool worker {worker_id} ended (exit code {code}) before finishing its tasks; "
                    f"its items are lost: find what ended it (a signal, memory, os._exit), then process again"
                )


__all__ = ["AggregatorPool", "BaseAggregator"]
