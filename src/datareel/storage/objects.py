"""What one stored object is to a reader: its :class:`ObjectInfo` (size, ETag), and :class:`Opened`, the
object opened for reading (a local descriptor, or an object in a store)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class ObjectInfo:
    """An object's size in bytes and, where the store reports one, its ETag (``None`` locally)."""

    size: int
    etag: str | None = None


@dataclass(frozen=True)
class ObjectStat:
    """What a store says about one object or prefix when asked directly (``RemoteFiles.stat``): its key in
    the store, size, last change, ETag, and ``type`` ``"file"`` or ``"directory"``."""

    key: str
    content_length: int
    last_modified: datetime | None
    etag: str | None
    type: str = "file"


class Opened(Protocol):
    """One object opened for reading (a local descriptor, or an object in a store)."""

    def info(self) -> ObjectInfo:
        """Its size (and ETag); an object that is gone raises :class:`~datareel.errors.NotFound`."""
        ...

    def read_range(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``; fewer only where the object ends sooner (the caller says what that means)."""
        ...

    def close(self) -> None: ...
