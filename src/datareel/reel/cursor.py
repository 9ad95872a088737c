"""The cursor: where in the reel a loader stands, and the queue that carries it to hand-out.

A :class:`Cursor` is a value.  ``position`` counts what all ranks together have
consumed (reel positions; for a packed reel, packs).  A packed reel also needs
``pack = (window, offset)``: the input window holding the next pack and that
pack's number in it, so a restore plans one window and never the ones before.

The descriptor stream runs ahead of the training loop (DataLoader prefetches),
so the cursor after each descriptor travels in a :class:`CursorQueue`: the
sampler puts, the loader's iterator takes one per batch it hands out.  The
queue has one owner, the iterator that created it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from ..errors import INT64_LIMIT, DatareelError


@dataclass(frozen=True)
class Cursor:
    """``position`` consumed by all ranks together; ``pack`` = ``(window, offset)`` in a packed reel."""

    position: int = 0
    pack: tuple[int, int] | None = None

    def state_fields(self) -> dict[str, Any]:
        """The state's ``cursor`` (and, packed, ``pack``) entries."""
        out: dict[str, Any] = {"cursor": self.position}
        if self.pack is not None:
            out["pack"] = list(self.pack)
        return out

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Cursor:
        """Read (and type-check) the cursor fields of a saved state."""
        position = state.get("cursor")
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= INT64_LIMIT:
            raise DatareelError(f"state cursor={position!r} must be an integer in [0, 2^63 - 1]; the state is damaged")
        if "pack" not in state:
            return cls(position)
        pack = state["pack"]
        if not (
            isinstance(pack, (list, tuple))
            and len(pack) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT64_LIMIT for v in pack)
        ):
            raise DatareelError(
                f"state pack={pack!r} must be [window, offset] (two integers >= 0); the state is damaged"
            )
        return cls(position, (pack[0], pack[1]))


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
