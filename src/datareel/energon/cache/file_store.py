"""Energon's ``megatron.energon.cache.file_store``: the file stores cookers read auxiliary data from.

- :class:`SystemFileStore`, :class:`WebdatasetFileStore`, :class:`JsonlFileStore`: datareel's own
  (:mod:`datareel.blend.stores`: the stores a metadataset's ``aux`` opens, bytes by key through
  :mod:`datareel.storage`), under Energon's module path;
- :class:`DecodeFileStore`: another store, its items decoded (a :class:`~.base.FileStoreDecoder`).
"""

from __future__ import annotations

from typing import Any

from ...blend.stores import JsonlFileStore, SystemFileStore, WebdatasetFileStore
from ...sources.source_info import SourceInfo
from ..epathlib import EPath
from .base import FileStore, FileStoreDecoder, FileStoreWrapper

__all__ = ["DecodeFileStore", "JsonlFileStore", "SystemFileStore", "WebdatasetFileStore", "epath"]


def epath(path: Any) -> Any:
    """``path`` as Energon's ``EPath`` (what Energon's records hold)."""
    return EPath(path)


class DecodeFileStore(FileStoreWrapper[Any]):
    """``inner``'s items decoded by ``decoder`` (``decoder.decode(fname, raw)``)."""

    def __init__(self, inner: FileStore[bytes], *, decoder: FileStoreDecoder):
        super().__init__(inner)
        self.decoder = decoder

    def __getitem__(self, fname: str) -> tuple[Any, SourceInfo]:
        data, info = self._inner[fname]
        return self.decoder.decode(fname, data), info

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return self.decoder.decode(kwargs["fname"], self._inner._decode_raw(data, **kwargs))

    def __str__(self) -> str:
        return f"DecodeFileStore(inner={self._inner}, decoder={self.decoder})"
