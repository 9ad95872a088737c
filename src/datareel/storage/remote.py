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

import copy
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..errors import DatasetError, OptionError, ShortBody, StorageError, check_int
from . import AccessDenied, NotFound, ObjectInfo

log = logging.getLogger("datareel")
T = TypeVar("T")

#: The environment variables :meth:`Retry.from_env` reads (a DataLoader worker inherits them).
ENV_ATTEMPTS = "DATAREEL_REMOTE_ATTEMPTS"
ENV_TIMEOUT = "DATAREEL_REMOTE_TIMEOUT"
ENV_DEADLINE = "DATAREEL_REMOTE_DEADLINE"


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How often and how long a remote request is tried before it fails.

    - ``attempts``: tries in all (``DATAREEL_REMOTE_ATTEMPTS``). Each try is one HTTP request (a listing:
      one per page; a whole-object download: one per part), since MSC's and botocore's own retries are off.
    - Between tries: ``first_delay · 2^k`` seconds (at most ``max_delay``, with up to 10% jitter).
    - ``connect_timeout`` / ``read_timeout``: seconds one request waits to connect, and for each chunk of
      its answer (``DATAREEL_REMOTE_TIMEOUT`` sets both).
    - ``deadline``: seconds one read may take in all, its tries and waits included
      (``DATAREEL_REMOTE_DEADLINE``; ``None``: no deadline). No try is started that could end later (its
      timeouts counted in full), so a read from a store that accepts connections and never answers fails
      within ``max(deadline, connect_timeout + read_timeout)`` seconds. Downloads of whole objects
      (``datareel prepare`` on a bucket) have no deadline: their tries are bounded by ``attempts``.

    Defaults: 6 tries, 0.1 s doubling to at most 5 s, 10 s to connect, 30 s per read, 120 s a read.
    """

    attempts: int = 6
    first_delay: float = 0.1
    max_delay: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    deadline: float | None = 120.0

    def __post_init__(self) -> None:
        check_int(self.attempts, "attempts", minimum=1, maximum=100, where="Retry")
        for name in ("first_delay", "max_delay"):
            _seconds(getattr(self, name), f"Retry({name}=...)", minimum=0)
        for name in ("connect_timeout", "read_timeout"):
            _seconds(getattr(self, name), f"Retry({name}=...)", minimum=0.001)
        if self.deadline is not None:
            _seconds(self.deadline, "Retry(deadline=...)", minimum=0.001, maximum=86400)

    @classmethod
    def from_env(cls) -> Retry:
        """The defaults, changed by ``DATAREEL_REMOTE_ATTEMPTS`` (tries), ``DATAREEL_REMOTE_TIMEOUT`` (seconds
        to connect and per read of each request) and ``DATAREEL_REMOTE_DEADLINE`` (seconds per read in all;
        ``none`` for no deadline)."""
        values: dict[str, Any] = {}
        attempts = os.environ.get(ENV_ATTEMPTS)
        if attempts is not None:
            if not attempts.strip().isdigit() or not 1 <= int(attempts) <= 100:
                raise OptionError(f"{ENV_ATTEMPTS}={attempts!r} must be a whole number of tries from 1 to 100")
            values["attempts"] = int(attempts)
        timeout = os.environ.get(ENV_TIMEOUT)
        if timeout is not None:
            values["connect_timeout"] = values["read_timeout"] = _seconds(timeout, ENV_TIMEOUT, minimum=0.001)
        deadline = os.environ.get(ENV_DEADLINE)
        if deadline is not None:
            none = deadline.strip().lower() in ("none", "")
            values["deadline"] = None if none else _seconds(deadline, ENV_DEADLINE, minimum=0.001, maximum=86400)
        return cls(**values)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try ``attempt`` (0-based)."""
        base = min(self.max_delay, self.first_delay * 2**attempt)
        return base * (1 + 0.1 * random.random())

    def settings(self) -> str:
        """The settings a failed read names, with the variables that change them."""
        deadline = "none" if self.deadline is None else f"{self.deadline:g} s"
        return (
            f"{ENV_TIMEOUT} (each request; now {self.connect_timeout:g} s to connect, {self.read_timeout:g} s per "
            f"read), {ENV_ATTEMPTS} (now {self.attempts}) or {ENV_DEADLINE} (each read in all; now {deadline})"
        )


def _seconds(value: Any, name: str, *, minimum: float, maximum: float = 600) -> float:
    """``value`` (a number, or its text from an environment variable) as seconds in ``[minimum, maximum]``."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not minimum <= number <= maximum:
        raise OptionError(f"{name} is {value!r}; it must be a number of seconds from {minimum:g} to {maximum:g}")
    return float(number)


def _msc() -> Any:
    try:
        import multistorageclient
    except ImportError:
        raise DatasetError(
            "reading s3:// or msc:// datasets needs multi-storage-client with its S3 support: "
            "pip install 'datareel[remote]'"
        ) from None
    return multistorageclient


#: MSC storage provider types that are botocore clients (they take botocore's timeouts and retries).
_BOTOCORE_PROVIDERS = frozenset({"s3", "s8k", "ais_s3", "gcs_s3", "s3_cuobject"})


def _profile_and_path(url: str) -> tuple[str, str]:
    """The MSC profile ``url`` belongs to and the object's path in it, as MSC resolves them (a path mapping
    of MSC's configuration, else ``msc://profile/...`` or the implicit ``_s3-bucket`` profile)."""
    _msc()
    try:
        from multistorageclient.shortcuts import _resolve_msc_url, _resolve_non_msc_url
    except ImportError:  # another MSC release: let it make its client, and read the profile off it
        client, path = _msc().resolve_storage_client(url)
        return client.profile, path
    return (_resolve_msc_url if url.startswith("msc://") else _resolve_non_msc_url)(url)


def make_client(profile: str, retry: Retry) -> Any:
    """A client of MSC ``profile`` made from MSC's configuration as MSC makes it (or its implicit profile
    for ``s3://bucket``), with ``retry``'s connect and read timeouts and with MSC's retries and botocore's
    turned off, so that :meth:`RemoteFiles._call` is the only retry loop and each try one request."""
    msc = _msc()
    from multistorageclient.config import StorageClientConfig, create_implicit_profile_config

    found, _ = StorageClientConfig.read_msc_config()
    config = copy.deepcopy(dict(found or {}))
    profiles = config["profiles"] = dict(config.get("profiles") or {})
    implicit = profile.startswith("_") and "-" in profile
    if profile not in profiles:
        if not implicit:  # a profile only MSC knows where to find (rclone's configuration): MSC's defaults
            log.warning("MSC makes profile %r itself: datareel's timeouts and retry count do not apply", profile)
            return msc.StorageClient(StorageClientConfig.from_file(profile=profile))
        protocol, _, bucket = profile[1:].partition("-")
        profiles[profile] = create_implicit_profile_config(profile, protocol, bucket)["profiles"][profile]
    entry = profiles[profile] = copy.deepcopy(dict(profiles[profile]))
    provider = entry.get("storage_provider")
    if isinstance(provider, dict) and provider.get("type") in _BOTOCORE_PROVIDERS:
        options = provider["options"] = dict(provider.get("options") or {})
        options["connect_timeout"], options["read_timeout"] = retry.connect_timeout, retry.read_timeout
        options["retries"] = {"total_max_attempts": 1, "mode": "standard"}
    entry["retry"] = {"attempts": 1, "delay": 0.0}  # what a multi-backend profile's children inherit
    made = StorageClientConfig.from_dict(config, profile=profile, skip_validation=implicit)
    made.retry_config = None  # one call per try, and none of MSC's "attempt failed" logging for each
    return msc.StorageClient(made)


_STATUS = re.compile(r"status[ _]code:? *(\d{3})", re.IGNORECASE)
_TRANSIENT_TYPES = {
    "RetryableError",  # MSC's: 5xx answers and throttling it recognises
    "BotoCoreError",  # botocore's connection, read and streaming errors
    "ConnectionClosedError",
    "ReadTimeoutError",
    "EndpointConnectionError",
    "IncompleteReadError",
    "ResponseStreamingError",
}


def _status(exc: BaseException) -> int | None:
    """The HTTP status behind a failure: botocore's response, or the code MSC writes into its message."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(code, int):
            return code
    match = _STATUS.search(str(exc))
    return int(match[1]) if match else None


def _transient(exc: BaseException) -> bool:
    """Whether a failure may go away on retry: a 5xx or 429 answer, throttling, a dropped or timed-out
    connection, a short body; anywhere in the exception's chain of causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (FileNotFoundError, PermissionError, IsADirectoryError)):
            return False
        if isinstance(current, (ShortBody, ConnectionError, TimeoutError)):
            return True
        if {cls.__name__ for cls in type(current).__mro__} & _TRANSIENT_TYPES:
            return True
        status = _status(current)
        if status is not None:
            return status >= 500 or status == 429
        current = current.__cause__ or current.__context__
    return False


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


class RemoteFiles:
    """:class:`~datareel.storage.Files` for ``s3://`` and ``msc://`` URLs; one instance per process."""

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
