"""Energon's ``megatron.energon.epathlib.epath``: :class:`EPath` (datareel's own, :mod:`datareel.storage.epath`:
a record's ``dataset_path`` is one wherever it is read) and the dataset cache ``dss://`` paths live in,
:data:`NVDATASET_CACHE_DIR`, a module attribute as in Energon (read from the environment at import; set it
here to move the cache): loading the facade makes the ``dss`` alias read it."""

from __future__ import annotations

import os

from ...storage.epath import DEFAULT_PROFILE_NAME, EPath, dss_location
from ...storage.registry import register_alias

#: The dataset cache ``dss://`` paths live in (``$NVDATASET_CACHE_DIR``, read at import as Energon does).
NVDATASET_CACHE_DIR: EPath | None = (
    EPath(os.environ["NVDATASET_CACHE_DIR"]) if "NVDATASET_CACHE_DIR" in os.environ else None
)


def _dss_location(url: str) -> str:
    """Where a ``dss://`` URL (a path string, a metadataset's, an ``EPath``'s) lies: under this module's
    :data:`NVDATASET_CACHE_DIR`, as it is when asked."""
    return dss_location(url, NVDATASET_CACHE_DIR)


register_alias("dss", _dss_location)

__all__ = ["DEFAULT_PROFILE_NAME", "NVDATASET_CACHE_DIR", "EPath"]
