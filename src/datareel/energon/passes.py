"""What each ``for`` over a facade loader yields: Energon's pass structure, modelled.

Megatron-Energon keeps every wrapper's position in the wrapper itself, and a new ``iter()`` starts
a new generator from those positions; a wrapper that reaches its end resets what it wraps.  The
visible rules (megatron.energon 7.4.1, checked beside it in tests/energon/test_energon_val_loops.py):

- a dataset pass (:class:`Batches`, :class:`LoaderStream`) left early continues at the next
  ``for``; once its end is seen, the next one starts it again;
- :class:`Repeat` (``RepeatDataset``) reads its dataset again each time it ends, ``repeats``
  times (``None``: endlessly);
- :class:`Limit` (``LimitDataset``, ``get_val_dataset(limit=)``) ends a pass after ``limit``
  items, or earlier when its dataset ends, and then resets its dataset: the next pass yields the
  same items again (``reset_after_epoch`` changes nothing in 7.4.1);
- :class:`Epochize` (``virtual_epoch_length``) ends a pass after ``length`` items and continues
  the same iteration in the next.

Each node is one worker's view (Energon splits limits and lengths over a rank's workers);
:class:`Passes` takes the workers' items in turn, skipping a worker whose pass ended, as torch's
DataLoader does.  Items are whatever the base yields (a batch's samples, or batches).  With worker
processes Energon's loader keeps a pass left early (``break``) and resumes it at the next
``iter()``; without, every ``iter()`` starts a pass from the positions (the loader decides).
Every node updates its position before it yields, so a generator left at a ``yield`` is simply
never resumed.

A ``next()`` that fails (a worker that died, ``KeyboardInterrupt``, ...) is a pass left early: every
node's position counts only items that arrived, a node drops what it kept of the failed iteration
(:class:`Epochize`'s, :class:`LoaderStream`'s), and the next ``for`` continues the pass from the
item after the last one handed out.  A :class:`~datareel.BatchError` (a batch that failed in the
making) counts as an item that arrived, as datareel's cursor counts it.  A val pass, whose positions
its DataLoader's sampler runs ahead of, is replayed from its start instead (:meth:`Passes.mark`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Protocol

from ..errors import BatchError, DatasetError

_END = object()


class Stream(Protocol):
    """One worker's items: ``run()`` is one pass from the current position; ``reset()`` goes back to
    the start; ``length()`` is Energon's ``len_worker``."""

    def run(self) -> Iterator[Any]: ...

    def reset(self) -> None: ...

    def length(self) -> int: ...


def local_share(total: int, workers: int, worker: int) -> int:
    """Energon's split of a limit or virtual epoch over a rank's workers (all of it with 0 or 1)."""
    if workers <= 1:
        return total
    return total // workers + (1 if worker < total % workers else 0)


class Batches:
    """One worker's slice of ``samples`` samples cut into batches of ``batch_size``: items are
    ``(start, stop)`` in the slice.  The reader's end is seen only when a batch cannot be filled,
    so a pass left right after a last *full* batch yields nothing the next time (Energon's too)."""

    def __init__(self, samples: int, batch_size: int, drop_last: bool):
        self.samples, self.batch_size, self.drop_last = samples, batch_size, drop_last
        self.position = 0

    def run(self) -> Iterator[tuple[int, int]]:
        while self.position + self.batch_size <= self.samples:
            start = self.position
            self.position += self.batch_size
            yield start, self.position
        start, self.position = self.position, 0  # the end seen: the next pass starts again
        if start < self.samples and not self.drop_last:
            yield start, self.samples

    def reset(self) -> None:
        self.position = 0

    def mark(self) -> Any:
        return self.position

    def seek(self, mark: Any) -> None:
        self.position = mark

    def length(self) -> int:
        full, rest = divmod(self.samples, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)


class Repeat:
    """``RepeatDataset(inner, repeats=None | k, restart=True)``: ``inner`` again each time it ends."""

    def __init__(self, inner: Stream, repeats: float | None, restart: bool, where: str):
        self.inner, self.repeats, self.restart, self.where = inner, repeats, restart, where
        self.repetition = self.index = 0

    def run(self) -> Iterator[Any]:
        repeats = self.repeats
        if repeats is None and self.inner.length() == 0:
            raise DatasetError(
                f"RepeatDataset: {self.where} has no batches to repeat (the dataset has fewer samples than "
                f"world_size × num_workers, or batch_drop_last drops them all); use fewer workers or ranks"
            )
        empty_rounds = 0
        while repeats is None or self.repetition < repeats:
            stop_after = None
            if repeats is not None and self.repetition == math.floor(repeats):  # the fraction of a last round
                stop_after = math.floor(self.inner.length() * (repeats - math.floor(repeats)))
                if self.index >= stop_after:
                    break
            yielded = False
            items = self.inner.run()
            while True:
                try:
                    item = next(items, _END)
                except BatchError:  # an item that failed in the making counts as consumed
                    self.index += 1
                    raise
                if item is _END:
                    break
                self.index += 1
                yielded = True
                yield item
                if stop_after is not None and self.index >= stop_after:
                    break
            self.repetition += 1
            self.index = 0
            empty_rounds = 0 if yielded else empty_rounds + 1
            if empty_rounds >= 2:  # nothing to repeat (a limit of 0 on this worker): end, never spin
                return
        self.repetition = 0 if self.restart or repeats is None else math.ceil(repeats)

    def reset(self) -> None:
        self.repetition = self.index = 0
        self.inner.reset()

    def rewind(self) -> None:
        self.repetition = self.index = 0

    def mark(self) -> Any:
        return self.repetition, self.index

    def seek(self, mark: Any) -> None:
        self.repetition, self.index = mark

    def length(self) -> int:
        inner = self.inner.length()
        return inner if self.repeats is None else int(inner * self.repeats)


class Limit:
    """``LimitDataset(inner, length)``: at most ``limit`` items (this worker's share) per pass, then
    ``inner`` goes back to its start."""

    def __init__(self, inner: Stream, limit: int):
        self.inner, self.limit = inner, limit
        self.offset = 0

    def run(self) -> Iterator[Any]:
        if self.offset < self.limit:
            items = self.inner.run()
            for offset in range(self.offset, self.limit):
                try:
                    item = next(items, _END)
                except BatchError:  # an item that failed in the making counts as consumed
                    self.offset = offset + 1
                    raise
                if item is _END:
                    break
                self.offset = offset + 1
                yield item
        self.inner.reset()
        self.offset = 0

    def reset(self) -> None:
        self.offset = 0
        self.inner.reset()

    def rewind(self) -> None:
        self.offset = 0

    def mark(self) -> Any:
        return self.offset

    def seek(self, mark: Any) -> None:
        self.offset = mark

    def length(self) -> int:
        return self.limit


class Epochize:
    """``virtual_epoch_length``: passes of ``length`` items (this worker's share) cut from one
    iteration of ``inner`` that goes on across passes."""

    def __init__(self, inner: Stream, length: int):
        self.inner, self.epoch = inner, length
        self.offset = 0
        self.active: Iterator[Any] | None = None

    def run(self) -> Iterator[Any]:
        if self.offset >= self.epoch:
            return
        if self.active is None:
            self.active = self.inner.run()
        for offset in range(self.offset, self.epoch):
            try:
                item = next(self.active, _END)
            except BaseException as exc:  # the iteration ended with the error: the next pass asks `inner` again
                self.active = None
                if isinstance(exc, BatchError):  # an item that failed in the making counts as consumed
                    self.offset = (offset + 1) % self.epoch
                raise
            self.offset = (offset + 1) % self.epoch  # also when `inner` ended (Energon's count)
            if item is _END:
                break
            yield item

    def reset(self) -> None:
        self.offset = 0
        self.inner.reset()

    def rewind(self) -> None:
        self.offset, self.active = 0, None

    def length(self) -> int:
        return self.epoch


class Passes:
    """A rank's workers: ``iter()`` is one pass from their positions, their items in turn as
    ``(worker, item)`` (a worker whose pass ended is skipped, as torch's DataLoader does)."""

    def __init__(self, workers: list[Stream]):
        self.workers = workers

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        runs = [worker.run() for worker in self.workers]
        active = list(range(len(runs)))
        while active:
            for w in list(active):
                item = next(runs[w], _END)
                if item is _END:
                    active.remove(w)
                    continue
                yield w, item

    def reset(self) -> None:
        for worker in self.workers:
            worker.reset()

    def rewind(self) -> None:
        """The wrappers' own positions back to a pass's start; what they wrap stays where it is (after a
        restore: the restored position)."""
        for stream in self.workers:
            while hasattr(stream, "inner"):
                stream.rewind()
                stream = stream.inner

    def mark(self) -> list[Any]:
        """Every node's position (streams of :class:`Batches`, :class:`Repeat` and :class:`Limit`: a val
        loader's), for :meth:`seek`: a pass from a mark is the same pass again."""
        return [node.mark() for node in self._nodes()]

    def seek(self, marks: list[Any]) -> None:
        for node, mark in zip(self._nodes(), marks):
            node.seek(mark)

    def _nodes(self) -> Iterator[Any]:
        for stream in self.workers:
            while stream is not None:
                yield stream
                stream = getattr(stream, "inner", None)

    def __len__(self) -> int:
        return sum(worker.length() for worker in self.workers)
