"""Energon's ``MixBatchDataset`` (elastic: :mod:`datareel.energon.batch_blend`) and its batch mixers
``generic_concat``, ``concat_pad`` and ``homogeneous_concat_mix`` (Energon's behaviour)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...errors import OptionError
from ..batch_blend_spec import BatchBlendSpec


def concat_pad(batch: list[Any]) -> Any:
    """Tensors concatenated along dimension 0, zero-padded to the largest size in every other dimension."""
    total = sum(b.shape[0] for b in batch)
    shape = [max(b.shape[d] for b in batch) for d in range(1, batch[0].ndim)]
    out = batch[0].new_zeros((total, *shape))
    row = 0
    for b in batch:
        out[(slice(row, row + b.shape[0]), *(slice(0, s) for s in b.shape[1:]))] = b
        row += b.shape[0]
    return out


def generic_concat(batch: list[Any]) -> Any:
    """Batches concatenated: tensors by :func:`concat_pad`; dicts, dataclasses and named tuples field by
    field; anything else returned as the list it is."""
    first = batch[0]
    if isinstance(first, torch.Tensor):
        return concat_pad(batch)
    if isinstance(first, dict):
        return {k: generic_concat([b[k] for b in batch]) for k in first}
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        return type(first)(
            **{f.name: generic_concat([getattr(b, f.name) for b in batch]) for f in dataclasses.fields(first)}
        )
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(**{f: generic_concat([getattr(b, f) for b in batch]) for f in first._fields})
    return batch


def homogeneous_concat_mix(samples: list[Any]) -> Any:
    """Batches of one type concatenated (:func:`generic_concat`); batches of several types refused."""
    kinds = {type(s).__name__ for s in samples}
    if len(kinds) > 1:
        raise OptionError(f"homogeneous_concat_mix: the batches are of several types {sorted(kinds)}; give one type")
    return generic_concat(samples)


class MixBatchDataset(BatchBlendSpec):
    """``MixBatchDataset((ds_a, w_a), (ds_b, w_b), batch_size=10, batch_mix_fn=homogeneous_concat_mix,
    worker_config=...)``: each batch is ``batch_size`` slots, each slot one batch of one dataset (give them
    ``batch_size=1``: a slot is then one sample), drawn by weight, then ``batch_mix_fn(slots)`` (default: the
    list of the slots).  ``batch_mix_fn`` may raise ``SkipSample`` to leave a batch out; another exception is
    given to the worker config's ``global_error_handler`` (Energon's), which skips the batch if it returns.
    Elastic as :class:`~datareel.energon.wrappers.blend_dataset.BlendDataset` (:mod:`datareel.energon.batch_blend`)."""

    kind = "MixBatchDataset"

    def __init__(self, *dataset_weights: Any, batch_size: int, batch_mix_fn: Any = None, worker_config: Any):
        super().__init__(dataset_weights, worker_config, batch_size, batch_mix_fn)
