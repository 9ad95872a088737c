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

Every public name of ``megatron.energon`` 7.4.1 has a home here, in the submodule of the same
path as Energon's (``datareel.energon.cache``, ``.flavors``, ``.metadataset``, ``.wrappers``, ...);
the ones not eagerly imported below load on first use (:data:`_LAZY`).
"""

from ..errors import SkipSample
from ..lazy import lazy_names
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
from .energon_loader import EnergonLoader
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

# Energon's other public names -> the facade module that defines them (Energon's own module path).
_LAZY: dict[str, str] = {
    "read_energon_checkpoint": ".adopt",
    **dict.fromkeys(
        [
            "CachePool",
            "DecodeFileStore",
            "DirectLazy",
            "FileCacheLazy",
            "FileStore",
            "FileStoreCachePool",
            "FileStoreDecoder",
            "Lazy",
            "MockLazy",
            "NoCachePool",
            "PrimaryFileStore",
            "SystemFileStore",
        ],
        ".cache",
    ),
    **dict.fromkeys(
        [
            "BaseCoreDatasetFactory",
            "BaseWebdatasetFactory",
            "CaptioningWebdataset",
            "CrudeJsonlDatasetFactory",
            "CrudeSample",
            "CrudeWebdataset",
            "DefaultCrudeJsonlDatasetFactory",
            "DefaultDecoderWebdatasetFactory",
            "DefaultGenericWebdatasetFactory",
            "ImageClassificationWebdataset",
            "ImageWebdataset",
            "InterleavedWebdataset",
            "JoinedWebdatasetFactory",
            "MultiChoiceVQAWebdataset",
            "OCRWebdataset",
            "SampleDecoder",
            "SavableDataset",
            "SimilarityInterleavedWebdataset",
            "StandardWebdatasetFactory",
            "TextWebdataset",
            "VidQAWebdataset",
            "VQAOCRWebdataset",
            "VQAWebdataset",
        ],
        ".flavors",
    ),
    **dict.fromkeys(
        [
            "DatasetLoader",
            "DatasetLoaderInterface",
            "Metadataset",
            "MetadatasetV2",
            "load_dataset",
            "prepare_metadataset",
            "traverse_metadataset",
        ],
        ".metadataset",
    ),
    **dict.fromkeys(
        [
            "BatchDataset",
            "BlendDataset",
            "ConcatDataset",
            "EpochizeDataset",
            "FilterDataset",
            "GcDataset",
            "GroupBatchDataset",
            "IterMapDataset",
            "LogSampleDataset",
            "MapDataset",
            "MixBatchDataset",
            "PackingDataset",
            "ShuffleBufferDataset",
            "concat_pad",
            "generic_concat",
            "homogeneous_concat_mix",
        ],
        ".wrappers",
    ),
    "AugmentTaskEncoder": ".task_encoder",
    "SavableDataLoader": ".savable_loader",
    "SourceInfo": ".source_info",
}


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)


__all__ = [
    "read_energon_checkpoint",
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
