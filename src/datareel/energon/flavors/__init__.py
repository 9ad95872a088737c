"""Energon's ``megatron.energon.flavors``: dataset factories, decoders and sample types, by Energon's names.

Each name loads on first use from the facade module of Energon's path (:data:`_LAZY`); the sample
types are datareel's own (:mod:`datareel.sources.typed`).
"""

from ...lazy import lazy_names
from ...sources.typed import (
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
)

_FACTORIES = ".webdataset.factories"
_LAZY: dict[str, str] = {
    "BaseCoreDatasetFactory": ".base_dataset",
    "SavableDataset": ".base_dataset",
    "BaseWebdatasetFactory": ".webdataset.base_webdataset",
    "SampleDecoder": ".webdataset.sample_decoder",
    "CrudeSample": ".crude",
    "CrudeWebdataset": ".crude",
    "CrudeJsonlDatasetFactory": ".jsonl",
    "DefaultCrudeJsonlDatasetFactory": ".jsonl",
    "JoinedWebdatasetFactory": ".webdataset.joined",
    **dict.fromkeys(
        [
            "StandardWebdatasetFactory",
            "DefaultGenericWebdatasetFactory",
            "DefaultDecoderWebdatasetFactory",
            "CaptioningWebdataset",
            "ImageClassificationWebdataset",
            "ImageWebdataset",
            "InterleavedWebdataset",
            "MultiChoiceVQAWebdataset",
            "OCRWebdataset",
            "SimilarityInterleavedWebdataset",
            "TextWebdataset",
            "VidQAWebdataset",
            "VQAOCRWebdataset",
            "VQAWebdataset",
        ],
        _FACTORIES,
    ),
}


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)


__all__ = [
    "CaptioningSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "Sample",
    "SimilarityInterleavedSample",
    "TextSample",
    "VQAOCRSample",
    "VQASample",
    "VidQASample",
    *_LAZY,
]
