"""A handed-out micro-batch made again from its address (Energon's ``restore_sample``, for any reel).

A micro-batch is a pure function of its descriptor, and a descriptor of its *address*: this rank's reel
positions ``[start, stop)`` and, in a window reel (packing, a generator ``encode_sample``'s outputs),
the ``(window, offset)`` of its first unit.  :func:`next_address` reads the address of the micro-batch a
loader hands out next (O(1): the windows it names are the ones being streamed); :class:`Remaker` plans
those windows again if they are gone and runs the loader's own batch maker on the descriptor — the same
units, per-sample randomness and batch, on any topology, before or after a restore.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .errors import OptionError
from .execute.batch import BatchMaker


@dataclasses.dataclass(frozen=True)
class Address:
    """Where a micro-batch lies: reel positions ``[start, stop)`` of micro-step ``step`` and, in a window
    reel, the ``(window, offset)`` of its first unit (``point``; ``None`` in the plain reel)."""

    step: int
    start: int
    stop: int
    point: tuple[int, int] | None = None

    def to_key(self) -> tuple[int, ...]:
        """The address as a flat tuple of ints (a restore key's tail)."""
        return (self.start, self.stop) + (() if self.point is None else tuple(self.point))

    @classmethod
    def from_key(cls, key: tuple[Any, ...], step_size: int) -> Address:
        """The address :meth:`to_key` wrote; refused by name when it is not one."""
        if len(key) not in (2, 4) or not all(isinstance(v, int) and not isinstance(v, bool) for v in key):
            raise OptionError(f"{key!r} is not a micro-batch address: (start, stop) or (start, stop, window, offset)")
        start, stop = key[0], key[1]
        if not 0 <= start < stop:
            raise OptionError(f"{key!r}: positions [{start}, {stop}) name no units")
        point = (key[2], key[3]) if len(key) == 4 else None
        if point is not None and min(point) < 0:
            raise OptionError(f"{key!r}: window {point[0]}, offset {point[1]} cannot be negative")
        return cls(start // step_size, start, stop, point)


def next_address(loader: Any) -> Address:
    """The address of the micro-batch ``loader`` hands this rank out next."""
    layout, cursor = loader.layout, loader.reel_cursor
    start, stop = layout.rank_span(0, loader.rank, loader.length, cursor.position)
    point = loader.reel.point(cursor, start - cursor.position) if stop > start else None
    return Address(start // layout.step_size, start, stop, point)


class Remaker:
    """Makes micro-batches again with a copy of a loader's batch maker (no threads or look-ahead: one
    batch, off the stream, must not disturb the stream's own reading)."""

    def __init__(self, maker: BatchMaker):
        self.maker = maker.replaced(map_threads=0, ahead=None)

    def __call__(self, reel: Any, address: Address) -> Any:
        return self.maker[reel.descriptor(address.step, address.start, address.stop, address.point)]
