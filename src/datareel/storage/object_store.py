"""Objects in ``s3://``, ``gs://`` and ``az://`` buckets through obstore (the Rust ``object_store`` crate).

The client datareel uses for ``s3://`` by default: about a tenth of the client CPU per ranged GET of
multi-storage-client over boto3 (``benchmarks/bench_get_cpu.py``), and one call fetches a micro-batch's
ranges of one object (``obstore.get_ranges``).  Set ``DATAREEL_S3_CLIENT=msc`` to read ``s3://``
through multi-storage-client as before (:mod:`.msc`); ``msc://`` profiles always go through it.

Configured as each store's users expect, with no config file of datareel's own:

- ``s3://bucket/key``: credentials from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
  ``AWS_SESSION_TOKEN``, else from boto3's chain where boto3 is installed (``~/.aws/credentials``,
  ``~/.aws/config`` and ``AWS_PROFILE``, SSO, ``credential_process``, roles), else obstore's own (web
  identity, container and instance metadata); the region from ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` or
  the profile (default ``us-east-1``); an S3-compatible endpoint from ``AWS_ENDPOINT_URL_S3``,
  ``AWS_ENDPOINT_URL`` or the profile's ``endpoint_url`` (``http://`` is allowed when the endpoint says
  so), path-style; the other ``AWS_*`` variables obstore reads (``S3Config``).
- ``gs://bucket/key``: Google's application default credentials or ``GOOGLE_*`` variables.
- ``az://container/key``: the ``AZURE_STORAGE_*`` variables (account name, key or token).

Each process makes its stores lazily, one per bucket (a DataLoader worker after fork makes its own: the
cache is dropped when ``os.getpid()`` changes), with :class:`~datareel.storage.retry.Retry`'s connect and
read timeouts and obstore's own retries off, so that each try of
:meth:`~datareel.storage.remote.RemoteFiles._call` is one HTTP request.

**Fork.** obstore runs its requests on one Rust (tokio) runtime per process, started by the first request;
its threads do not survive ``fork``, and a forked child's requests would wait for them forever (obstore
0.12). So a process forked from one that had sent requests through obstore (:func:`runtime_here` is
false: a DataLoader worker under the default ``fork`` start method, after the main process read the
dataset's metadata) reads ``s3://`` through multi-storage-client instead, and refuses ``gs://`` and
``az://``. Workers started with ``multiprocessing_context="forkserver"`` (or ``"spawn"``) start without
that runtime and read through obstore.
"""

from __future__ import annotations

import logging
import os
import re
from datetime import timedelta
from typing import Any

from ..errors import DatasetError, OptionError, ShortBody
from .objects import ObjectStat
from .retry import Retry

#: ``obstore`` (default) or ``msc``: the client of ``s3://`` URLs.
ENV_CLIENT = "DATAREEL_S3_CLIENT"
CLIENTS = ("obstore", "msc")
#: The schemes obstore serves (``s3`` unless ``DATAREEL_S3_CLIENT=msc``).
SCHEMES = ("s3", "gs", "az")
#: Longest one request may take in all (a whole-object download of ``datareel prepare`` included); a
#: stalled one ends sooner, by the read timeout (each read of the answer waits at most that long).
REQUEST_LIMIT = timedelta(hours=1)

log = logging.getLogger("datareel")


#: The process whose obstore runtime runs (the first to send a request), or None: none has yet.
_RUNTIME_PID: int | None = None


def runtime_here() -> bool:
    """Whether obstore can send requests in this process: it has not, or it started its runtime itself
    (not inherited through ``fork`` from a process that had; see the module doc)."""
    return _RUNTIME_PID is None or _RUNTIME_PID == os.getpid()


_FALLBACK_SAID: dict[int, object] = {}  # pid -> token: the processes that said they read s3:// through MSC


def say_forked_fallback(url: str) -> None:
    """Log that this forked process reads ``url`` (and every s3:// URL) through multi-storage-client: once per
    process, whatever the thread, shard or backend (``setdefault`` is one atomic step: one caller wins)."""
    token = object()
    if _FALLBACK_SAID.setdefault(os.getpid(), token) is token:
        log.warning(
            "%s: this process was forked from one that had read through obstore (its runtime does not survive "
            "fork): s3:// is read through multi-storage-client here; multiprocessing_context='forkserver' "
            "gives the loader's workers obstore",
            url,
        )


def runtime_started_here() -> bool:
    """Whether this process itself started obstore's runtime (sent a request through it)."""
    return _RUNTIME_PID == os.getpid()


def s3_client() -> str:
    """The client of ``s3://`` URLs in this process: ``DATAREEL_S3_CLIENT`` (``obstore``, the default, or ``msc``)."""
    value = os.environ.get(ENV_CLIENT, "obstore").strip().lower() or "obstore"
    if value not in CLIENTS:
        raise OptionError(f"{ENV_CLIENT}={value!r} must be one of {', '.join(CLIENTS)} (the client of s3:// URLs)")
    return value


def _obstore() -> Any:
    try:
        import obstore
    except ImportError:
        raise DatasetError(
            f"reading s3://, gs:// or az:// datasets needs obstore: pip install 'datareel[remote]' "
            f"(or {ENV_CLIENT}=msc to read s3:// through multi-storage-client)"
        ) from None
    return obstore


def _options(retry: Retry, endpoint: str | None) -> tuple[Any, Any]:
    """obstore's client options (``retry``'s timeouts) and retry options (none of its own)."""
    client: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=retry.connect_timeout),
        "read_timeout": timedelta(seconds=retry.read_timeout),
        "timeout": REQUEST_LIMIT,
    }
    if endpoint and endpoint.lower().startswith("http://"):
        client["allow_http"] = True  # the user named a plain-HTTP endpoint (a local server)
    return client, {"max_retries": 0}


def _s3_store(bucket: str, retry: Retry) -> Any:
    from obstore.store import S3Store

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    provider = None
    anonymous = os.environ.get("AWS_SKIP_SIGNATURE", "").lower() in ("1", "true")
    if not os.environ.get("AWS_ACCESS_KEY_ID") and not anonymous:
        provider, profile = _boto3_credentials()
        region = region or profile.get("region")
        endpoint = endpoint or profile.get("endpoint_url") or (profile.get("s3") or {}).get("endpoint_url")
    client, retries = _options(retry, endpoint)
    config: Any = {"region": region or "us-east-1"}
    if endpoint:
        config["endpoint"] = endpoint
    return S3Store(bucket, config=config, client_options=client, retry_config=retries, credential_provider=provider)


def _boto3_credentials() -> tuple[Any, dict[str, Any]]:
    """boto3's credentials (a provider obstore calls when they expire) and the profile's settings, or
    ``(None, {})`` where boto3 is missing or finds none (obstore then looks on its own)."""
    try:
        import boto3
        import botocore.session
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        return None, {}
    core = botocore.session.get_session()
    try:
        profile = dict(core.get_scoped_config())
        if core.get_credentials() is None:
            return None, profile
        return Boto3CredentialProvider(boto3.Session(botocore_session=core)), profile
    except Exception as exc:  # a broken ~/.aws file, an unknown AWS_PROFILE: say so, as boto3 would
        raise DatasetError(f"the AWS configuration could not be read: {type(exc).__name__}: {exc}") from None


def make_store(scheme: str, bucket: str, retry: Retry) -> Any:
    """A new obstore store of ``bucket`` (``scheme`` one of :data:`SCHEMES`), configured as the module says."""
    _obstore()
    if scheme == "s3":
        return _s3_store(bucket, retry)
    client, retries = _options(retry, None)
    if scheme == "gs":
        from obstore.store import GCSStore

        return GCSStore(bucket, client_options=client, retry_config=retries)
    if scheme == "az":
        from obstore.store import AzureStore

        return AzureStore(bucket, client_options=client, retry_config=retries)
    raise DatasetError(f"{scheme}:// is not a scheme obstore serves here ({', '.join(SCHEMES)})")


def _etag(value: Any) -> str | None:
    """An ETag as multi-storage-client reports it (without quotes), so ``etags.json`` reads the same by both."""
    return str(value).strip('"') or None if value else None


class ObstoreClient:
    """One obstore store (one bucket) as :class:`~datareel.storage.remote.RemoteFiles` uses it: each method
    is one try (obstore's retries are off) of one operation on the object ``key``."""

    batched = True  # a micro-batch's ranges of one object: one get_ranges call (fetch)
    name = "obstore"

    def __init__(self, store: Any):
        self.store = store
        self.obs = _obstore()

    @staticmethod
    def transient(exc: BaseException) -> bool:
        return transient(exc)

    def stat(self, key: str, directories: bool = True) -> ObjectStat:
        """The object ``key`` (one HEAD); a prefix of other objects is reported as ``type="directory"`` where
        ``directories`` (a listing of one key more, only when there is no such object)."""
        try:
            with _denied():
                meta = self.obs.head(self.store, key)
        except FileNotFoundError:
            if not directories:
                raise
            try:
                with _denied():
                    below: Any = next(iter(self.obs.list(self.store, key.rstrip("/"), chunk_size=1)), [])
            except Exception:  # no bucket, no listing rights: it is not there as far as this reader can tell
                below = []
            if not below:
                raise
            return ObjectStat(key=key.rstrip("/"), content_length=0, last_modified=None, etag=None, type="directory")
        return ObjectStat(
            key=str(meta["path"]),
            content_length=int(meta["size"]),
            last_modified=meta.get("last_modified"),
            etag=_etag(meta.get("e_tag")),
        )

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        with _denied():
            data = self.obs.get_range(self.store, key, start=start, end=stop)
        if len(data) != stop - start:
            raise ShortBody(f"got {len(data)} of {stop - start} bytes")
        return bytes(data)

    def fetch(self, key: str, spans: list[tuple[int, int]]) -> list[bytes]:
        """Bytes of each ``(start, stop)`` of ``key``: one ``get_ranges`` call, one GET per span (they are
        coalesced already: obstore merges nothing more), run concurrently (at most 10 at once)."""
        with _denied():
            got = self.obs.get_ranges(
                self.store, key, starts=[s for s, _ in spans], ends=[e for _, e in spans], coalesce=0
            )
        for data, (start, stop) in zip(got, spans):
            if len(data) != stop - start:
                raise ShortBody(f"got {len(data)} of {stop - start} bytes")
        return [bytes(data) for data in got]

    def read(self, key: str) -> bytes:
        with _denied():
            return bytes(self.obs.get(self.store, key).bytes())

    def write(self, key: str, data: bytes) -> None:
        with _denied():
            self.obs.put(self.store, key, data)

    def delete(self, key: str) -> None:
        with _denied():
            self.obs.delete(self.store, key)

    def list(self, key: str) -> list[str]:
        """Keys of the objects under the directory ``key`` ("" for the whole bucket); one request per page."""
        with _denied():
            return [str(meta["path"]) for page in self.obs.list(self.store, key.rstrip("/") or None) for meta in page]

    def download(self, key: str, target: str) -> None:
        with _denied(), open(target, "wb") as out:
            for chunk in self.obs.get(self.store, key).stream():
                out.write(chunk)

    def upload(self, key: str, source: str) -> None:
        from pathlib import Path

        with _denied():
            self.obs.put(self.store, key, Path(source))


class _denied:
    """Around each obstore request: note the process whose runtime it starts (:func:`runtime_here`), and
    raise obstore's permission and authentication failures as :class:`PermissionError` (what
    :meth:`~datareel.storage.remote.RemoteFiles._call` reports as access denied)."""

    def __enter__(self) -> None:
        global _RUNTIME_PID
        if _RUNTIME_PID is None:
            _RUNTIME_PID = os.getpid()  # this request starts obstore's runtime in this process

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and type(exc).__name__ in ("PermissionDeniedError", "UnauthenticatedError"):
            raise PermissionError(describe(exc)) from None


_STATUS = re.compile(r"status[ _]code:? *(\d{3})", re.IGNORECASE)


def transient(exc: BaseException) -> bool:
    """Whether an obstore failure may go away on retry: a 5xx or 429 answer, a failed, dropped or timed-out
    connection (obstore's ``HTTP error``), a short body."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    if isinstance(exc, (ShortBody, ConnectionError, TimeoutError)):
        return True
    text = str(exc)
    status = _STATUS.search(text)
    if status is not None:
        return int(status[1]) >= 500 or int(status[1]) == 429
    return "HTTP error" in text


def describe(exc: BaseException) -> str:
    """``exc``'s message without the debug dump obstore appends to it."""
    return str(exc).split("\n\nDebug source:", 1)[0].strip()
