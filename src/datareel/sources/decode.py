"""Part decoders, chosen by the part's last extension (webdataset's handlers).

``txt`` -> str, ``json`` -> object, ``cls``/``id``/``index`` -> int,
``npy``/``npz`` -> numpy, ``pth`` -> torch, ``pickle``/``pyd``, ``msgpack``,
``cbor``, ``ten``; images (``jpg``, ``png``, ``webp``, ...) per ``image_decode``;
``.gz`` is unpacked first; unknown parts stay ``bytes``.
"""

from __future__ import annotations

from typing import Any

from webdataset import autodecode

from ..errors import DatasetError

IMAGE_DECODE = tuple(autodecode.imagespecs)
"""Accepted ``image_decode`` values: ``"pil"``, ``"rgb8"`` (numpy uint8 HWC), ``"torchrgb"``
(float CHW tensor in [0, 1], Energon's default), ``"torchrgb8"``, ``"l8"``, ... ."""


_KNOWN = frozenset(autodecode.decoders) | {"gz"}
_IMAGES = frozenset(autodecode.IMAGE_EXTENSIONS)


class PartDecoder:
    """Decodes one part at a time; picklable, so workers receive it with the source."""

    def __init__(self, image_decode: str | None = "torchrgb"):
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
        try:
            return self._get().decode1(part, data)
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{where}: part {part!r} is not valid UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from exc
        except Exception as exc:  # decoders raise anything: name the place, keep the cause
            raise DatasetError(f"{where}: cannot decode part {part!r}: {type(exc).__name__}: {exc}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"image_decode": self.image_decode, "_decoder": None}
