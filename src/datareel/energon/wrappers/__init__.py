"""Energon's ``megatron.energon.wrappers``: the dataset-level API, each wrapper compiled into the facade's
``DatasetSpec`` (elastic, like every datareel loader), a batch-granular blend with its own elastic loader
(``BlendDataset``, ``MixBatchDataset``: :mod:`datareel.energon.batch_blend`), or refused naming the guarantee it
would break."""

from .batch_dataset import BatchDataset
from .blend_dataset import BlendDataset
from .map_dataset import MapDataset
from .mix_batch_dataset import MixBatchDataset, concat_pad, generic_concat, homogeneous_concat_mix
from .refused import (
    ConcatDataset,
    EpochizeDataset,
    FilterDataset,
    GcDataset,
    GroupBatchDataset,
    IterMapDataset,
    LogSampleDataset,
    PackingDataset,
    ShuffleBufferDataset,
)
from .repeat_limit import LimitDataset, RepeatDataset
from .watchdog_dataset import WatchdogDataset

__all__ = [
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "EpochizeDataset",
    "FilterDataset",
    "GcDataset",
    "GroupBatchDataset",
    "IterMapDataset",
    "LimitDataset",
    "LogSampleDataset",
    "MapDataset",
    "MixBatchDataset",
    "PackingDataset",
    "RepeatDataset",
    "ShuffleBufferDataset",
    "WatchdogDataset",
    "concat_pad",
    "generic_concat",
    "homogeneous_concat_mix",
]
