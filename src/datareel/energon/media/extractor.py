"""Energon's media filter (``megatron.energon.media.extractor``): which files of a dataset are media
(:class:`MediaFilterStrategy`: by extension, by header bytes, by glob) and their metadata.

Images are measured with PIL, restricted to datareel's decoded formats
(:func:`datareel.formats.webdataset.images.open_image`: no external programs run on dataset bytes).
Audio and video are measured with PyAV (:mod:`.av_probe`, the optional extra ``datareel[av]``); without
it, or for a file it cannot read, their metadata is left out (``None``), as Energon does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from fnmatch import fnmatch
from pathlib import PurePosixPath
from typing import Any

from ...errors import OptionError
from .metadata import ImageMetadata, MediaMetadataBase, MediaMetadataType

__all__ = ["MediaFilterConfig", "MediaFilterStrategy"]

log = logging.getLogger("datareel")

IMAGE_EXTENSIONS = frozenset({"bmp", "gif", "ico", "j2k", "jp2", "jpx", "jpeg", "jpg", "png", "tif", "tiff", "webp"})
AV_EXTENSIONS = frozenset({"aac", "avi", "flac", "m4a", "m4v", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm"})
_PROBE = 262  # bytes the filetype package looks at


class MediaFilterStrategy(str, Enum):
    """How media files are recognised."""

    EXTENSION = "EXTENSION"
    HEADER = "HEADER"
    GLOB = "GLOB"


def _by_extension(name: str) -> MediaMetadataType | None:
    suffix = PurePosixPath(name).suffix.lstrip(".").lower()
    if suffix in IMAGE_EXTENSIONS:
        return MediaMetadataType.IMAGE
    if suffix in AV_EXTENSIONS:
        return MediaMetadataType.AV
    return None


def _by_header(data: bytes) -> MediaMetadataType | None:
    import filetype

    kind = filetype.guess(data[:_PROBE])
    mime = getattr(kind, "mime", None) or ""
    if mime.startswith("image/"):
        return MediaMetadataType.IMAGE
    if mime.startswith(("video/", "audio/")):
        return MediaMetadataType.AV
    return None


@dataclass(frozen=True)
class MediaFilterConfig:
    """A media filter: ``strategy`` and, for ``GLOB``, its ``patterns``."""

    strategy: MediaFilterStrategy
    patterns: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, glob: str | None, header: bool, extension: bool) -> MediaFilterConfig:
        """The filter the CLI's three options name (exactly one of them; globs separated by commas)."""
        if sum(bool(s) for s in (glob, header, extension)) != 1:
            raise OptionError(
                "give exactly one media filter: a glob (patterns separated by commas), by header, or by extension"
            )
        if glob:
            return cls(strategy=MediaFilterStrategy.GLOB, patterns=glob.split(","))
        return cls(strategy=MediaFilterStrategy.HEADER if header else MediaFilterStrategy.EXTENSION)

    def should_consider_all(self) -> bool:
        """Whether every file must be read to decide (by header)."""
        return self.strategy == MediaFilterStrategy.HEADER

    def should_consider_media(self, name: str) -> bool:
        """Whether ``name`` may be a media file (a first check, before its bytes are read)."""
        lower = name.lower()
        if self.strategy == MediaFilterStrategy.HEADER:
            return True
        if self.strategy == MediaFilterStrategy.EXTENSION:
            return _by_extension(lower) is not None
        return any(fnmatch(lower, p) for p in self.patterns)

    def extract_metadata(self, source: Any, filename: str | None = None) -> MediaMetadataBase | None:
        """The metadata of a media file (``source``: bytes, an open binary file or a path), ``None`` when it is
        not media under this filter or cannot be measured."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
        elif hasattr(source, "read"):
            data = source.read()
        else:
            filename = filename or PurePosixPath(str(source)).name
            with open(str(source), "rb") as f:
                data = f.read()
        if filename is None:
            raise OptionError("MediaFilterConfig.extract_metadata: give filename= with bytes or an open file")
        if self.strategy == MediaFilterStrategy.GLOB and not any(fnmatch(filename, p) for p in self.patterns):
            return None
        kind = _by_extension(filename)
        if self.strategy == MediaFilterStrategy.HEADER:
            kind = _by_header(data) or kind
        if kind is MediaMetadataType.IMAGE:
            return _image(data, filename)
        if kind is MediaMetadataType.AV:
            from .av_probe import av_metadata

            return av_metadata(data, filename)
        return None


def _image(data: bytes, filename: str) -> ImageMetadata | None:
    from ...errors import DatasetError
    from ...formats.webdataset.images import open_image

    try:
        with open_image(data, filename) as image:
            image.load()
            return ImageMetadata(
                width=image.width, height=image.height, format=image.format or "UNKNOWN", mode=image.mode or "UNKNOWN"
            )
    except (DatasetError, OSError, ValueError):
        log.debug("no image metadata for %s", filename, exc_info=True)
        return None
