"""Micro-batches grouped by optimizer step: :func:`global_batches` and the :class:`GlobalBatch` it yields.

A global batch's size may change over a run (a schedule, or a restart with another size), so a
training loop cannot count micro-batches once; these groups end where the run's schedule ends each
global batch (:attr:`datareel.run.Run.at_boundary`).  They read the current run through a function
(``current``), since handing a micro-batch out moves the loader to a new run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .errors import BatchError, DatareelError
from .run import Run


def global_batches(batches: Callable[[], Iterator[Any]], current: Callable[[], Run]) -> Iterator[GlobalBatch]:
    """``loader.global_batches()``: one :class:`GlobalBatch` per optimizer step, over the micro-batches of
    ``batches()`` (``iter(loader)``, made at the first ``next()``) while ``current()`` is the loader's run."""
    micro_batches = batches()
    while True:
        if current().at_end:
            return
        group = GlobalBatch(current, micro_batches)
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

    def __init__(self, current: Callable[[], Run], batches: Iterator[Any]):
        self._current, self._batches = current, batches
        run = current()
        self.index = run.global_batch
        self.size = run.global_batch_size_at(self.index)
        self.accumulation_steps = run.accumulation_steps_at(self.index)
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
            self.exhausted = self._current().at_boundary
            raise
        self.exhausted = self._current().at_boundary
        return batch
