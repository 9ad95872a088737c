"""The DataLoader's sampler: this rank's descriptors from the loader's cursor, with their cursors queued.

Runs in the main process (a ``torch.utils.data.Sampler`` of descriptors; workers
only execute them).  For each descriptor it hands to the DataLoader it puts the
cursor after that micro-step into the iteration's :class:`~.cursor.CursorQueue`;
when a finite pass ends it records the end there.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from torch.utils.data import Sampler

from ..plan.layout import Layout
from .base import Descriptor, Reel
from .cursor import Cursor, CursorQueue

if TYPE_CHECKING:
    from ..loader import Loader


class DescriptorSampler(Sampler[Descriptor]):
    """Yields this rank's descriptors from the loader's cursor at the moment iteration starts.

    ``quiet``: entered around the reel's own work for each descriptor (the loader's guard that keeps a
    worker's death from being reported in the middle of it, e.g. while reading a planning process's pipe).
    """

    def __init__(self, loader: Loader, quiet: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext):
        super().__init__()
        self._loader = weakref.ref(loader)  # the loader owns the DataLoader that owns this sampler
        self._quiet = quiet

    def __iter__(self) -> Iterator[Descriptor]:
        loader = self._loader()
        if loader is None:
            return iter(())
        # The stream must not hold the loader: DataLoader keeps it alive (as its sampler iterator), and a
        # loader reachable from it would only be freed by the garbage collector, keeping workers alive.
        return feed(loader.reel, loader.layout, loader.rank, loader.reel_cursor, loader.pending, self._quiet)


def feed(
    reel: Reel,
    layout: Layout,
    rank: int,
    start: Cursor,
    queue: CursorQueue,
    quiet: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
) -> Iterator[Descriptor]:
    """``rank``'s descriptors from ``start``, each preceded by its cursor in ``queue`` (the reel's work for
    each one under ``quiet()``)."""
    last = start
    stream = reel.stream(start, layout, rank)
    while True:
        with quiet():
            item = next(stream, None)
        if item is None:
            break
        descriptor, after = item
        last = after
        if descriptor is not None:
            queue.put(after)
            yield descriptor
    queue.finish(last)
