"""The DataLoader's sampler: this rank's descriptors from where an iteration starts, with their cursors queued.

Runs in the main process (a ``torch.utils.data.Sampler`` of descriptors; workers only execute them).
Where an iteration starts crosses from its owner to the sampler through one named store, a
:class:`RunFeed` (as torchdata's ``snapshot_store``): the owner (the loader's driver,
:mod:`datareel.iteration`) puts the run to start from and the iteration's
:class:`~.cursor.CursorQueue` there right before the DataLoader makes its sampler iterator; the sampler
only reads it.  For each descriptor it hands to the DataLoader it puts the cursor after that micro-step
into the queue; when a finite pass ends it records the end there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from torch.utils.data import Sampler

from .base import Descriptor, Step
from .cursor import Cursor, CursorQueue


class Streamable(Protocol):
    """Where an iteration starts: a cursor and a rank's steps from it (:class:`datareel.run.Run`)."""

    @property
    def cursor(self) -> Cursor:
        """Where the stream starts (and where a pass that yields nothing ends)."""
        ...

    def stream(self, rank: int) -> Iterator[Step]:
        """``rank``'s micro-steps from :attr:`cursor`."""
        ...


class RunFeed:
    """The start of the current iteration: the run to stream from and the queue its cursors go to.

    One owner writes it (:meth:`start`); the sampler reads it (:meth:`current`) each time the DataLoader
    makes a sampler iterator, which it may do more than once per iteration (torch's multi-process
    iterator does, and reads only the last one).
    """

    def __init__(self) -> None:
        self._run: Streamable | None = None
        self._queue = CursorQueue()

    def start(self, run: Streamable, queue: CursorQueue) -> None:
        """Start the next iteration from ``run``; its cursors go to ``queue``."""
        self._run, self._queue = run, queue

    def current(self) -> tuple[Streamable | None, CursorQueue]:
        return self._run, self._queue


class DescriptorSampler(Sampler[Descriptor]):
    """Yields ``rank``'s descriptors from the run in ``store`` at the moment iteration starts.

    The sampler holds the store only, never the loader: DataLoader keeps the sampler's iterator alive, and a
    loader reachable from it would only be freed by the garbage collector, keeping workers alive.
    """

    def __init__(self, store: RunFeed, rank: int):
        super().__init__()
        self._store, self._rank = store, rank

    def __iter__(self) -> Iterator[Descriptor]:
        run, queue = self._store.current()
        if run is None:
            return iter(())
        return feed(run, self._rank, queue)


def feed(run: Streamable, rank: int, queue: CursorQueue) -> Iterator[Descriptor]:
    """``rank``'s descriptors from ``run.cursor``, each preceded by its cursor in ``queue``."""
    last = run.cursor
    stream = run.stream(rank)
    while True:
        item = next(stream, None)
        if item is None:
            break
        descriptor, after = item
        last = after
        if descriptor is not None:
            queue.put(after)
            yield descriptor
    queue.finish(last)
