"""Energon's ``MixBatchDataset`` (refused, naming why) and its batch mixers ``generic_concat``,
``concat_pad`` and ``homogeneous_concat_mix`` (Energon's behaviour)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...errors import OptionError


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


class MixBatchDataset:
    """Refused: each dataset runs its own task encoder and Energon draws which one fills each slot of a batch at
    random per worker; datareel runs one task encoder per loader over one reel."""

    def __init__(self, *dataset_weights: Any, batch_size: int, batch_mix_fn: Any = None, worker_config: Any = None):
        raise OptionError(
            f"MixBatchDataset mixes the batches of {len(dataset_weights)} datasets, each with its own task encoder, "
            f"drawn at random per worker, so the mixed batches have no fixed reel positions and a checkpoint could "
            f"not restore on another topology (datareel's elastic guarantee). Mix the samples in one reel instead "
            f"(a metadataset with blend weights, or datareel.mix) with one task encoder that dispatches on the "
            f"sample (its __subflavors__ say which dataset it came from) and batch_size={batch_size}"
        )
