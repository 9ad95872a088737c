"""Energon's ``megatron.energon.flavors``: dataset factories, decoders and sample types, by Energon's names.

Each name loads on first use from the facade module of Energon's path (:data:`_LAZY`); the sample
types are datareel's own (:mod:`datareel.sources.typed`).
"""

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'datareel.energon.flavors' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
