"""Objects in buckets: ``s3://``, ``gs://`` and ``az://`` through obstore (:mod:`.object_store`), ``msc://``
through NVIDIA's multi-storage-client (:mod:`.msc`, the library and configuration Energon uses).

``DATAREEL_S3_CLIENT=msc`` reads ``s3://`` through multi-storage-client's implicit S3 profile instead (the
path before obstore; default ``obstore``); so does a key with an empty segment (``a//b``, which obstore
cannot name), and a process forked from one that had read through obstore (see :mod:`.object_store`:
start DataLoader workers with ``multiprocessing_context="forkserver"`` to give them obstore).  Either way
the standard AWS configuration applies as users expect (credentials, region and ``AWS_ENDPOINT_URL`` from
the environment or ``~/.aws``); datareel adds no config file of its own.

Each process makes its clients lazily, one per bucket or profile (a DataLoader worker after fork gets its
own), and reuses them, so connections are reused too.  A micro-batch's ranges are fetched together
(:meth:`RemoteFiles.read_ranges`): ranges of one object close together by one GET (:func:`coalesce`), the
GETs of one object by one batched call (obstore's ``get_ranges``), up to :func:`concurrency` GETs in
flight per process.  A transient failure (a 5xx or throttling answer, a reset or timed-out connection, a
body shorter than asked for) is retried with exponential backoff, at most :attr:`Retry.attempts` times
and within :attr:`Retry.deadline` seconds; a permanent one (403, 404) is not.  Each try is one HTTP
request (a batched call: one per GET in it): the clients are made with :class:`Retry`'s connect and read
timeouts and with their own retries turned off, so the count is the real one.  Every failure ends in a
:class:`~datareel.errors.StorageError` naming the URL (with the tries, the time taken and the settings to
change, where it was retried): a failure of the store, never of a sample.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import DatasetError, NotFound
from ..errors import StorageError as StorageError
from .base import StoreFiles
from .batched import Budget, read_ranges
from .msc import _BOTOCORE_PROVIDERS as _BOTOCORE_PROVIDERS
from .msc import MscClient, _profile_and_path, make_client
from .msc import _status as _status
from .object_store import ENV_CLIENT as ENV_CLIENT
from .object_store import (
    ObstoreClient,
    describe,
    make_store,
    runtime_here,
    runtime_started_here,
    s3_client,
    say_forked_fallback,
)
from .objects import ObjectInfo, ObjectStat
from .ranges import COALESCE_GAP, COALESCE_LIMIT, coalesce, concurrency
from .retry import ENV_ATTEMPTS as ENV_ATTEMPTS
from .retry import ENV_DEADLINE as ENV_DEADLINE
from .retry import ENV_TIMEOUT as ENV_TIMEOUT
from .retry import Retry, verdict
from .retry import _seconds as _seconds
from .schemes import scheme_of

log = logging.getLogger("datareel")
T = TypeVar("T")
Client = MscClient | ObstoreClient


class RemoteFiles(StoreFiles):
    """:class:`~datareel.storage.Files` for ``s3://``, ``gs://``, ``az://`` and ``msc://`` URLs; one instance
    per process (one made before a fork drops its clients in the child and makes new ones)."""

    prefetches = True  # each request costs a round trip: a micro-batch's ranges are fetched together

    def __init__(self, retry: Retry | None = None):
        self.retry = retry or Retry.from_env()
        self.requests = 0  # requests sent by this process (tries included), for the cost figures
        self._count = threading.Lock()
        self._making = threading.Lock()
        self.concurrency = concurrency()  # checked when the first remote path is opened, not mid-run
        self.s3_client = s3_client()  # likewise: "obstore" or "msc"
        self._fresh()

    def _fresh(self) -> None:
        """Forget every client: a process (re)starts with none of its parent's connections, threads or runtime."""
        self._pid = os.getpid()
        self._clients: dict[tuple[str, bool], tuple[Client, str]] = {}  # (url, single) -> (client, key in it)
        self._made: dict[tuple[str, str], Client] = {}  # (scheme or "msc", bucket or profile) -> client
        self._pool: ThreadPoolExecutor | None = None
        self._budget: Budget | None = None

    def budget(self) -> Budget:
        """This process's budget of GETs in flight (:func:`concurrency`), shared by its batched calls."""
        if self._pid != os.getpid():
            self._fresh()
        if self._budget is None:
            self._budget = Budget(self.concurrency)
        return self._budget

    def _resolve(self, url: str) -> tuple[Client, str]:
        """The client and the object's key in it for ``url`` (cached per process), for a micro-batch's ranges
        (:meth:`read_ranges`)."""
        return self._client_for(url, single=False)

    def _resolve_one(self, url: str) -> tuple[Client, str]:
        """:meth:`_resolve` for a request of one object (metadata, an index, a first-use check): an s3:// one
        goes through obstore only once this process has started obstore's runtime with a micro-batch's read;
        before, through multi-storage-client. So a process that only opened datasets (the training process of
        a loader with workers) starts no runtime, and the workers it forks read through obstore."""
        return self._client_for(url, single=(scheme_of(url) or "") == "s3" and not runtime_started_here())

    def _client_for(self, url: str, single: bool) -> tuple[Client, str]:
        if self._pid != os.getpid():
            self._fresh()
        scheme = scheme_of(url) or ""
        found = self._clients.get((url, single))
        if found is None:
            try:
                empty_segment = "//" in url.split("://", 1)[1].rstrip("/")  # a key obstore cannot name: a/b//c
                if scheme == "msc" or (
                    scheme == "s3"
                    and (self.s3_client == "msc" or empty_segment or single or not self._obstore_here(url))
                ):
                    profile, key = _profile_and_path(url)
                    where = ("msc", profile)
                    make: Callable[[], Client] = lambda: MscClient(make_client(profile, self.retry))  # noqa: E731
                else:
                    if not self._obstore_here(url):
                        raise DatasetError(
                            f"{url}: this process was forked from one that had read through obstore, whose runtime "
                            f"does not survive fork; start the loader's workers with multiprocessing_context="
                            f"'forkserver' (or 'spawn')"
                        )
                    bucket, _, key = url.split("://", 1)[1].partition("/")
                    if not bucket:
                        raise ValueError("the URL names no bucket")
                    where = (scheme, bucket)
                    make = lambda: ObstoreClient(make_store(scheme, bucket, self.retry))  # noqa: E731
                with self._making:
                    client = self._made.get(where)
                    if client is None:
                        client = self._made[where] = make()
            except (ValueError, KeyError) as exc:
                raise DatasetError(f"{url}: {exc}; check the URL (s3://bucket/key or msc://profile/key)") from None
            found = self._clients[url, single] = (client, key)
        return found

    def _obstore_here(self, url: str) -> bool:
        """Whether obstore can serve ``url`` in this process (:func:`~.object_store.runtime_here`); said once if not."""
        if runtime_here():
            return True
        say_forked_fallback(url)
        return False

    def client_of(self, url: str, bulk: bool = True) -> Client:
        """The client that serves ``url`` in this process (an :class:`ObstoreClient` or an :class:`MscClient`): for a
        micro-batch's ranges (``bulk``), or for one request."""
        return (self._resolve(url) if bulk else self._resolve_one(url))[0]

    def _count_requests(self, n: int) -> None:
        with self._count:
            self.requests += n

    def _call(self, url: str, what: str, call: Callable[[Client, str], T], *, deadline: bool = True) -> T:
        """Run ``call(client, key)`` with the retry policy (``deadline``: within :attr:`Retry.deadline`);
        every failure becomes a :class:`~datareel.errors.StorageError` naming ``url``."""
        client, key = self._resolve_one(url)
        started, attempt = time.monotonic(), 0
        while True:
            self._count_requests(1)
            try:
                return call(client, key)
            except Exception as exc:
                attempt += 1
                wait = self.failed(url, what, client, exc, attempt, started, deadline)
            log.debug("%s: %s failed; retry %d in %.2f s", url, what, attempt, wait)
            time.sleep(wait)

    def failed(
        self, url: str, what: str, client: Client, exc: Exception, attempt: int, started: float, deadline: bool
    ) -> float:
        """After failed try ``attempt`` (1-based) of ``what`` on ``url``: the seconds to wait before the next,
        or the :class:`~datareel.errors.StorageError` (raised) that ends the tries (:func:`.retry.verdict`)."""
        return verdict(self.retry, url, what, client.transient(exc), describe(exc), exc, attempt, started, deadline)

    def stat(self, path: str) -> ObjectStat:
        """The store's own answer on ``path`` (an object or a prefix), last change included; asked anew each time."""
        return self._call(path, "reading its metadata", lambda client, key: client.stat(key))

    def info(self, path: str) -> ObjectInfo:
        meta = self._call(path, "reading its size", lambda client, key: client.stat(key, directories=False))
        if meta.type == "directory":
            raise NotFound(f"{path} is a prefix (a directory), not an object")
        return ObjectInfo(meta.content_length, meta.etag)

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except NotFound:
            return False
        return True

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        if stop == start:
            return b""
        return self._call(path, f"reading bytes [{start}, {stop})", lambda c, key: c.read_range(key, start, stop))

    def read_ranges(self, wanted: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int, int], bytes]:
        """Many ranges ``(url, start, stop)`` at once, for one micro-batch (:func:`.batched.read_ranges`); ranges
        whose GET failed are left out: the caller reads each alone, with its own retries and errors."""
        return read_ranges(self, wanted)

    def each(self, call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]:
        """``call(item)`` for every item, :func:`concurrency` at a time on this process's threads, in order;
        an item whose call raised a :class:`~datareel.errors.DatasetError` gives that error instead."""
        if self._pid != os.getpid():
            self._fresh()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="datareel-get")

        def run(item: Any) -> T | DatasetError:
            try:
                return call(item)
            except DatasetError as exc:
                return exc

        return list(self._pool.map(run, items)) if len(items) > 1 else [run(item) for item in items]

    def read(self, path: str) -> bytes:
        return self._call(path, "reading it", lambda client, key: client.read(key))

    def write(self, path: str, data: bytes) -> None:
        self._call(path, "writing it", lambda client, key: client.write(key, data))

    def delete(self, path: str) -> None:
        self._call(path, "deleting it", lambda client, key: client.delete(key))

    def list(self, prefix: str) -> list[str]:
        """URLs of the objects under the directory ``prefix`` (a URL), sorted."""
        base = prefix.rstrip("/")

        def names(client: Client, key: str) -> list[str]:
            key = key.rstrip("/")
            found = client.list(key)
            return sorted(f"{base}/{name[len(key) :].lstrip('/')}" if key else f"{base}/{name}" for name in found)

        return self._call(base, "listing it", names)

    def download(self, path: str, target: str) -> None:
        """Copy the object ``path`` to the local file ``target`` (streamed, not held in memory)."""
        self._call(path, "downloading it", lambda client, key: client.download(key, target), deadline=False)

    def upload(self, source: str, path: str) -> None:
        """Copy the local file ``source`` to the object ``path`` (streamed, not held in memory)."""
        self._call(path, "uploading it", lambda client, key: client.upload(key, source), deadline=False)


def read_prefetched(fetched: dict[tuple[str, int, int], bytes], url: str, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of ``url``: taken out of ``fetched`` (what :meth:`RemoteFiles.read_ranges`
    got for the micro-batch), or, if not there (not announced, or its GET failed), one ranged GET of
    their own, with its own retries and errors."""
    got = fetched.pop((url, start, stop), None)
    return got if got is not None else remote_files().read_range(url, start, stop)


_PER_PROCESS: dict[int, RemoteFiles] = {}


def remote_files() -> RemoteFiles:
    """This process's remote backend (a forked worker makes its own, with its own connections)."""
    pid = os.getpid()
    files = _PER_PROCESS.get(pid)
    if files is None:
        _PER_PROCESS.clear()  # entries of a parent process are not ours to use
        files = _PER_PROCESS[pid] = RemoteFiles()
    return files


__all__ = [
    "COALESCE_GAP",
    "COALESCE_LIMIT",
    "ENV_ATTEMPTS",
    "ENV_CLIENT",
    "ENV_DEADLINE",
    "ENV_TIMEOUT",
    "RemoteFiles",
    "Retry",
    "coalesce",
    "concurrency",
    "make_client",
    "read_prefetched",
    "remote_files",
]
