"""The bounded set of open files now lives in :mod:`datareel.storage.handles` (the local store's); the old
names are here too, and :func:`open_handle`, which opens a local file with its ``.idx`` offsets."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from ..storage.handles import (
    ENV_MAX_OPEN,
    NO_DESCRIPTOR,
    Descriptor,
    Handle,
    OpenShards,
    handles,
    max_open,
    no_descriptor,
)
from .index_files import read_index


def open_handle(path: str, check: Callable[[int, np.ndarray], None] | None = None) -> Handle:
    """Open ``path`` and read its ``.idx`` (:func:`read_index`); ``check(fd, index)`` may refuse them (the
    descriptor is closed then, as on any failure)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        index = read_index(f"{path}.idx")
        if check is not None:
            check(fd, index)
    except BaseException:
        os.close(fd)
        raise
    return Handle(fd, index)


__all__ = [
    "ENV_MAX_OPEN",
    "NO_DESCRIPTOR",
    "Descriptor",
    "Handle",
    "OpenShards",
    "handles",
    "max_open",
    "no_descriptor",
    "open_handle",
]
