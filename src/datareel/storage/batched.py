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
from typing import Any, Protocol, TypeVar

from ..errors import DatasetError
from .object_store import ObstoreClient
from .ranges import gets_of

T = TypeVar("T")


class RemoteFiles(Protocol):
    """What a batched call needs of :class:`~datareel.storage.remote.RemoteFiles` (named here, not imported:
    remote.py imports this module)."""

    def budget(self) -> Budget: ...

    def each(self, call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]: ...

    def _count_requests(self, n: int) -> None: ...

    def _resolve(self, url: str) -> tuple[Any, str]: ...

    def read_range(self, path: str, start: int, stop: int) -> bytes: ...

    concurrency: int

    def failed(
        self, url: str, what: str, client: Any, exc: Exception, attempt: int, started: float, deadline: bool
    ) -> float: ...


log = logging.getLogger("datareel")
Get = tuple[int, int, list[tuple[int, int]]]  # one GET: start, stop, the ranges it holds
Call = tuple[str, ObstoreClient, str, list[Get]]  # one batched call: url, client, key, its GETs


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


def read_ranges(files: RemoteFiles, wanted: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int, int], bytes]:
    """Many ranges ``(url, start, stop)`` at once, for one micro-batch: ranges of one object close
    together are fetched by one GET (:func:`coalesce`); an obstore object's GETs by one batched call
    (``get_ranges``, several calls where it has more GETs than :func:`concurrency`), an MSC object's on
    this process's threads; at most :func:`concurrency` GETs in flight, each call with the retry
    policy. Ranges whose GET failed are left out (nothing is raised here): the caller reads each of
    those alone, with its own retries, and reports a failure for exactly that sample, as without
    prefetching."""
    by_url: dict[str, list[tuple[int, int]]] = {}
    for url, start, stop in set(wanted):
        if stop > start:
            by_url.setdefault(url, []).append((start, stop))
    batched: list[tuple[str, ObstoreClient, str, list[tuple[int, int, list[tuple[int, int]]]]]] = []
    jobs: list[tuple[str, int, int, list[tuple[int, int]]]] = []  # one GET each: url, start, stop, its ranges
    for url, ranges in by_url.items():
        found = files._resolve(url)  # a URL no profile resolves fails here, once
        client, key = found or (None, "")
        gets = gets_of(ranges)
        if isinstance(client, ObstoreClient):
            for i in range(0, len(gets), min(files.concurrency, 10)):  # obstore runs <= 10 of a call at once
                batched.append((url, client, key, gets[i : i + min(files.concurrency, 10)]))
        else:
            jobs.extend((url, first, end, members) for first, end, members in gets)
    out: dict[tuple[str, int, int], bytes] = {}
    if batched:
        fetch_batched(files, batched, out)
    for (url, first, _, members), got in zip(jobs, files.each(lambda job: files.read_range(*job[:3]), jobs)):
        if isinstance(got, DatasetError):
            log.debug("prefetching %d ranges of %s failed (%s); they are read one by one", len(members), url, got)
            continue
        for start, stop in members:
            out[url, start, stop] = got[start - first : stop - first]
    return out
