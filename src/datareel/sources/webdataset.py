"""The WebDataset reader now lives in :mod:`datareel.formats.webdataset` (:mod:`~datareel.formats.webdataset.reader`);
the old names are importable here too."""

from __future__ import annotations

from ..formats.webdataset.members import group as _group  # noqa: F401 (its old private name)
from ..formats.webdataset.reader import READ_MANY_BYTES as READ_MANY_BYTES
from ..formats.webdataset.reader import WebDatasetSource as WebDatasetSource

__all__ = ["READ_MANY_BYTES", "WebDatasetSource"]
