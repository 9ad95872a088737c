"""Drive several ranks' loaders in one process and assemble their global batches.

Used by ``datareel demo`` and by the tests: rank ``r``'s micro-batches at the
``A`` micro-steps of a global batch are concatenated in ``(step, rank)`` order,
which is reel order by the layout, giving the global batch as a list of
per-sample records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..loader import Loader


def to_python(value: Any) -> Any:
    """Tensors and arrays to nested lists; everything else as is (for equality checks)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value.tolist()
    if isinstance(value, Mapping):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_python(v) for v in value]
    return value


def unbatch(batch: Any) -> list[Any]:
    """Split a collated micro-batch back into per-sample records.

    A dict batch gives one dict per sample (each key's ``i``-th entry); a
    tensor or list batch gives its rows.
    """
    if isinstance(batch, Mapping):
        columns = {k: to_python(v) for k, v in batch.items()}
        count = len(next(iter(columns.values())))
        return [{k: col[i] for k, col in columns.items()} for i in range(count)]
    return list(to_python(batch))


def take_global_batches(
    loaders: Sequence[Loader], count: int, iterators: Sequence[Iterator[Any]] | None = None
) -> list[list[Any]]:
    """Consume ``count`` global batches from ranks ``0 .. W-1`` in lockstep.

    ``loaders[r]`` must be rank ``r`` of one topology.  A global batch ends where the loaders'
    schedule ends it (the first one at the next boundary, if they start mid-batch).  A finite reel may
    end early: the returned list is then shorter, its last global batch partial.
    """
    if iterators is None:
        iterators = [iter(loader) for loader in loaders]
    out: list[list[Any]] = []
    for _ in range(count):
        records: list[Any] = []
        while True:
            step = take_micro_step(iterators)
            if step is None:
                break
            records.extend(step)
            if loaders[0].at_global_batch_boundary:
                break
        if not records:
            break
        out.append(records)
    return out


def take_micro_step(iterators: Sequence[Iterator[Any]]) -> list[Any] | None:
    """One micro-step of every rank, as sample records in rank order; ``None`` once all have ended.

    On a finite reel a rank with an empty share of the last micro-step has
    already ended; the others' records still come back.
    """
    records: list[Any] = []
    live = False
    for it in iterators:
        batch = next(it, None)
        if batch is not None:
            live = True
            records.extend(unbatch(batch))
    return records if live else None


def make_ranks(dataset: Any, *, world_size: int, **kwargs: Any) -> list[Loader]:
    """One loader per rank of a simulated ``world_size``."""
    return [Loader(dataset, rank=r, world_size=world_size, **kwargs) for r in range(world_size)]
