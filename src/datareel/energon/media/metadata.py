"""Energon's media metadata records (``megatron.energon.media.metadata``): datareel's own
(:mod:`datareel.formats.webdataset.media`), what ``prepare`` with a media filter stores per media file in
``index.sqlite`` and a store's ``get_media_metadata`` reads back."""

from ...formats.webdataset.media import (
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
