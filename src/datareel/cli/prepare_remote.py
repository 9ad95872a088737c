"""``datareel prepare s3://...`` now lives in :mod:`datareel.formats.webdataset.prepare_store`; the old names
are here too."""

from __future__ import annotations

from ..formats.webdataset.prepare_store import _scan_one as _scan_one
from ..formats.webdataset.prepare_store import prepare_remote_webdataset as prepare_remote_webdataset

__all__ = ["prepare_remote_webdataset"]
