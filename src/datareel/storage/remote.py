"""Objects in buckets through NVIDIA's multi-storage-client (MSC), the library Energon uses.

``msc://profile/key`` uses the profile from MSC's usual configuration (``MSC_CONFIG``,
``~/.msc_config.yaml``, ...). ``s3://bucket/key`` uses MSC's implicit S3 profile, so the standard
AWS configuration applies as users expect (credentials and ``AWS_ENDPOINT_URL`` from the
environment or ``~/.aws``); datareel adds no config file of its own.

Each process makes its clients lazily (a DataLoader worker after fork gets its own) and reuses
them, so connections are reused too.  A transient failure (a 5xx or throttling answer, a reset or
timed-out connection, a body shorter than asked for) is retried with exponential backoff, at most
:attr:`Retry.attempts` times and within :attr:`Retry.deadline` seconds; a permanent one (403, 404)
is not.  Each try is one HTTP request: the clients are made with :class:`Retry`'s connect and read
timeouts and with MSC's and botocore's own retries turned off, so the count is the real one.  Every
failure ends in a :class:`~datareel.errors.StorageError` naming the URL (with the tries, the time
taken and the settings to change, where it was retried): a failure of the store, never of a sample.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from ..errors import AccessDenied, DatasetError, NotFound, OptionError, ShortBody, StorageError
from .base import StoreFiles
from .msc import _BOTOCORE_PROVIDERS as _BOTOCORE_PROVIDERS
from .msc import _msc, _profile_and_path, _transient, make_client
from .msc import _status as _status
from .objects import ObjectInfo, ObjectStat
from .retry import ENV_ATTEMPTS as ENV_ATTEMPTS
from .retry import ENV_DEADLINE as ENV_DEADLINE
from .retry import ENV_TIMEOUT as ENV_TIMEOUT
from .retry import Retry
from .retry import _seconds as _seconds

log = logging.getLogger("datareel")
T = TypeVar("T")


#: Ranges of one object at most this many bytes apart are fetched by one GET (the gap is read and dropped).
COALESCE_GAP = 64 << 10
#: ... as long as the merged GET stays at most this long.
COALESCE_LIMIT = 16 << 20


def coalesce(starts: np.ndarray, stops: np.ndarray, gap: int = COALESCE_GAP, limit: int = COALESCE_LIMIT) -> np.ndarray:
    """Group byte ranges of one object into GETs: ranges sorted by start, a new GET wherever the next
    range begins more than ``gap`` bytes after the current GET's end or would make it longer than
    ``limit``. starts, stops: int64[k] -> group number of each range int64[k] (0-based, in start order)."""
    order = np.argsort(starts, kind="stable")  # (k,)
    group = np.empty(len(starts), dtype=np.int64)
    current, first, end = -1, 0, -1
    for i in order.tolist():  # k is one micro-batch: a plain loop over it is cheap
        start, stop = int(starts[i]), int(stops[i])
        if current < 0 or start > end + gap or max(end, stop) - first > limit:
            current, first, end = current + 1, start, stop
        else:
            end = max(end, stop)
        group[i] = current
    return group


def concurrency() -> int:
    """Ranged GETs one process keeps in flight for a micro-batch: ``DATAREEL_REMOTE_CONCURRENCY`` (default 8)."""
    value = os.environ.get("DATAREEL_REMOTE_CONCURRENCY", "8")
    if not value.isdigit() or not 1 <= int(value) <= 256:
        raise OptionError(
            f"DATAREEL_REMOTE_CONCURRENCY={value!r} must be a whole number from 1 to 256 (GETs in flight per process)"
        )
    return int(value)


class RemoteFiles(StoreFiles):
    """:class:`~datareel.storage.Files` for ``s3://`` and ``msc://`` URLs; one instance per process."""

    prefetches = True  # each request costs a round trip: a micro-batch's ranges are fetched together

    def __init__(self, retry: Retry | None = None):
        self.retry = retry or Retry.from_env()
        self.requests = 0  # requests sent by this process (tries included), for the cost figures
        self._clients: dict[str, tuple[Any, str]] = {}  # url -> (client, path in it)
        self._profiles: dict[str, Any] = {}  # MSC profile -> this process's client of it
        self._count = threading.Lock()
        self._making = threading.Lock()
        self.concurrency = concurrency()  # checked when the first remote path is opened, not mid-run
        self._pool: ThreadPoolExecutor | None = None

    def _resolve(self, url: str) -> tuple[Any, str]:
        """The MSC client and the object path inside it for ``url`` (cached per process)."""
        found = self._clients.get(url)
        if found is None:
            try:
                profile, path = _profile_and_path(url)
                with self._making:
                    client = self._profiles.get(profile)
                    if client is None:
                        client = self._profiles[profile] = make_client(profile, self.retry)
            except (ValueError, KeyError) as exc:
                raise DatasetError(f"{url}: {exc}; check the URL (s3://bucket/key or msc://profile/key)") from None
            found = self._clients[url] = (client, path)
        return found

    def _call(self, url: str, what: str, call: Callable[[Any, str], T], *, deadline: bool = True) -> T:
        """Run ``call(client, path)`` with the retry policy (``deadline``: within :attr:`Retry.deadline`);
        every failure becomes a :class:`~datareel.errors.StorageError` naming ``url``."""
        client, path = self._resolve(url)
        retry, started = self.retry, time.monotonic()
        limit = retry.deadline if deadline else None
        longest_try = retry.connect_timeout + retry.read_timeout
        attempt = 0
        while True:
            with self._count:
                self.requests += 1
            try:
                return call(client, path)
            except Exception as exc:
                if isinstance(exc, FileNotFoundError):
                    raise NotFound(f"{url} does not exist ({what})") from None
                if isinstance(exc, PermissionError):
                    raise AccessDenied(f"{url}: access denied ({what}): {exc}; check the credentials") from None
                attempt += 1
                elapsed = time.monotonic() - started
                wait = retry.delay(attempt - 1)
                late = limit is not None and elapsed + wait + longest_try > limit
                if not _transient(exc):
                    raise StorageError(f"{url}: {what} failed: {type(exc).__name__}: {exc}") from exc
                if attempt == retry.attempts or late:
                    why = f"another try could end after the {limit:g} s deadline" if late and limit else "no tries left"
                    raise StorageError(
                        f"{url}: {what} failed after {attempt} {'try' if attempt == 1 else 'tries'} in "
                        f"{elapsed:.1f} s ({why}): {type(exc).__name__}: {exc}; check that the store answers at this "
                        f"endpoint (AWS_ENDPOINT_URL or the MSC profile) and the network, or wait longer with "
                        f"{retry.settings()}"
                    ) from exc
                log.debug("%s: %s failed (%s); retry %d in %.2f s", url, what, exc, attempt, wait)
                time.sleep(wait)

    def info(self, path: str) -> ObjectInfo:
        meta = self._call(path, "reading its size", lambda client, key: client.info(key))
        if getattr(meta, "type", "file") == "directory":
            raise NotFound(f"{path} is a prefix (a directory), not an object")
        etag = getattr(meta, "etag", None)
        return ObjectInfo(int(meta.content_length), str(etag) if etag else None)

    def stat(self, path: str) -> ObjectStat:
        """The store's own answer on ``path`` (an object or a prefix), last change included; asked anew each time."""
        meta = self._call(path, "reading its metadata", lambda client, key: client.info(key))
        etag = getattr(meta, "etag", None)
        return ObjectStat(
            key=str(meta.key),
            content_length=int(meta.content_length or 0),
            last_modified=getattr(meta, "last_modified", None),
            etag=str(etag) if etag else None,
            type=str(getattr(meta, "type", "file") or "file"),
        )

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except NotFound:
            return False
        return True

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        if stop == start:
            return b""
        Range = _msc().types.Range

        def get(client: Any, key: str) -> bytes:
            data = client.read(key, byte_range=Range(offset=start, size=stop - start))
            if len(data) != stop - start:
                raise ShortBody(f"got {len(data)} of {stop - start} bytes")
            return bytes(data)

        return self._call(path, f"reading bytes [{start}, {stop})", get)

    def read_ranges(self, wanted: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int, int], bytes]:
        """Many ranges ``(url, start, stop)`` at once, for one micro-batch: ranges of one object close
        together are fetched by one GET (:func:`coalesce`), and the GETs run :func:`concurrency` at a
        time on this process's threads, each with the retry policy. Ranges whose GET failed are left
        out (nothing is raised here): the caller reads each of those alone, with its own retries, and
        reports a failure for exactly that sample, as without prefetching."""
        by_url: dict[str, list[tuple[int, int]]] = {}
        for url, start, stop in set(wanted):
            by_url.setdefault(url, []).append((start, stop))
        jobs: list[tuple[str, int, int, list[tuple[int, int]]]] = []  # one GET: url, start, stop, its ranges
        for url, ranges in by_url.items():
            self._resolve(url)  # a URL no profile resolves fails here, once
            starts = np.array([r[0] for r in ranges], dtype=np.int64)
            stops = np.array([r[1] for r in ranges], dtype=np.int64)
            group = coalesce(starts, stops)
            for g in range(int(group.max()) + 1):
                members = [ranges[i] for i in np.flatnonzero(group == g).tolist()]
                jobs.append((url, min(r[0] for r in members), max(r[1] for r in members), members))
        out: dict[tuple[str, int, int], bytes] = {}
        for (url, first, _, members), got in zip(jobs, self.each(lambda job: self.read_range(*job[:3]), jobs)):
            if isinstance(got, DatasetError):
                log.debug("prefetching %d ranges of %s failed (%s); they are read one by one", len(members), url, got)
                continue
            for start, stop in members:
                out[url, start, stop] = got[start - first : stop - first]
        return out

    def each(self, call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]:
        """``call(item)`` for every item, :func:`concurrency` at a time on this process's threads, in order;
        an item whose call raised a :class:`~datareel.errors.DatasetError` gives that error instead."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="datareel-get")

        def run(item: Any) -> T | DatasetError:
            try:
                return call(item)
            except DatasetError as exc:
                return exc

        return list(self._pool.map(run, items)) if len(items) > 1 else [run(item) for item in items]

    def read(self, path: str) -> bytes:
        return self._call(path, "reading it", lambda client, key: bytes(client.read(key)))

    def write(self, path: str, data: bytes) -> None:
        self._call(path, "writing it", lambda client, key: client.write(key, data))

    def delete(self, path: str) -> None:
        self._call(path, "deleting it", lambda client, key: client.delete(key))

    def list(self, prefix: str) -> list[str]:
        """URLs of the objects under the directory ``prefix`` (a URL), sorted."""
        base = prefix.rstrip("/")

        def names(client: Any, key: str) -> list[str]:
            key = key.rstrip("/")
            found = [meta.key for meta in client.list(f"{key}/" if key else "")]
            return sorted(f"{base}/{name[len(key) :].lstrip('/')}" if key else f"{base}/{name}" for name in found)

        return self._call(base, "listing it", names)

    def download(self, path: str, target: str) -> None:
        """Copy the object ``path`` to the local file ``target`` (streamed, not held in memory)."""
        self._call(path, "downloading it", lambda client, key: client.download_file(key, target), deadline=False)

    def upload(self, source: str, path: str) -> None:
        """Copy the local file ``source`` to the object ``path`` (streamed, not held in memory)."""
        self._call(path, "uploading it", lambda client, key: client.upload_file(key, source), deadline=False)


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
