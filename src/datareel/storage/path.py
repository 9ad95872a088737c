"""``RemotePath``: a URL of a store (``s3://``, ``msc://``, a registered scheme) with the part of
:class:`pathlib.Path`'s interface the metadata readers use (``/``, ``name``, ``suffix``, ``parent``,
``is_file``, ``read_text``, ``stat``), so one code path reads a dataset's metadata wherever it lives.
:func:`as_path` makes one of these or a ``Path`` from what the user passed.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from .registry import SCHEMES, files_for, is_remote, join, resolve_alias, scheme_of


@dataclass(frozen=True)
class _Stat:
    st_size: int


@dataclass(frozen=True)
class RemotePath:
    url: str

    def __str__(self) -> str:
        return self.url

    def __truediv__(self, other: str | os.PathLike[str]) -> RemotePath:
        return RemotePath(join(self.url, os.fspath(other)))

    @property
    def name(self) -> str:
        return posixpath.basename(self.url.rstrip("/"))

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    @property
    def parent(self) -> RemotePath:
        return RemotePath(join(self.url, ".."))

    def resolve(self) -> RemotePath:
        return self

    def is_file(self) -> bool:
        return files_for(self.url).exists(self.url)

    def exists(self) -> bool:
        return self.is_file()

    def is_dir(self) -> bool:
        """Whether objects lie under this prefix (buckets have no directories; a listing asks the store)."""
        try:
            return bool(files_for(self.url).list(self.url))
        except DatasetError:
            return False

    def read_bytes(self) -> bytes:
        return files_for(self.url).read(self.url)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def stat(self) -> _Stat:
        return _Stat(files_for(self.url).info(self.url).size)

    def glob(self, pattern: str) -> list[Any]:
        return []  # nothing of datareel's own is left aside in a bucket (see datareel.cli.atomic)


def location_of(path: Any) -> str:
    """What a path the user passed names, as a string: a URL of a store, or a local path.  ``str`` and
    ``os.PathLike`` objects as they are; a path object naming a store URL in its ``url`` attribute (a
    :class:`RemotePath`, ``datareel.energon``'s ``EPath``) by that URL — an ``EPath`` of a local file
    gives its local path (``os.fspath``)."""
    if isinstance(path, str):
        return path
    url = getattr(path, "url", None)
    if isinstance(url, str) and is_remote(url):
        return url
    if isinstance(path, os.PathLike):
        return os.fspath(path)
    if isinstance(url, str):
        return url
    raise DatasetError(f"{path!r} is not a path: pass a str, a pathlib.Path, a URL or an EPath")


def as_path(path: str | os.PathLike[str] | RemotePath) -> Path | RemotePath:
    """A :class:`RemotePath` for a URL of a store, a :class:`~pathlib.Path` for a local path (a ``file://``
    URL's path included); an ``EPath`` by what it names (:func:`location_of`).  A URL of a scheme no store
    is registered for is refused, naming the ones that are."""
    if isinstance(path, (RemotePath, Path)):
        return path
    path = resolve_alias(location_of(path))
    if is_remote(path):
        return RemotePath(str(path))
    scheme = scheme_of(path)
    if scheme == "file":
        return Path(str(path)[len("file://") :])
    if scheme is not None and scheme not in SCHEMES:
        files_for(str(path))  # raises, naming the registered schemes
    return Path(path)
