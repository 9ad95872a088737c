"""megatron.energon 7.x's training order replayed as index math, from a worker's recorded state.

Each class below follows one of Energon's wrappers on sample *indices* ``(dataset, index)`` only (no sample
is read): the same random draws from the same recorded ``torch.Generator`` states, in the same order, so
the indices come out exactly as Energon yielded the samples.

- :class:`SliceReader`: a dataset's per-worker slice reader (``WebdatasetSampleLoaderDataset``): its slices
  in a shuffled order, ``parallel`` of them open at once, the next sample drawn from an open slice with
  probability proportional to the slice's length; :meth:`SliceReader.unread` is what its pass has left.
- :class:`EpochBlend`: ``blend_epochized`` (``BlendDataset`` over datasets read once per pass), a dataset drawn
  per sample with weight = its length, until every one is read.
- :class:`Buffer`: the shuffle buffer (``ShuffleBufferDataset``): fill to ``size``, then pop at random.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import torch

Item = tuple[int, int]
"""One sample: (dataset number in the blend, sample index in that dataset)."""


class Rng:
    """A recorded ``torch.Generator`` and the draws Energon's ``WorkerRng`` makes from it."""

    def __init__(self, state: bytes):
        if not isinstance(state, (bytes, bytearray)):
            raise TypeError(f"a recorded generator state is {type(state).__name__}, not bytes")
        self.gen = torch.Generator()
        self.gen.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8).clone())

    def seed(self) -> int:
        """The seed the generator was made with (the first 8 bytes of a CPU generator's state)."""
        return int.from_bytes(bytes(self.gen.get_state()[:8].tolist()), "little")

    def below(self, n: int) -> int:
        return int(torch.randint(0, n, (), generator=self.gen).item())

    def weighted(self, weights: torch.Tensor) -> int:
        if len(weights) == 1:
            return 0
        cdf = torch.cumsum(weights, dim=0)
        draw = torch.rand(1, generator=self.gen) * cdf[-1]
        return int(torch.searchsorted(cdf, draw, right=True).item())

    def order(self, n: int) -> list[int]:
        return [int(i) for i in torch.randperm(n, generator=self.gen)]


class SliceReader:
    """One worker's reader of one dataset; ``offsets``: its slice boundaries (:mod:`.slices`)."""

    def __init__(self, state: dict[str, Any], offsets: list[int], over_epochs: int | None, dataset: int):
        self.offsets, self.over_epochs, self.dataset = offsets, over_epochs, dataset
        self.rng = Rng(state["_worker_rng"]["rng"])
        self.seed = self.rng.seed()
        self.active: list[list[int] | None] = [
            None if s is None else [int(s["index"]), int(s["current"])] for s in state["_active_slice_state"]
        ]
        pending = state["_pending_slice_indexes"]
        self.pending: list[int] | None = None if pending is None else [int(i) for i in pending]
        self.pending_offset: int | None = state["_pending_slices_offset"]
        self.epoch = int(state["_epoch_count"])

    @property
    def slices(self) -> int:
        return len(self.offsets) - 1

    def size(self, s: int) -> int:
        return self.offsets[s + 1] - self.offsets[s]

    def started(self) -> bool:
        return any(s is not None for s in self.active) or self.pending_offset is not None

    def _new_pass(self) -> list[int]:
        n = self.slices
        if self.over_epochs is None:
            order = list(range(n))
        elif self.over_epochs == -1:
            order = [self.rng.below(n) for _ in range(len(self.active))]
        else:
            base = list(range(n)) * self.over_epochs
            order = [base[i] for i in self.rng.order(len(base))]
        order.reverse()
        self.pending_offset = 0
        return order

    def run(self) -> Iterator[Item]:
        """The samples of the current pass from the recorded position, as Energon yields them."""
        if self.slices <= 0:
            return
        parallel = len(self.active)
        weights = torch.zeros(parallel, dtype=torch.float32)
        if self.started():
            pending = self.pending if self.pending is not None else []
            for k, s in enumerate(self.active):
                if s is not None:
                    weights[k] = self.size(s[0])
        else:
            pending = self._new_pass()
            opened: list[list[int] | None] = []
            while pending and len(opened) < parallel:
                s = pending.pop()
                self.pending_offset = (self.pending_offset or 0) + 1
                weights[len(opened)] = self.size(s)
                opened.append([s, self.offsets[s]])
            self.active = opened + [None] * (parallel - len(opened))
        self.pending = pending
        while torch.count_nonzero(weights).item() > 0:
            k = 0 if self.over_epochs is None else self.rng.weighted(weights)
            s = cast(list[int], self.active[k])  # a slice of non-zero weight is open
            index = s[1]
            s[1] += 1
            if s[1] >= self.offsets[s[0] + 1]:
                if pending or self.over_epochs == -1:
                    if pending:
                        nxt = pending.pop()
                        self.pending_offset = (self.pending_offset or 0) + 1
                    else:  # drawn with replacement
                        nxt = self.rng.below(self.slices)
                    self.active[k] = [nxt, self.offsets[nxt]]
                    weights[k] = self.size(nxt)
                else:
                    weights[k] = 0
                    self.active[k] = None
            yield self.dataset, index
        self.epoch += 1
        self.pending, self.pending_offset = None, None

    def unread(self) -> np.ndarray:
        """Sample indices int64[k] its current pass has not yielded (all of them before the pass starts)."""
        if not self.started():
            return np.arange(self.offsets[0], self.offsets[-1], dtype=np.int64)
        parts = [np.arange(s[1], self.offsets[s[0] + 1], dtype=np.int64) for s in self.active if s is not None]
        parts += [np.arange(self.offsets[i], self.offsets[i + 1], dtype=np.int64) for i in self.pending or []]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class EpochBlend:
    """``blend_epochized``'s per-worker draw over datasets each read once per pass (weights: their lengths)."""

    def __init__(self, state: dict[str, Any], readers: list[SliceReader], weights: list[float], passes: int):
        self.readers, self.weights, self.epoch = readers, weights, passes
        self.rng = Rng(state["_worker_rng"]["rng"])
        self.exhausted = [bool(x) for x in state["exhausted"]]

    def started(self) -> bool:
        return any(self.exhausted) or any(r.started() for r in self.readers)

    def unread(self) -> list[np.ndarray]:
        """Per dataset, what the current blend pass has not yielded (nothing of a dataset it finished)."""
        return [np.zeros(0, dtype=np.int64) if gone else r.unread() for r, gone in zip(self.readers, self.exhausted)]

    def run(self) -> Iterator[Item]:
        iters: list[Iterator[Item] | None] = []
        weights = []
        for k, (reader, weight) in enumerate(zip(self.readers, self.weights)):
            has = reader.slices > 0
            iters.append(reader.run() if has else None)
            weights.append(weight if has else 0)
            self.exhausted[k] = self.exhausted[k] or not has
        w = torch.tensor(weights, dtype=torch.float32)
        for k, gone in enumerate(self.exhausted):
            if gone:
                w[k], iters[k] = 0, None
        while True:
            k = self.rng.weighted(w)
            it = iters[k]
            if it is None:
                if all(i is None for i in iters):
                    break
                continue
            try:
                item = next(it)
            except StopIteration:
                iters[k], w[k], self.exhausted[k] = None, 0, True
                if all(i is None for i in iters):
                    break
            else:
                yield item
        self.exhausted = [False] * len(self.readers)
        self.epoch += 1


def endless(source: SliceReader | EpochBlend) -> Iterator[Item]:
    """Energon's ``RepeatDataset(repeats=None)``: the source's passes back to back (a pass recorded at its very
    end yields nothing and the next begins; only a pass that starts afresh and yields nothing ends it)."""
    while True:
        fresh = not source.started()
        got = False
        for item in source.run():
            got = True
            yield item
        if not got and fresh:
            return


class Buffer:
    """The shuffle buffer of ``size`` (its recorded items and generator)."""

    def __init__(self, state: dict[str, Any], size: int, items: list[Item]):
        self.size, self.items = size, items
        self.rng = Rng(state["_worker_rng"]["rng"])

    def run(self, upstream: Iterator[Item]) -> Iterator[Item]:
        while True:
            if len(self.items) >= self.size:
                yield self.items.pop(self.rng.below(len(self.items)))
            else:
                try:
                    self.items.append(next(upstream))
                except StopIteration:
                    break
        while self.items:
            yield self.items.pop(self.rng.below(len(self.items)))
