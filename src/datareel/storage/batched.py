"""A micro-batch's GETs through obstore: one batched call (``get_ranges``) per object, the objects' calls
at once on the process's threads (obstore releases the GIL while a call waits), at most ``concurrency``
GETs in flight, each call tried with the retry policy of :class:`~datareel.storage.remote.RemoteFiles`.

Threads, not obstore's asyncio functions: its asyncio runtime is made once per interpreter and does not
survive a fork (a DataLoader worker whose parent had read through it hangs), its blocking calls do."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..errors import DatasetError

if TYPE_CHECKING:
    from .object_store import ObstoreClient

T = TypeVar("T")


class RemoteFiles(Protocol):
    """What a batched call needs of :class:`~datareel.storage.remote.RemoteFiles` (named here, not imported:
    remote.py imports this module)."""

    def budget(self) -> Budget: ...

    def each(self, call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]: ...

    def _count_requests(self, n: int) -> None: ...

    def failed(
        self, url: str, what: str, client: Any, exc: Exception, attempt: int, started: float, deadline: bool
    ) -> float: ...


log = logging.getLogger("datareel")
Get = tuple[int, int, list[tuple[int, int]]]  # one GET: start, stop, the ranges it holds
Call = tuple[str, "ObstoreClient", str, list[Get]]  # one batched call: url, client, key, its GETs


class Budget:
    """GETs in flight in one process, at most ``limit`` (a call larger than the limit runs alone)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self._changed = threading.Condition()

    def take(self, n: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.used == 0 or self.used + n <= self.limit)
            self.used += n

    def give(self, n: int) -> None:
        with self._changed:
            self.used -= n
            self._changed.notify_all()


def fetch_batched(files: RemoteFiles, calls: list[Call], out: dict[tuple[str, int, int], bytes]) -> None:
    """Run ``calls`` and put each range they got into ``out`` (``(url, start, stop) -> bytes``); a call
    that failed for good leaves its ranges out (their readers read each alone, with its own errors)."""
    budget = files.budget()
    got = files.each(lambda call: _tried(files, budget, call), calls)
    for (url, _, _, gets), answer in zip(calls, got):
        if isinstance(answer, DatasetError):
            log.debug("prefetching %d GETs of %s failed (%s); their ranges are read one by one", len(gets), url, answer)
            continue
        for (first, _, members), data in zip(gets, answer):
            for start, stop in members:
                out[url, start, stop] = data[start - first : stop - first]


def _tried(files: RemoteFiles, budget: Budget, call: Call) -> list[bytes]:
    """One batched call with the retry policy: each try sends one GET per span (counted in ``requests``)
    and holds that many of the budget's GETs while it runs."""
    url, client, key, gets = call
    spans = [(first, end) for first, end, _ in gets]
    what = f"reading {len(spans)} byte ranges in one batch"
    started, attempt = time.monotonic(), 0
    while True:
        files._count_requests(len(spans))
        budget.take(len(spans))
        try:
            return client.fetch(key, spans)
        except Exception as exc:
            attempt += 1
            wait = files.failed(url, what, client, exc, attempt, started, True)  # raises when the tries end
        finally:
            budget.give(len(spans))
        log.debug("%s: %s failed; retry %d in %.2f s", url, what, attempt, wait)
        time.sleep(wait)
