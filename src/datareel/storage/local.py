"""The local file system as :class:`~datareel.storage.Files`: plain paths and ``file://`` URLs.

Formats' handles (a file's descriptor and its offsets) are kept in the process's bounded set of open
files (:mod:`.handles`); one-off calls (``info``, ``read_range``, ``read``) open the file per call.
"""

from __future__ import annotations

import mmap
import os
import stat
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..errors import DatasetError, NotFound, StorageError
from .base import Range, each_in_turn
from .handles import Descriptor, OpenShards, handles
from .objects import ObjectInfo

T = TypeVar("T")


def local_name(path: str) -> str:
    """The file system path of ``path`` (a ``file://`` URL loses its scheme)."""
    return path[len("file://") :] if path[:7].lower() == "file://" else path


def _open(path: str) -> int:
    try:
        return os.open(local_name(path), os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        raise NotFound(f"{path} does not exist") from None
    except OSError as exc:
        raise StorageError(f"{path}: {exc.strerror or exc}") from exc


class LocalFiles:
    prefetches = False  # a positioned read costs a system call: nothing to gain by announcing them

    def info(self, path: str) -> ObjectInfo:
        try:
            found = os.stat(local_name(path))
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"{path} does not exist") from None
        except OSError as exc:
            raise StorageError(f"{path}: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(found.st_mode):
            raise NotFound(f"{path} is not a file")
        return ObjectInfo(found.st_size)

    def exists(self, path: str) -> bool:
        return os.path.isfile(local_name(path))

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        fd = _open(path)
        try:
            data = os.pread(fd, stop - start, start)
        finally:
            os.close(fd)
        if len(data) != stop - start:
            raise DatasetError(f"{path}: read {len(data)} of {stop - start} bytes at {start}; the file is shorter")
        return data

    def read_ranges(self, wanted: Sequence[Range]) -> dict[Range, bytes]:
        out: dict[Range, bytes] = {}
        for item in wanted:
            try:
                out[item] = self.read_range(*item)
            except DatasetError:
                continue  # read alone later, raising what is wrong
        return out

    def read(self, path: str) -> bytes:
        try:
            with open(local_name(path), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise NotFound(f"{path} does not exist") from None
        except OSError as exc:
            raise StorageError(f"{path}: {exc.strerror or exc}") from exc

    def view(self, path: str, map_from: int | None = None) -> Any:
        """The whole file: memory-mapped (shared, reclaimable pages; one more descriptor while mapped) when it
        has ``map_from`` bytes or more, else read into ``bytes``."""
        fd = os.open(local_name(path), os.O_RDONLY)  # FileNotFoundError: the caller names what is missing
        try:
            size = os.fstat(fd).st_size
            if map_from is not None and size >= map_from and size:
                return mmap.mmap(fd, size, prot=mmap.PROT_READ)
            data = b""
            while len(data) < size:  # a regular file reads whole; loop anyway rather than trust it
                chunk = os.pread(fd, size - len(data), len(data))
                if not chunk:
                    raise DatasetError(f"{path} shrank from {size} bytes while it was read")
                data += chunk
            return data
        finally:
            os.close(fd)

    def write(self, path: str, data: bytes) -> None:
        path = local_name(path)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def delete(self, path: str) -> None:
        try:
            os.unlink(local_name(path))
        except FileNotFoundError:
            raise NotFound(f"{path} does not exist") from None

    def list(self, prefix: str) -> list[str]:
        """Paths of the files under the directory ``prefix``, sorted."""
        base = prefix.rstrip("/")
        found = []
        for folder, _, names in os.walk(local_name(base)):
            relative = os.path.relpath(folder, local_name(base))
            found += [f"{base}/{name}" if relative == "." else f"{base}/{relative}/{name}" for name in names]
        return sorted(found)

    def download(self, path: str, target: str) -> None:
        import shutil

        shutil.copyfile(local_name(path), target)

    def open(self, path: str) -> Descriptor:
        """The file opened for reading: :class:`~datareel.errors.NotFound` if missing, the ``OSError`` of any
        other failure as it is (the open-file set frees descriptors on ``EMFILE`` and tries again)."""
        try:
            return Descriptor(os.open(local_name(path), os.O_RDONLY))
        except FileNotFoundError:
            raise NotFound(f"{path} does not exist") from None

    def handle_cache(self) -> OpenShards:
        """The process's bounded set of open files (:func:`~datareel.storage.handles.handles`), shared by every
        reader: descriptors are the process's to ration."""
        return handles()

    def each(self, call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]:
        return each_in_turn(call, items)


LOCAL = LocalFiles()
