"""Energon's ``BatchDataset``: an unbatched dataset cut into batches of ``batch_size`` by ``batcher``,
compiled into the spec (its micro-batch size and its task encoder's ``batch``; :mod:`.base`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import OptionError, check_int
from ..task_encoder.tolerance import check_wrapper_tolerance
from ..wrapper_config import check_wrapper_config
from .base import composed, spec_of


def BatchDataset(
    dataset: Any,
    batch_size: int,
    batcher: Any,
    *,
    batcher_stateless: bool = False,
    batcher_config: Any = None,
    drop_last: bool = False,
    error_handler: Any = None,
    failure_tolerance: int = 100,
    worker_config: Any = None,
) -> Any:
    """Batches of ``batch_size`` items of ``dataset`` made by ``batcher(items)``; ``drop_last`` drops a
    read-in-order dataset's last partial batch (an endless one has none).  ``error_handler`` is told of a
    failing item, as ``get_train_dataset(handler=)`` is.  ``failure_tolerance`` other than Energon's 100 and a
    ``worker_config`` other than the dataset's are refused by name (never dropped)."""
    spec = spec_of(dataset, "BatchDataset")
    check_wrapper_tolerance(failure_tolerance, "BatchDataset")
    check_wrapper_config(spec, worker_config, "BatchDataset")
    check_int(batch_size, "batch_size", minimum=1, where="BatchDataset")
    if spec.batch_size is not None:
        raise OptionError(
            f"BatchDataset: the dataset is batched already (batch_size={spec.batch_size}); batches of batches "
            f"would need a reel of batches: batch it once (get_train_dataset(batch_size=) or one BatchDataset)"
        )
    if not callable(batcher):
        raise OptionError(f"BatchDataset: batcher={batcher!r} is not callable")
    if drop_last and not spec.val and not spec.repeat:
        raise OptionError(
            "BatchDataset: drop_last=True on a shuffled, finite dataset is not supported; datareel splits the last, "
            "partial global batch (docs/guarantees.md)"
        )
    encoder = composed(spec).with_(batcher=batcher)
    return replace(
        spec,
        batch_size=int(batch_size),
        task_encoder=encoder,
        drop_last=bool(drop_last) and spec.val,
        handler=error_handler if error_handler is not None else spec.handler,
    )
