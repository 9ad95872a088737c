"""What a task encoder's ``decoder`` asks of the readers when a dataset is opened (:func:`decoding_options`)."""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from .foreign import user_decoder

NO_DECODER = object()
"""The task encoder has no ``decoder`` of its own (megatron.energon's class default): ``image_decode=`` decides."""


def decoding_options(open_kwargs: dict[str, Any], task_encoder: Any, where: str) -> dict[str, Any]:
    """``open_kwargs`` with what the task encoder's ``decoder`` asks of the readers (Energon's ``decoder = None``:
    raw bytes; a ``SampleDecoder``: its ``image_decode``); an ``image_decode=`` argument that contradicts it is
    refused naming both."""
    from .flavors.webdataset.sample_decoder import open_options

    decoder = user_decoder(task_encoder, NO_DECODER)  # megatron.energon's class default: image_decode= decides
    if decoder is NO_DECODER:
        return open_kwargs
    out = dict(open_kwargs)
    for name, value in open_options(decoder).items():
        if name in out and out[name] != value:
            raise OptionError(
                f"{where or 'get_train_dataset'}: {name}={out[name]!r} contradicts the task encoder's decoder "
                f"{decoder!r} (which asks for {name}={value!r}); give one of them"
            )
        out[name] = value
    return out
