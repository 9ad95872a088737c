"""Part decoders, chosen by the part's last extension (webdataset's handlers).

``txt`` -> str, ``json`` -> object, ``cls``/``id``/``index`` -> int,
``npy``/``npz`` -> numpy, ``pth`` -> torch (``weights_only=True``), ``msgpack``,
``cbor``, ``ten``; images (``jpg``, ``png``, ``webp``, ...) per ``image_decode``;
``.gz`` is unpacked first (one level, as webdataset does: ``x.json.gz`` is decoded as
``json``); unknown parts stay ``bytes``.

Datasets come from strangers, and unpickling runs code: ``pickle`` / ``pkl`` /
``pyd`` parts stay ``bytes`` (a warning names the part once per process) and
``pth`` loads tensors only, unless the dataset is opened with
``decode="trusted"``.  The rule is on the extension the part is *decoded as*, after
the compression wrapper: ``x.pickle.gz`` stays bytes (the part as stored) and
``x.pth.gz`` loads tensors only, like their uncompressed forms.  ``.gz`` is the
only wrapper webdataset's decoder unpacks; a part ending in another one (``xz``,
``bz2``, ``zst``, ``lz4``, ...) has no handler and stays bytes.  The handler chain
itself holds no unpickling decoder unless trusted, so no other name can reach one.
"""

from __future__ import annotations

import gzip
import io
import logging
import pickle
from typing import Any

import torch
from webdataset import autodecode

from ..errors import DatasetError
from .jsonl import unparsable

IMAGE_DECODE = tuple(autodecode.imagespecs)
"""Accepted ``image_decode`` values: ``"pil"``, ``"rgb8"`` (numpy uint8 HWC), ``"torchrgb"``
(float CHW tensor in [0, 1], Energon's default), ``"torchrgb8"``, ``"l8"``, ... ."""


log = logging.getLogger("datareel")
_KNOWN = frozenset(autodecode.decoders)
UNSAFE = frozenset({"pickle", "pkl", "pyd"})
"""Extensions whose decoding unpickles (runs code from the dataset): decoded only with ``decode="trusted"``."""
TORCH = "pth"
"""Decoded with ``torch.load``: ``weights_only=True`` (tensors and plain containers) unless trusted."""
WRAPPER = "gz"
"""The compression webdataset's decoder unpacks before it dispatches (its ``gzfilter``, one level)."""
_warned: set[str] = set()
_IMAGES = frozenset(autodecode.IMAGE_EXTENSIONS)
_SAFE = {
    extension: decoder
    for extension, decoder in autodecode.decoders.items()
    if extension not in UNSAFE and extension != TORCH
}
"""webdataset's table of basic decoders without those that unpickle."""
_DIRECT = {extension: decoder for extension, decoder in _SAFE.items() if extension.lower() not in _IMAGES}
"""Extensions whose only handler in webdataset's chain is its table entry (text, numbers, json, arrays,
...): called directly, as ``decode1`` would after trying the image and gzip handlers."""


def decoded_as(part: str) -> tuple[str, bool]:
    """``(extension, gzipped)``: the extension webdataset's decoder dispatches ``part`` on (the last one
    after unpacking one trailing ``.gz``), and whether it unpacks one.  ``"x.pickle.gz"`` -> ``("pickle", True)``."""
    name = "." + part
    gzipped = name.endswith("." + WRAPPER)
    if gzipped:
        name = name[: -len(WRAPPER) - 1]
    return name.rpartition(".")[2], gzipped


def _basic(key: str, data: bytes) -> Any:
    """webdataset's ``basichandlers`` without the unpickling decoders (the chain's last handler unless
    trusted): a name that reached one here would be a hole in :meth:`PartDecoder.__call__`'s check, so it
    is refused rather than unpickled."""
    extension = key.rpartition(".")[2]
    if extension in UNSAFE or extension == TORCH:
        raise DatasetError(f"part {key[1:]!r} would be unpickled; open the dataset with decode='trusted' to allow it")
    decoder = _SAFE.get(extension)
    return None if decoder is None else decoder(data)


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
            post = [autodecode.basichandlers] if self.trusted else [_basic]
            self._decoder = autodecode.Decoder(handlers, pre=[autodecode.gzfilter], post=post)
        return self._decoder

    def __call__(self, part: str, data: bytes, where: str = "") -> Any:
        extension, gzipped = decoded_as(part)
        if not gzipped and extension not in _KNOWN and not (self.image_decode and extension.lower() in _IMAGES):
            return data  # no handler would take it: skip webdataset's handler chain
        if extension in UNSAFE and not self.trusted:
            if part not in _warned:
                _warned.add(part)
                log.warning(
                    "%s: part %r is a pickle%s and stays bytes: unpickling runs code from the dataset. Open a "
                    "dataset you trust with decode='trusted' to unpickle it",
                    where,
                    part,
                    " (gzip-compressed)" if gzipped else "",
                )
            return data
        try:
            direct = _DIRECT.get(extension)
            if direct is not None and "." not in part:  # a plain part name: nothing else in the chain applies
                value = direct(data)
                return data if value is None else value  # decode1 treats None as "not handled"
            if extension == TORCH:  # webdataset would torch.load with weights_only=False (code from the dataset)
                raw = gzip.decompress(data) if gzipped else data
                return torch.load(io.BytesIO(raw), weights_only=not self.trusted, map_location="cpu")
            return self._get().decode1(part, data)
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{where}: part {part!r} is not valid UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from exc
        except pickle.UnpicklingError as exc:
            if self.trusted:
                raise DatasetError(f"{where}: cannot decode part {part!r}: {type(exc).__name__}: {exc}") from exc
            raise DatasetError(
                f"{where}: cannot decode part {part!r}: it holds objects other than tensors and plain containers, "
                f"which torch.load(weights_only=True) does not unpickle (unpickling runs code from the dataset). "
                f"Open a dataset you trust with decode='trusted' to load it fully"
            ) from exc
        except DatasetError as exc:
            raise DatasetError(f"{where}: {exc}") from None
        except RecursionError as exc:  # json nested past the stack
            raise DatasetError(f"{where}: cannot decode part {part!r}: {unparsable(exc)}") from None
        except ValueError as exc:
            if "integer string conversion" not in str(exc):  # Python's 4,300-digit limit (json, cls, id)
                raise DatasetError(f"{where}: cannot decode part {part!r}: {type(exc).__name__}: {exc}") from exc
            raise DatasetError(f"{where}: cannot decode part {part!r}: it {unparsable(exc)}") from None
        except Exception as exc:  # decoders raise anything: name the place, keep the cause
            raise DatasetError(f"{where}: cannot decode part {part!r}: {type(exc).__name__}: {exc}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"image_decode": self.image_decode, "trusted": self.trusted, "_decoder": None}
