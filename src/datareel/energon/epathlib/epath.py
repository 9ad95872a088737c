"""Energon's ``megatron.energon.epathlib.epath``: :class:`EPath` (:mod:`.path`) and the dataset cache ``dss://``
paths live in, :data:`NVDATASET_CACHE_DIR`, a module attribute as in Energon (read from the environment at import;
set it here to move the cache).  Loading the facade makes the ``dss`` alias read it, and makes records'
``dataset_path`` an ``EPath`` (:func:`datareel.sources.source_info.register_record_path`), as Energon's readers
make it: the core knows neither."""

from __future__ import annotations

import os

from ...sources.source_info import register_record_path
from ...storage.registry import register_alias
from .names import DEFAULT_PROFILE_NAME
from .path import EPath, dss_location

#: The dataset cache ``dss://`` paths live in (``$NVDATASET_CACHE_DIR``, read at import as Energon does).
NVDATASET_CACHE_DIR: EPath | None = (
    EPath(os.environ["NVDATASET_CACHE_DIR"]) if "NVDATASET_CACHE_DIR" in os.environ else None
)


def _dss_location(url: str) -> str:
    """Where a ``dss://`` URL (a path string, a metadataset's, an ``EPath``'s) lies: under this module's
    :data:`NVDATASET_CACHE_DIR`, as it is when asked."""
    return dss_location(url, NVDATASET_CACHE_DIR)


register_alias("dss", _dss_location)
register_record_path(EPath)

__all__ = ["DEFAULT_PROFILE_NAME", "NVDATASET_CACHE_DIR", "EPath"]
