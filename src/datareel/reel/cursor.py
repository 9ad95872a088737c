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
from typing import Any

from ..errors import DatareelError


@dataclass(frozen=True)
class Cursor:
    """``position`` consumed by all ranks together; ``pack`` = ``(window, offset)`` in a packed reel."""

    position: int = 0
    pack: tuple[int, int] | None = None

    def state_fields(self) -> dict[str, Any]:
        """The state's ``cursor`` (and, packed, ``pack``) entries (:func:`datareel.state.cursor.cursor_to_json`)."""
        from ..state.cursor import cursor_to_json  # the state's JSON is datareel.state's; imported when used

        return cursor_to_json(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Cursor:
        """Read (and type-check) the cursor fields of a saved state (:func:`datareel.state.cursor.cursor_from_json`:
        a :class:`~datareel.errors.StateDamagedError` names a field that is not of its type)."""
        from ..state.cursor import cursor_from_json

        return cursor_from_json(state)


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
