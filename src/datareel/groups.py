"""Micro-batches grouped by optimizer step: :func:`global_batches` and the :class:`GlobalBatch` it yields.

A global batch's size may change over a run (a schedule, or a restart with another size), so a
training loop cannot count micro-batches once; these groups end where the loader's schedule ends
each global batch (``loader.at_global_batch_boundary``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .errors import BatchError, DatareelError

if TYPE_CHECKING:
    from .loader import Loader


def global_batches(loader: Loader) -> Iterator[GlobalBatch]:
    """``loader.global_batches()``: one :class:`GlobalBatch` per optimizer step, from the loader's cursor."""
    batches = iter(loader)
    while True:
        if loader.reel.at_end(loader.reel_cursor):
            return
        group = GlobalBatch(loader, batches)
        yield group
        if not group.exhausted:
            raise DatareelError(
                f"global batch {group.index} was not consumed to its end before the next was asked for; iterate "
                f"every micro-batch of a group (its {group.accumulation_steps} accumulation steps) first"
            )
        if group.ended_pass:
            return


class GlobalBatch:
    """One global batch's micro-batches on this rank, as an iterator (from :meth:`Loader.global_batches`).

    ``index`` is the global batch, ``size`` its ``G_b`` and ``accumulation_steps`` its ``G_b / (m W)``
    (a group restored mid-batch, or the last of a ``repeat=False`` pass, holds fewer micro-batches).
    """

    def __init__(self, loader: Loader, batches: Iterator[Any]):
        self._loader, self._batches = loader, batches
        self.index = loader.global_batch
        self.size = loader.global_batch_size_at(self.index)
        self.accumulation_steps = loader.accumulation_steps_at(self.index)
        self.exhausted = self.ended_pass = False

    def __iter__(self) -> GlobalBatch:
        return self

    def __next__(self) -> Any:
        if self.exhausted:
            raise StopIteration
        try:
            batch = next(self._batches)
        except StopIteration:
            self.exhausted = self.ended_pass = True
            raise
        except BatchError:  # the failed micro-batch counts as consumed: it may have ended the global batch
            self.exhausted = self._loader.at_global_batch_boundary
            raise
        self.exhausted = self._loader.at_global_batch_boundary
        return batch
