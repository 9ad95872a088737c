"""Drive several ranks' loaders in one process and assemble their global batches.

Used by ``datareel demo`` and by the tests: rank ``r``'s micro-batches at the
``A`` micro-steps of a global batch are concatenated in ``(step, rank)`` order,
which is reel order by the layout, giving the global batch as a list of
per-sample records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import DatareelError
from ..execute.encoder import DefaultTaskEncoder
from ..loader import Loader
from .rows import split_rows, to_python

__all__ = ["make_ranks", "take_global_batches", "take_micro_step", "to_python", "unbatch"]


def unbatch(batch: Any, count: int | None = None, *, collated: bool = True) -> list[Any]:
    """Split a micro-batch back into its ``count`` per-sample records (:func:`.rows.split_rows`: dicts for a
    dict or dataclass batch, rows for a tensor or list batch; ``collated=False`` for a batch of a ``batch``
    of the task encoder's own, which lists one entry per sample).

    ``count`` defaults to the length of the batch's ``__positions__`` (every dict batch the Loader makes has
    it), else of its first field that is a column (a tensor's rows, a list's entries), else of the batch.
    """
    if count is None:
        count = _count(batch)
    return split_rows(batch, count, collated=collated)


def _count(batch: Any) -> int:
    positions = batch.get("__positions__") if isinstance(batch, Mapping) else None
    if positions is not None:
        return len(positions)
    fields = list(batch.values()) if isinstance(batch, Mapping) else [batch]
    for value in fields:
        if hasattr(value, "shape") and len(value.shape) >= 1 or isinstance(value, list | tuple):
            return len(value)
    raise DatareelError(
        f"cannot tell how many samples the batch {type(batch).__name__} holds (no __positions__, no field with "
        f"rows); pass unbatch(batch, count=<samples in it>)"
    )


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

    Each record is a dict holding its reel position as ``__positions__``: a dict batch's own, or, for a
    batch without them (a dataclass, a tuple, a tensor: its rows then as ``__sample__``), the positions the
    loader's reel gave that micro-step.  On a finite reel a rank with an empty share of the last micro-step
    has already ended; the others' records still come back.
    """
    records: list[Any] = []
    live = False
    for it in iterators:
        run = getattr(getattr(it, "driver", None), "run", None)  # a frozen value: the cursor before this step
        batch = next(it, None)
        if batch is None:
            continue
        live = True
        own = isinstance(batch, Mapping) and batch.get("__positions__") is not None
        positions = None if own else _positions(it, run)
        rows = unbatch(batch, None if own else len(positions), collated=_collated(it))  # type: ignore[arg-type]
        if not own:
            rows = [
                {**(row if isinstance(row, dict) else {"__sample__": row}), "__positions__": p}
                for row, p in zip(rows, positions)  # type: ignore[arg-type]
            ]
        records.extend(rows)
    return records if live else None


def _collated(it: Any) -> bool:
    """Whether ``it``'s batches come from the default collation (the task encoder has no ``batch``)."""
    resolved = getattr(getattr(getattr(it, "driver", None), "maker", None), "encoder", None)
    if resolved is None:  # not a loader's iterator: as unbatch() reads a batch
        return True
    return isinstance(getattr(resolved.batch, "__self__", None), DefaultTaskEncoder)


def _positions(it: Any, run: Any) -> list[int]:
    """The reel positions of the micro-step ``it`` handed out from ``run`` (its rank's next step)."""
    if run is None:
        raise DatareelError(
            f"the batch has no __positions__ and {type(it).__name__} is not a loader's iterator: pass "
            f"iter(loader) of datareel.Loader (whose run says which positions each micro-step holds)"
        )
    step = next(iter(run.reel.stream(run.cursor, run.layout, it.driver.rank)), None)
    if step is None or step.descriptor is None:
        raise DatareelError(f"the loader handed out a batch at cursor {run.position}, where its reel has no step")
    return [int(p) for p in step.descriptor.units]


def make_ranks(dataset: Any, *, world_size: int, **kwargs: Any) -> list[Loader]:
    """One loader per rank of a simulated ``world_size``."""
    return [Loader(dataset, rank=r, world_size=world_size, **kwargs) for r in range(world_size)]
