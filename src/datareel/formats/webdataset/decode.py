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

Images are opened with PIL restricted to :data:`IMAGE_FORMATS`, whatever the part's
extension: PIL picks a format by the bytes, and its EPS reader runs Ghostscript (an
external interpreter) on them, so bytes of a refused format (EPS named ``.jpg``
included) are a decode error naming the part and the format, never another program's
input.  ``decode="trusted"`` opens images as webdataset does, with every format PIL has.

Decompression is bounded, trusted or not: a ``.gz`` part is unpacked incrementally and
refused once it passes :data:`MAX_DECOMPRESSED` bytes (``DATAREEL_MAX_DECOMPRESSED``), so
a gzip bomb is never held in memory; the members of a zip (``npz``, a ``pth`` archive)
are refused when their sizes add up to more, before anything is unpacked.
"""

from __future__ import annotations

import io
import logging
import pickle
from typing import Any

import torch
from webdataset import autodecode

from ...errors import DatasetError
from ..metafiles import unparsable
from .compress import ENV_MAX_DECOMPRESSED as ENV_MAX_DECOMPRESSED
from .compress import MAX_DECOMPRESSED as MAX_DECOMPRESSED
from .compress import TORCH, WRAPPER, ZIPPED, _gz_filter, _zip_filter, check_zip, gunzip
from .compress import decompression_limit as decompression_limit
from .images import _IMAGES, _image_handler
from .images import IMAGE_FORMATS as IMAGE_FORMATS
from .images import REFUSED_FORMATS as REFUSED_FORMATS
from .images import open_image as open_image

IMAGE_DECODE = tuple(autodecode.imagespecs)
"""Accepted ``image_decode`` values: ``"pil"``, ``"rgb8"`` (numpy uint8 HWC), ``"torchrgb"``
(float CHW tensor in [0, 1], Energon's default), ``"torchrgb8"``, ``"l8"``, ... ."""


log = logging.getLogger("datareel")
_KNOWN = frozenset(autodecode.decoders)
UNSAFE = frozenset({"pickle", "pkl", "pyd"})
"""Extensions whose decoding unpickles (runs code from the dataset): decoded only with ``decode="trusted"``."""
_warned: set[str] = set()
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
    """Decodes one part at a time; picklable, so workers receive it with the source.

    ``max_decompressed``: bytes one compressed part may unpack to (see :func:`decompression_limit`; read
    when the decoder is made, so workers use the main process's limit)."""

    def __init__(
        self, image_decode: str | None = "torchrgb", *, trusted: bool = False, max_decompressed: int | str | None = None
    ):
        self.trusted = bool(trusted)
        if image_decode is not None and image_decode not in IMAGE_DECODE:
            raise DatasetError(
                f"image_decode={image_decode!r} is not one of {list(IMAGE_DECODE)} (or None to keep image bytes)"
            )
        self.image_decode = image_decode
        self.max_decompressed = decompression_limit(max_decompressed)
        self._decoder: autodecode.Decoder | None = None

    def _get(self) -> autodecode.Decoder:
        if self._decoder is None:
            handlers: list[Any] = []
            if self.image_decode:
                # trusted: webdataset's own handler, every PIL format (EPS through Ghostscript included)
                image = autodecode.imagehandler if self.trusted else _image_handler
                handlers = [image(self.image_decode)]
            post = [autodecode.basichandlers] if self.trusted else [_basic]
            pre = [_gz_filter(self.max_decompressed), _zip_filter(self.max_decompressed)]
            self._decoder = autodecode.Decoder(handlers, pre=pre, post=post)
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
                if extension in ZIPPED:
                    check_zip(data, self.max_decompressed)
                value = direct(data)
                return data if value is None else value  # decode1 treats None as "not handled"
            if extension == TORCH:  # webdataset would torch.load with weights_only=False (code from the dataset)
                raw = gunzip(data, self.max_decompressed) if gzipped else data
                check_zip(raw, self.max_decompressed)
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
            text = str(exc)
            if not text.startswith(("part ", "image part ")):
                text = f"cannot decode part {part!r}: {text}"
            raise DatasetError(f"{where}: {text}") from None
        except RecursionError as exc:  # json nested past the stack
            raise DatasetError(f"{where}: cannot decode part {part!r}: {unparsable(exc)}") from None
        except ValueError as exc:
            if "integer string conversion" not in str(exc):  # Python's 4,300-digit limit (json, cls, id)
                raise DatasetError(f"{where}: cannot decode part {part!r}: {type(exc).__name__}: {exc}") from exc
            raise DatasetError(f"{where}: cannot decode part {part!r}: it {unparsable(exc)}") from None
        except Exception as exc:  # decoders raise anything: name the place, keep the cause
            raise DatasetError(f"{where}: cannot decode part {part!r}: {type(exc).__name__}: {exc}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_decoder": None}
