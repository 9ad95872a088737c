"""Energon drop-in: Megatron-Energon's loader API, sample types and task-encoder toolkit on datareel.

Change ``from megatron.energon import ...`` to ``from datareel.energon import ...``
and a training script keeps its calls — ``WorkerConfig``, ``get_train_dataset``,
``get_val_dataset(s)``, ``get_savable_loader``, ``get_loader``, ``LimitDataset``,
``RepeatDataset``, the loader's ``save_state_rank`` / ``restore_state_rank`` /
``save_state_global`` / ``restore_state_global`` — and its task encoder keeps its
base classes, sample types, ``@stateless``, cookers, generator ``encode_sample``
and online packing (``packing_buffer_size`` + ``select_samples_to_pack``).  It
gains elastic resumption: pass ``global_batch_size=`` to ``get_train_dataset``
and the saved state restores on any world size and worker count.  See
``docs/migrating-from-energon.md``.
"""

from ..errors import SkipSample
from ..sources.typed import (
    CaptioningSample,
    ImageClassificationSample,
    ImageSample,
    InterleavedSample,
    MultiChoiceVQASample,
    OCRSample,
    Sample,
    SimilarityInterleavedSample,
    TextSample,
    VidQASample,
    VQAOCRSample,
    VQASample,
    edataclass,
)
from .datasets import (
    LimitDataset,
    RepeatDataset,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    get_val_datasets,
)
from .loader import EnergonLoader
from .task_encoder import (
    Batch,
    Cooker,
    DefaultTaskEncoder,
    TaskEncoder,
    basic_sample_keys,
    batch_list,
    batch_pad_stack,
    batch_stack,
    cooker,
    generic_batch,
    get_stateless,
    log_exception,
    reraise_exception,
    stateless,
)

__all__ = [
    "Batch",
    "CaptioningSample",
    "Cooker",
    "DefaultTaskEncoder",
    "EnergonLoader",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "LimitDataset",
    "MultiChoiceVQASample",
    "OCRSample",
    "RepeatDataset",
    "Sample",
    "SimilarityInterleavedSample",
    "SkipSample",
    "TaskEncoder",
    "TextSample",
    "VQAOCRSample",
    "VQASample",
    "VidQASample",
    "WorkerConfig",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "cooker",
    "edataclass",
    "generic_batch",
    "get_loader",
    "get_savable_loader",
    "get_stateless",
    "get_train_dataset",
    "get_val_dataset",
    "get_val_datasets",
    "log_exception",
    "reraise_exception",
    "stateless",
]
