"""Where dataset bytes live: a local path, or an object in a bucket (``s3://``, ``msc://``).

One small protocol, :class:`Files`, is all the readers need: the size (and, remote, the ETag) of
an object, a byte range of it, the whole of a small one, and, for ``prepare``, writing one.
:func:`files_for` picks the backend from the path; :func:`join` resolves a relative path against
a local directory or a URL alike.

    files = files_for("s3://bucket/ds/shard-0.tar")
    header = files.read_range("s3://bucket/ds/shard-0.tar", 0, 512)   # one ranged GET

Remote backends keep one client per process, made lazily (after a DataLoader worker forks) and
reused; transient failures are retried with exponential backoff, a bounded number of times and
within a deadline (:class:`~datareel.storage.remote.Retry`), then raised naming the URL.  Every
failure of a store is a :class:`~datareel.errors.StorageError` (a failure of the environment, never
of a sample: it is not substituted), :class:`NotFound` and :class:`AccessDenied` among them.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Protocol

from ..errors import AccessDenied as AccessDenied
from ..errors import DatasetError, NotFound
from ..errors import StorageError as StorageError

REMOTE_SCHEMES = ("s3", "msc")


@dataclass(frozen=True)
class ObjectInfo:
    """An object's size in bytes and, where the store reports one, its ETag (``None`` locally)."""

    size: int
    etag: str | None = None


class Files(Protocol):
    """The operations dataset readers and ``prepare`` need from a store."""

    def info(self, path: str) -> ObjectInfo:
        """Size (and ETag); raises :class:`~datareel.errors.DatasetError` naming ``path`` if missing."""
        ...

    def exists(self, path: str) -> bool: ...

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``, exactly ``stop - start`` of them, or a DatasetError naming ``path``."""
        ...

    def read(self, path: str) -> bytes:
        """The whole object (for metadata and index files)."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Write the whole object; visible to readers only once complete."""
        ...


def is_remote(path: object) -> bool:
    """Whether ``path`` names an object in a bucket (``s3://...``, ``msc://...``)."""
    return isinstance(path, str) and path.split("://", 1)[0].lower() in REMOTE_SCHEMES and "://" in path


def join(base: str, relative: str) -> str:
    """``relative`` resolved against the directory ``base`` (a local path or a URL); an absolute path
    or a URL in ``relative`` is returned as it is.  In a URL, ``.`` and ``..`` segments are resolved
    one by one (other segments, empty ones included, are kept: object keys may hold ``//``); climbing
    above the bucket is an error."""
    if "://" in relative or relative.startswith("/"):
        return relative
    if not is_remote(base):
        return posixpath.normpath(posixpath.join(base, relative))
    scheme, rest = base.split("://", 1)
    bucket, _, key = rest.partition("/")
    segments = key.split("/") if key else []
    if segments and segments[-1] == "":
        segments.pop()  # a trailing slash names the same directory
    parts: list[str] = []
    for segment in segments + relative.split("/"):
        if segment == "..":
            if not parts:
                raise DatasetError(f"{relative!r} relative to {base} climbs above the bucket")
            parts.pop()
        elif segment != ".":
            parts.append(segment)
    return f"{scheme}://{bucket}" + "".join(f"/{p}" for p in parts)


def files_for(path: str) -> Files:
    """The backend for ``path``: the process's remote client for URLs, the local file system otherwise."""
    if is_remote(path):
        from .remote import remote_files

        return remote_files()
    from .local import LOCAL

    return LOCAL


__all__ = ["REMOTE_SCHEMES", "Files", "NotFound", "ObjectInfo", "files_for", "is_remote", "join"]
