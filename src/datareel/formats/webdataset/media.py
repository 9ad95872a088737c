"""Media metadata records (Energon's, ``megatron.energon.media.metadata``; ``datareel.energon.media.metadata``
gives them under that path): what ``prepare`` with a media filter stores per media file in the
``media_metadata`` table of ``index.sqlite`` (:mod:`.index_db`) — ``ImageMetadata``, ``AVMetadata`` — and
their typed JSON form there (:func:`serialize_media_metadata` / :func:`deserialize_media_metadata`), what a
store's ``get_media_metadata`` reads back (:mod:`datareel.blend.stores`)."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any, ClassVar

from ...errors import DatasetError
from ...sources.typed import edataclass

__all__ = [
    "AVMetadata",
    "ImageMetadata",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "serialize_media_metadata",
]


class MediaMetadataType(str, Enum):
    """The kinds of media metadata (the ``metadata_type`` column)."""

    AV = "av"
    IMAGE = "image"

    @classmethod
    def from_string(cls, value: str) -> MediaMetadataType:
        try:
            return cls(value)
        except ValueError:
            raise DatasetError(f"media metadata type {value!r} is not one of {[t.value for t in cls]}") from None


@edataclass
class MediaMetadataBase:
    """The base of media metadata records: a mapping of the fields that are set."""

    metadata_type: ClassVar[MediaMetadataType]

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> Any:
        return cls(**payload)


@edataclass
class AVMetadata(MediaMetadataBase):
    """A video or audio file's metadata."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.AV
    video_duration: float | None = None
    video_num_frames: int | None = None
    video_fps: float | None = None
    video_width: int | None = None
    video_height: int | None = None
    audio_duration: float | None = None
    audio_channels: int | None = None
    audio_sample_rate: int | None = None
    audio_num_samples: int | None = None


@edataclass
class ImageMetadata(MediaMetadataBase):
    """An encoded image's size, format (PIL's name) and mode."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.IMAGE
    width: int
    height: int
    format: str
    mode: str


_KINDS: dict[MediaMetadataType, type[MediaMetadataBase]] = {
    MediaMetadataType.AV: AVMetadata,
    MediaMetadataType.IMAGE: ImageMetadata,
}


def serialize_media_metadata(metadata: MediaMetadataBase) -> tuple[MediaMetadataType, str]:
    """``(type, compact JSON of the fields set)``: the two columns stored."""
    return metadata.metadata_type, json.dumps(metadata.to_dict(), separators=(",", ":"))


def deserialize_media_metadata(metadata_type: str | MediaMetadataType, metadata_json: str) -> MediaMetadataBase:
    """The record stored as ``(metadata_type, metadata_json)``."""
    kind = (
        metadata_type if isinstance(metadata_type, MediaMetadataType) else MediaMetadataType.from_string(metadata_type)
    )
    return _KINDS[kind].from_dict(json.loads(metadata_json) if metadata_json else {})
