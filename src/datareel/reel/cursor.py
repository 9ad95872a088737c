"""The cursor: where in the reel a loader stands, and the queue that carries it to hand-out.

A :class:`Cursor` is a value.  ``position`` counts what all ranks together have
consumed (reel positions; for a packed reel, packs).  A packed reel also needs
``pack = (window, offset)``: the input window holding the next pack and that
pack's number in it, so a restore plans one window and never the ones before.

The descriptor stream runs ahead of the training loop (DataLoader prefetches),
so the cursor after each descriptor travels in a :class:`CursorQueue`: the
sampler puts, the loader's iterator takes one per batch it hands out.  The
queue has one owner, the iterator that created it (the sampler gets it through
:class:`~.sampler.RunFeed`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..errors import DatareelError


@dataclass(frozen=True)
class Cursor:
    """``position`` consumed by all ranks together; ``pack`` = ``(window, offset)`` in a packed reel."""

    position: int = 0
    pack: tuple[int, int] | None = None


class CursorQueue:
    """Cursors after the descriptors handed to the DataLoader, in order, and the end of a finite pass."""

    def __init__(self) -> None:
        self._after: deque[Cursor] = deque()
        self.end: Cursor | None = None  # set once the stream is exhausted

    def put(self, cursor: Cursor) -> None:
        self._after.append(cursor)

    def finish(self, end: Cursor) -> None:
        self.end = end

    def take(self) -> Cursor:
        """The cursor after the batch now handed out (batches arrive in descriptor order)."""
        if not self._after:
            raise DatareelError("internal: a batch arrived without a descriptor cursor; please report this")
        return self._after.popleft()
