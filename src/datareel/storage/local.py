"""The local file system as :class:`~datareel.storage.Files` (descriptors opened per call: callers
that read one file often keep their own)."""

from __future__ import annotations

import os
import stat
import uuid

from ..errors import DatasetError, StorageError
from . import NotFound, ObjectInfo


class LocalFiles:
    def info(self, path: str) -> ObjectInfo:
        try:
            found = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"{path} does not exist") from None
        except OSError as exc:
            raise StorageError(f"{path}: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(found.st_mode):
            raise NotFound(f"{path} is not a file")
        return ObjectInfo(found.st_size)

    def exists(self, path: str) -> bool:
        return os.path.isfile(path)

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise NotFound(f"{path} does not exist") from None
        except OSError as exc:
            raise StorageError(f"{path}: {exc.strerror or exc}") from exc
        try:
            data = os.pread(fd, stop - start, start)
        finally:
            os.close(fd)
        if len(data) != stop - start:
            raise DatasetError(f"{path}: read {len(data)} of {stop - start} bytes at {start}; the file is shorter")
        return data

    def read(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise NotFound(f"{path} does not exist") from None
        except OSError as exc:
            raise StorageError(f"{path}: {exc.strerror or exc}") from exc

    def write(self, path: str, data: bytes) -> None:
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


LOCAL = LocalFiles()
