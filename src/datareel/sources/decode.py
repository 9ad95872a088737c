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
import os
import pickle
import re
import zipfile
import zlib
from typing import Any

import numpy as np
import torch
from webdataset import autodecode

from ..errors import DatasetError, OptionError
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
ZIPPED = frozenset({"npz", TORCH})
"""Extensions whose decoders unpack a zip archive (numpy's ``npz``; torch's archive format)."""
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

IMAGE_FORMATS = frozenset(
    {
        "BLP", "BMP", "CUR", "DCX", "DDS", "DIB", "FITS", "FLI", "FTEX", "GBR", "GIF", "ICNS", "ICO", "IM",
        "JPEG", "JPEG2000", "MPEG", "MSP", "PCD", "PCX", "PIXAR", "PNG", "PPM", "PSD", "SGI", "SUN", "TGA",
        "TIFF", "WEBP", "XBM", "XPM",
    }
)  # fmt: skip
"""The PIL formats image parts are opened with (unless trusted): those webdataset's image extensions
name (``jpg`` -> JPEG, ``tif`` -> TIFF, ``pgm`` -> PPM, ...) whose PIL reader decodes the bytes itself,
in this process.  Content sniffing stays inside this set whatever the extension says (a PNG named
``.jpg`` decodes, as in webdataset).  Left out, with the reason a refusal gives: :data:`REFUSED_FORMATS`."""
REFUSED_FORMATS = {
    "EPS": "PIL decodes it by running Ghostscript, an external PostScript interpreter, on the bytes",
    "IPTC": "PIL's IPTC reader opens the image embedded in it with every format PIL has, EPS included",
    "BUFR": "PIL only identifies it: decoding is left to a handler other code may register",
    "GRIB": "PIL only identifies it: decoding is left to a handler other code may register",
    "HDF5": "PIL only identifies it: decoding is left to a handler other code may register",
    "WMF": "PIL decodes it only through the operating system's renderer or a handler other code registers",
}
"""Formats webdataset's image extensions name that are not opened by default, and why."""

ENV_MAX_DECOMPRESSED = "DATAREEL_MAX_DECOMPRESSED"
MAX_DECOMPRESSED = 1 << 30
"""Bytes one compressed part may unpack to (default 1 GiB; ``DATAREEL_MAX_DECOMPRESSED``, e.g. ``4GiB``,
or ``PartDecoder(max_decompressed=...)``): a ``.gz`` part's contents, or the members of an ``npz`` /
``pth`` zip together.  A part past it is a decode error (a sample failure), never unpacked whole."""
_CHUNK = 1 << 20  # bytes of output asked of zlib at a time
_UNITS = {"": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def decompression_limit(value: int | str | None = None) -> int:
    """The decompression limit in bytes: ``value`` (bytes, or ``"512MiB"``-style text), else
    ``$DATAREEL_MAX_DECOMPRESSED``, else :data:`MAX_DECOMPRESSED`.  A limit that is not a positive
    size is an :class:`~datareel.errors.OptionError` naming where it came from."""
    source = "max_decompressed"
    if value is None:
        value = os.environ.get(ENV_MAX_DECOMPRESSED)
        source = ENV_MAX_DECOMPRESSED
        if value is None or not value.strip():
            return MAX_DECOMPRESSED
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d{1,20})\s*([kmgt]ib)?\s*", value, re.IGNORECASE)
        number = int(match[1]) * _UNITS[(match[2] or "").lower()] if match else 0
    else:
        number = value if isinstance(value, int) and not isinstance(value, bool) else 0
    if number <= 0:
        raise OptionError(
            f"{source}={value!r} is not a size: give a positive number of bytes, optionally with KiB, MiB, GiB "
            f"or TiB (e.g. 4GiB); it bounds what one compressed part may unpack to (default 1GiB)"
        )
    return number


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


def _too_big(limit: int, compressed: int, what: str) -> DatasetError:
    return DatasetError(
        f"{what} past the limit of {_size(limit)} on what one compressed part may unpack to ({compressed:,} bytes "
        f"compressed): a decompression bomb, or a part bigger than the limit. If the data is yours, raise the "
        f"limit with {ENV_MAX_DECOMPRESSED}=<size> (e.g. {_size(limit * 4).replace(' ', '')}) in the "
        f"environment the loader starts in"
    )


def gunzip(data: bytes, limit: int) -> bytes:
    """The contents of gzip ``data`` (every member, as ``gzip.decompress``), unpacked a chunk at a time:
    past ``limit`` bytes it stops and raises, having held at most ``limit`` bytes plus one chunk."""
    out: list[bytes] = []
    total = 0
    rest = data
    while rest.strip(b"\0"):  # gzip allows zero padding after the last member
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member
        pending = rest
        while not inflate.eof:
            try:
                chunk = inflate.decompress(pending, min(_CHUNK, limit + 1 - total))
            except zlib.error as exc:
                raise DatasetError(f"its gzip data is damaged ({exc})") from None
            total += len(chunk)
            if total > limit:
                raise _too_big(limit, len(data), "it unpacks")
            tail = inflate.unconsumed_tail
            if not chunk and not inflate.eof and len(tail) == len(pending):  # nothing read, nothing made
                raise DatasetError("its gzip data ends before its compressed stream does (truncated)")
            out.append(chunk)
            pending = tail
        rest = inflate.unused_data
    return b"".join(out)


def check_zip(data: bytes, limit: int) -> None:
    """Refuse a zip (``npz``, a ``pth`` archive) whose members unpack to more than ``limit`` bytes together,
    from the sizes its directory declares (``zipfile`` reads no member past its declared size)."""
    if not data.startswith(b"PK"):
        return  # not a zip: the decoder says what it is
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        return  # not a zip after all: the decoder names the failure
    if total > limit:
        raise _too_big(limit, len(data), f"its zip members declare {total:,} bytes,")


def _gz_filter(limit: int):
    """webdataset's ``gzfilter`` (one level, ``.gz`` only) with :func:`gunzip`'s limit."""

    def gz(key: str, data: bytes) -> Any:
        if not key.endswith("." + WRAPPER):
            return None
        return autodecode.Continue(key[: -len(WRAPPER) - 1], gunzip(data, limit))

    return gz


def _zip_filter(limit: int):
    def zips(key: str, data: bytes) -> None:
        if key.rpartition(".")[2] in ZIPPED:
            check_zip(data, limit)

    return zips


_ordered: tuple[str, ...] | None = None


def _formats() -> tuple[str, ...]:
    """:data:`IMAGE_FORMATS` in the order PIL tries its formats (so sniffing picks what webdataset's would)."""
    global _ordered
    if _ordered is None:
        from PIL import Image

        Image.init()
        _ordered = tuple(f for f in Image.ID if f in IMAGE_FORMATS)
    return _ordered


def _found(data: bytes) -> str:
    """What a refused image part's first bytes are, by PIL's own signature checks (no reader is run)."""
    from PIL import Image

    prefix = data[:16]
    for name in Image.ID:
        accept = Image.OPEN.get(name, (None, None))[1]
        if name in IMAGE_FORMATS or accept is None:
            continue
        try:
            result = accept(prefix)
        except Exception:
            continue
        if result and not isinstance(result, str):  # a str is PIL's warning, not a match
            return name
    return ""


def open_image(data: bytes, part: str) -> Any:
    """``data`` opened with PIL restricted to :data:`IMAGE_FORMATS` (not loaded). Bytes of any other format,
    or of none, are a :class:`DatasetError` naming ``part``, the format found and the allowed ones."""
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(io.BytesIO(data), formats=_formats())
    except UnidentifiedImageError:
        pass
    found = _found(data)
    allowed = ", ".join(sorted(IMAGE_FORMATS))
    if found:
        why = REFUSED_FORMATS.get(found, "it is not a format webdataset decodes images by extension in")
        raise DatasetError(
            f"image part {part!r} holds {found} data, which datareel does not decode by default: {why}. Decoded "
            f"formats: {allowed}. Convert the image to one of them, or open a dataset you trust with "
            f"decode='trusted' (every format PIL has)"
        ) from None
    raise DatasetError(
        f"image part {part!r} is not an image in any format datareel decodes ({allowed}); it is damaged, or "
        f"holds another kind of data"
    ) from None


def _image_handler(spec: str):
    """webdataset's image handler (same extensions, same conversions per ``spec``), with the image opened
    by :func:`open_image`."""
    atype, etype, mode = autodecode.imagespecs[spec]

    def image(key: str, data: bytes) -> Any:
        extension = key.rpartition(".")[2]
        if extension.lower() not in _IMAGES:
            return None
        with open_image(data, key[1:]) as img:
            img.load()
            img = img.convert(mode.upper())
        if atype == "pil":
            return img
        array = np.asarray(img)  # (H, W) for "l", (H, W, 3|4) for "rgb"/"rgba"
        if etype == "float":
            array = array.astype(np.float32) / 255.0
        if atype == "numpy":
            return array
        return torch.from_numpy((array.transpose(2, 0, 1) if array.ndim == 3 else array).copy())  # CHW

    return image


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
