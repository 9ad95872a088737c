"""Energon's ``index.sqlite`` writer now lives in :mod:`datareel.formats.webdataset.index_db`; the old names
are here too."""

from __future__ import annotations

from ..formats.webdataset.index_db import CACHE_KIB as CACHE_KIB
from ..formats.webdataset.index_db import INDICES as INDICES
from ..formats.webdataset.index_db import SCHEMA as SCHEMA
from ..formats.webdataset.index_db import IndexDb as IndexDb

__all__ = ["CACHE_KIB", "INDICES", "SCHEMA", "IndexDb"]
