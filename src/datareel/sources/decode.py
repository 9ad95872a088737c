"""Part decoders, chosen by the part's last extension (webdataset's handlers).

``txt`` -> str, ``json`` -> object, ``cls``/``id``/``index`` -> int,
``npy``/``npz`` -> numpy, ``pth`` -> torch (``weights_only=True``), ``msgpack``,
``cbor``, ``ten``; images (``jpg``, ``png``, ``webp``, ...) per ``image_decode``;
``.gz`` is unpacked first; unknown parts stay ``bytes``.

Datasets come from strangers, and unpickling runs code: ``pickle`` / ``pkl`` /
``pyd`` parts stay ``bytes`` (a warning names the part once per process) and
``pth`` loads tensors only, unless the dataset is opened with
``decode="trusted"``.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import torch
from webdataset import autodecode

from ..errors import DatasetError

IMAGE_DECODE = tuple(autodecode.imagespecs)
"""Accepted ``image_decode`` values: ``"pil"``, ``"rgb8"`` (numpy uint8 HWC), ``"torchrgb"``
(float CHW tensor in [0, 1], Energon's default), ``"torchrgb8"``, ``"l8"``, ... ."""


log = logging.getLogger("datareel")
_KNOWN = frozenset(autodecode.decoders) | {"gz"}
UNSAFE = frozenset({"pickle", "pkl", "pyd"})
"""Extensions whose decoding unpickles (runs code from the dataset): decoded only with ``decode="trusted"``."""
_warned: set[str] = set()
_IMAGES = frozenset(autodecode.IMAGE_EXTENSIONS)
_DIRECT = {
    extension: decoder
    for extension, decoder in autodecode.decoders.items()
    if extension not in UNSAFE and extension != "pth" and extension.lower() not in _IMAGES
}
"""Extensions whose only handler in webdataset's chain is its table entry (text, numbers, json, arrays,
...): called directly, as ``decode1`` would after trying the image and gzip handlers."""


class PartDecoder:
    """Decodes one part at a time; picklable, so workers receive it with the source."""

    def __init__(self, image_decode: str | None = "torchrgb", *, trusted: bool = False):
        self.trusted = bool(trusted)
        if image_decode is not None and image_decode not in IMAGE_DECODE:
            raise DatasetError(
                f"image_decode={image_decode!r} is not one of {list(IMAGE_DECODE)} (or None to keep image bytes)"
            )
        self.image_decode = image_decode
        self._decoder: autodecode.Decoder | None = None

    def _get(self) -> autodecode.Decoder:
        if self._decoder is None:
            handlers = [autodecode.imagehandler(self.image_decode)] if self.image_decode else []
            self._decoder = autodecode.Decoder(handlers)
        return self._decoder

    def __call__(self, part: str, data: bytes, where: str = "") -> Any:
        extension = part.rpartition(".")[2]
        if extension not in _KNOWN and not (self.image_decode and extension.lower() in _IMAGES):
            return data  # no handler would take it: skip webdataset's handler chain
        if extension in UNSAFE and not self.trusted:
            if part not in _warned:
                _warned.add(part)
                log.warning(
                    "%s: part %r is a pickle and stays bytes: unpickling runs code from the dataset. Open a dataset "
                    "you trust with decode='trusted' to unpickle it",
                    where,
                    part,
                )
            return data
        try:
            direct = _DIRECT.get(extension)
            if direct is not None and "." not in part:  # a plain part name: nothing else in the chain applies
                value = direct(data)
                return data if value is None else value  # decode1 treats None as "not handled"
            if extension == "pth":  # webdataset would torch.load with weights_only=False (code from the dataset)
                return torch.load(io.BytesIO(data), weights_only=not self.trusted, map_location="cpu")
            return self._get().decode1(part, data)
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{where}: part {part!r} is not valid UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from exc
        except Exception as exc:  # decoders raise anything: name the place, keep the cause
            raise DatasetError(f"{where}: cannot decode part {part!r}: {type(exc).__name__}: {exc}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"image_decode": self.image_decode, "trusted": self.trusted, "_decoder": None}
