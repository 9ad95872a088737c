"""Image parts opened with PIL restricted to :data:`IMAGE_FORMATS`, whatever the part's extension: PIL
picks a format by the bytes, and its EPS reader runs Ghostscript (an external interpreter) on them, so
bytes of a refused format (EPS named ``.jpg`` included) are a decode error naming the part and the
format, never another program's input."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch
from webdataset import autodecode

from ...errors import DatasetError

_IMAGES = frozenset(autodecode.IMAGE_EXTENSIONS)

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
