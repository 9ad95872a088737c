"""Energon's ``megatron.energon.media``: media metadata records, the media filter that chooses media files
(:mod:`.extractor`) and the metadata of a plain directory (:mod:`.filesystem_prepare`)."""

from .metadata import (
    AVMetadata,
    ImageMetadata,
    MediaMetadataBase,
    MediaMetadataType,
    deserialize_media_metadata,
    serialize_media_metadata,
)

__all__ = [
    "AVMetadata",
    "ImageMetadata",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "serialize_media_metadata",
]
