"""File objects for :class:`~.epath.EPath` on objects in a store (through :mod:`datareel.storage`): reading
by ranged GETs behind a buffer (or the whole object at once), writing into memory and storing the object
when the file is closed; and a local file's :class:`~datareel.storage.objects.ObjectStat`."""

from __future__ import annotations

import io
import os
from datetime import datetime, timezone
from typing import IO, Any

from ...storage.objects import ObjectStat
from ...storage.registry import files_for

BLOCK = 8 << 20
"""Bytes one ranged GET of a streamed read asks for (unless ``block_size`` says otherwise)."""


class _Ranged(io.RawIOBase):
    """An object read by ranges, as a raw file (seekable)."""

    def __init__(self, url: str) -> None:
        self.url, self.files = url, files_for(url)
        self.length = self.files.info(url).size
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        stop = min(self.length, self.pos + len(buffer))
        if stop <= self.pos:
            return 0
        data = self.files.read_range(self.url, self.pos, stop)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


class _Upload(io.BytesIO):
    """Written bytes, stored as the object ``url`` when closed (a store takes whole objects)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def close(self) -> None:
        if not self.closed:
            files_for(self.url).write(self.url, self.getvalue())
        super().close()


def open_remote(url: str, mode: str, *, block_size: int | None = None, whole: bool = False) -> IO[Any]:
    """``url`` opened in ``mode`` (``r``, ``rb``, ``w``, ``wb``); ``whole``: read it in one GET."""
    if mode.startswith("w"):
        raw: IO[bytes] = _Upload(url)
        return io.TextIOWrapper(raw, encoding="utf-8", write_through=True) if mode == "w" else raw
    if whole:
        raw = io.BytesIO(files_for(url).read(url))
    else:
        raw = io.BufferedReader(_Ranged(url), buffer_size=block_size or BLOCK)
    return io.TextIOWrapper(raw, encoding="utf-8") if mode == "r" else raw


def local_stat(path: str) -> ObjectStat:
    found = os.stat(path)
    return ObjectStat(
        key=path,
        content_length=found.st_size,
        last_modified=datetime.fromtimestamp(found.st_mtime, tz=timezone.utc),
        etag=None,
        type="directory" if os.path.isdir(path) else "file",
    )
