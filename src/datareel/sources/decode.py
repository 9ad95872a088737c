"""The part decoders now live in :mod:`datareel.formats.webdataset.decode` (with
:mod:`~datareel.formats.webdataset.images` and :mod:`~datareel.formats.webdataset.compress`); every old name
is importable here too."""

from __future__ import annotations

from ..formats.webdataset.compress import _CHUNK as _CHUNK
from ..formats.webdataset.compress import _UNITS as _UNITS
from ..formats.webdataset.compress import ENV_MAX_DECOMPRESSED as ENV_MAX_DECOMPRESSED
from ..formats.webdataset.compress import MAX_DECOMPRESSED as MAX_DECOMPRESSED
from ..formats.webdataset.compress import TORCH as TORCH
from ..formats.webdataset.compress import WRAPPER as WRAPPER
from ..formats.webdataset.compress import ZIPPED as ZIPPED
from ..formats.webdataset.compress import _gz_filter as _gz_filter
from ..formats.webdataset.compress import _size as _size
from ..formats.webdataset.compress import _too_big as _too_big
from ..formats.webdataset.compress import _zip_filter as _zip_filter
from ..formats.webdataset.compress import check_zip as check_zip
from ..formats.webdataset.compress import decompression_limit as decompression_limit
from ..formats.webdataset.compress import gunzip as gunzip
from ..formats.webdataset.decode import _DIRECT as _DIRECT
from ..formats.webdataset.decode import _KNOWN as _KNOWN
from ..formats.webdataset.decode import _SAFE as _SAFE
from ..formats.webdataset.decode import IMAGE_DECODE as IMAGE_DECODE
from ..formats.webdataset.decode import UNSAFE as UNSAFE
from ..formats.webdataset.decode import PartDecoder as PartDecoder
from ..formats.webdataset.decode import _basic as _basic
from ..formats.webdataset.decode import _warned as _warned
from ..formats.webdataset.decode import decoded_as as decoded_as
from ..formats.webdataset.decode import log as log
from ..formats.webdataset.images import _IMAGES as _IMAGES
from ..formats.webdataset.images import IMAGE_FORMATS as IMAGE_FORMATS
from ..formats.webdataset.images import REFUSED_FORMATS as REFUSED_FORMATS
from ..formats.webdataset.images import _formats as _formats
from ..formats.webdataset.images import _found as _found
from ..formats.webdataset.images import _image_handler as _image_handler
from ..formats.webdataset.images import open_image as open_image

__all__ = [
    "ENV_MAX_DECOMPRESSED",
    "IMAGE_DECODE",
    "IMAGE_FORMATS",
    "MAX_DECOMPRESSED",
    "PartDecoder",
    "REFUSED_FORMATS",
    "TORCH",
    "UNSAFE",
    "WRAPPER",
    "ZIPPED",
    "check_zip",
    "decoded_as",
    "decompression_limit",
    "gunzip",
    "log",
    "open_image",
]
