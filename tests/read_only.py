"""``read_only(folder)``: inside, this process cannot write into ``folder`` (create, open for writing, rename,
remove, make a directory, open a sqlite database): each raises ``PermissionError`` as a read-only directory
does. ``chmod`` does not stop root, who runs CI; an audit hook (:func:`sys.addaudithook`) does, whoever runs
the tests, for every way the code under test writes a file. Processes it starts are not affected."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator

_FOLDERS: list[str] = []
_INSTALLED = False
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATHS = {  # audit event -> the positions of the paths it writes into
    "os.mkdir": (0,),
    "os.rename": (0, 1),  # os.replace too
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.link": (1,),
    "os.symlink": (1,),
    "os.truncate": (0,),
    "sqlite3.connect": (0,),
}


def _inside(path) -> str | None:
    if isinstance(path, int) or path is None:
        return None
    try:
        full = os.path.abspath(os.fsdecode(path))
    except TypeError:
        return None
    return full if any(full == f or full.startswith(f + os.sep) for f in _FOLDERS) else None


def _hook(event: str, args: tuple) -> None:
    if not _FOLDERS:
        return
    if event == "open":
        path, mode, flags = args
        writes = (mode is not None and any(c in mode for c in "wax+")) or (mode is None and flags & _WRITE_FLAGS)
        targets = (path,) if writes else ()
    elif event == "sqlite3.connect" and isinstance(args[0], str) and args[0].startswith("file:"):
        path, _, query = args[0][len("file:") :].partition("?")
        targets = () if "mode=ro" in query else (path,)  # a reader's connection writes nothing
    else:
        targets = tuple(args[i] for i in _PATHS.get(event, ()))
    if (
        event in ("os.remove", "os.rmdir", "os.rename")
        and targets
        and isinstance(targets[0], (str, bytes, os.PathLike))
    ):
        if not os.path.lexists(targets[0]):  # a name that is not there: the call's own error (as the kernel)
            return
    for target in targets:
        full = _inside(target)
        if full is not None:
            raise PermissionError(errno.EACCES, "Permission denied", full)


@contextlib.contextmanager
def read_only(*folders) -> Iterator[None]:
    global _INSTALLED
    if not _INSTALLED:
        sys.addaudithook(_hook)  # once per process: a hook cannot be removed, so it does nothing when no folder is set
        _INSTALLED = True
    added = [os.path.abspath(os.fspath(f)) for f in folders]
    _FOLDERS.extend(added)
    try:
        yield
    finally:
        for f in added:
            _FOLDERS.remove(f)
