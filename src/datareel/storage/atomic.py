"""Writing into a dataset directory safely: one writer at a time, and a metadata swap with no gap.

``locked(root)`` holds an exclusive ``flock`` on the directory itself (no lock file is left
behind; the lock goes with the process, so a killed run never blocks the next one).
``swap_in(staged, target)`` replaces the directory ``target`` by ``staged`` in one step where
the kernel allows it (Linux ``renameat2(RENAME_EXCHANGE)``): a reader, or a kill at any
moment, sees the old metadata or the new, never none.  Elsewhere it renames the old aside
first; a kill in between leaves ``target`` missing and ``<target>.replaced-<tag>`` holding
the old metadata, which :func:`leftover` finds so the error can say so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DatasetError

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@contextmanager
def locked(root: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on directory ``root`` while ``what`` writes into it; refuse at once if
    another process holds it."""
    fd = os.open(root, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatasetError(
                f"another process is already writing into {root} ({what}); wait for it to finish, or stop it, "
                f"then run this again"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux); ``False`` where the kernel, libc or filesystem cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):  # EXDEV: overlayfs lower layers
        return False
    raise OSError(code, os.strerror(code), str(b))


def swap_in(staged: Path, target: Path) -> None:
    """Put directory ``staged`` at ``target``, replacing (and then deleting) any directory there."""
    if not target.exists():
        os.replace(staged, target)
        return
    if _exchange(staged, target):
        shutil.rmtree(staged)  # now the old metadata
        return
    aside = target.with_name(f"{target.name}.replaced-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(target, aside)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        # a directory in a lower overlayfs layer (a dataset baked into an image) cannot be renamed, only
        # deleted: replace it that way (not atomic: a kill in between leaves no metadata, as before)
        shutil.rmtree(target)
        os.replace(staged, target)
        return
    os.replace(staged, target)
    shutil.rmtree(aside)


def leftover(target: Path) -> Path | None:
    """Old metadata that an interrupted :func:`swap_in` renamed aside, if ``target`` is missing."""
    if target.exists():
        return None
    found = sorted(target.parent.glob(f"{target.name}.replaced-*"))
    return found[0] if found else None
