"""Refusals of ``datareel prepare``'s writes, by name: a directory prepare cannot write into (read-only, full,
another owner's) is found before the long scan where it can be, and an ``OSError`` of a write becomes a
:class:`DatasetError` that names the path and the fix, in the format's own words."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import DatasetError


def cannot_write(exc: OSError, path: str | os.PathLike, fix: str) -> DatasetError:
    """The error for an ``OSError`` writing into ``path``: the path, why (the system's words), ``fix``."""
    return DatasetError(f"cannot write into {os.fsdecode(path)}: {exc.strerror or exc}; {fix}")


@contextlib.contextmanager
def writing(folder: str | os.PathLike, fix: str) -> Iterator[None]:
    """Inside, an ``OSError`` (a write into ``folder``: read-only, full, gone) is :func:`cannot_write` naming
    the file the error names (else ``folder``) and ``fix``; a :class:`DatasetError` passes as it is."""
    try:
        yield
    except DatasetError:
        raise
    except OSError as exc:
        if exc.filename is None and exc.errno not in REFUSED:
            raise  # not the file system's (a connection reset on a download): as it is
        named = exc.filename if isinstance(exc.filename, (str, os.PathLike)) else folder
        raise cannot_write(exc, named, fix) from exc


REFUSED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""What a file system answers a write it refuses, when the error names no file (a full disk mid-write)."""


def probe(folder: str | os.PathLike, fix: str) -> None:
    """Create and remove a file in ``folder``, or raise :func:`cannot_write`: what ``os.access`` cannot tell
    (root ignores permission bits, yet a read-only mount, an ACL or a full disk still refuses it)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".datareel-probe-", dir=folder)
    except OSError as exc:
        raise cannot_write(exc, folder, fix) from None
    os.close(fd)
    os.unlink(name)


@contextlib.contextmanager
def local_temp_dir(prefix: str, why: str) -> Iterator[Path]:
    """A temporary directory (removed after) in the system temp dir, or a :class:`DatasetError` naming it,
    ``why`` it is needed and how to point ``TMPDIR`` elsewhere."""
    try:
        made = Path(tempfile.mkdtemp(prefix=prefix))
    except OSError as exc:
        raise cannot_write(
            exc,
            tempfile.gettempdir(),
            f"{why}: set TMPDIR to a writable directory with room for it (e.g. TMPDIR=/scratch/tmp)",
        ) from None
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)
