"""NVIDIA's multi-storage-client (MSC) as datareel uses it: a client per profile made with
:class:`~datareel.storage.retry.Retry`'s timeouts and with MSC's and botocore's own retries off
(:func:`make_client`), the operations :class:`~datareel.storage.remote.RemoteFiles` asks of it
(:class:`MscClient`), and the rule that says which failures are worth another try (:func:`_transient`).

It serves ``msc://`` URLs (Energon's configuration), and ``s3://`` ones where
``DATAREEL_S3_CLIENT=msc`` asks for today's path (:mod:`.object_store` serves them otherwise)."""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

from ..errors import DatasetError, ShortBody
from .objects import ObjectStat
from .retry import Retry

log = logging.getLogger("datareel")


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
    turned off, so that :meth:`~datareel.storage.remote.RemoteFiles._call` is the only retry loop and each
    try one request."""
    msc = _msc()
    from multistorageclient.config import StorageClientConfig, create_implicit_profile_config

    found, _ = StorageClientConfig.read_msc_config()
    config = copy.deepcopy(dict(found or {}))
    profiles = config["profiles"] = dict(config.get("profiles") or {})
    implicit = profile.startswith("_") and "-" in profile
    if profile not in profiles and not implicit:
        profiles.update({k: v for k, v in _rclone_profiles().items() if k not in profiles})
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


def _rclone_profiles() -> dict[str, Any]:
    """The profiles MSC reads from rclone's configuration (``rclone.conf``), as MSC's own config dict has them."""
    try:
        from multistorageclient.rclone import read_rclone_config
    except ImportError:
        return {}
    found, _ = read_rclone_config()
    return copy.deepcopy(dict((found or {}).get("profiles") or {}))


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


class MscClient:
    """One MSC client (of one profile) as :class:`~datareel.storage.remote.RemoteFiles` uses it: each
    method is one try of one operation on the object ``key`` in the profile (MSC's retries are off)."""

    batched = False  # a micro-batch's GETs run on RemoteFiles' threads, one call each
    name = "multi-storage-client"

    def __init__(self, client: Any):
        self.client = client

    @staticmethod
    def transient(exc: BaseException) -> bool:
        return _transient(exc)

    def stat(self, key: str, directories: bool = True) -> ObjectStat:
        meta = self.client.info(key)  # MSC tells a prefix from a missing object itself
        etag = getattr(meta, "etag", None)
        return ObjectStat(
            key=str(meta.key),
            content_length=int(meta.content_length or 0),
            last_modified=getattr(meta, "last_modified", None),
            etag=str(etag) if etag else None,
            type=str(getattr(meta, "type", "file") or "file"),
        )

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        data = self.client.read(key, byte_range=_msc().types.Range(offset=start, size=stop - start))
        if len(data) != stop - start:
            raise ShortBody(f"got {len(data)} of {stop - start} bytes")
        return bytes(data)

    def read(self, key: str) -> bytes:
        return bytes(self.client.read(key))

    def write(self, key: str, data: bytes) -> None:
        self.client.write(key, data)

    def delete(self, key: str) -> None:
        self.client.delete(key)

    def list(self, key: str) -> list[str]:
        """Keys of the objects under the directory ``key`` ("" for the profile's root)."""
        return [meta.key for meta in self.client.list(f"{key}/" if key else "")]

    def download(self, key: str, target: str) -> None:
        self.client.download_file(key, target)

    def upload(self, key: str, source: str) -> None:
        self.client.upload_file(key, source)
