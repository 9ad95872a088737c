"""The tar parser now lives in :mod:`datareel.formats.webdataset.tarparse`; every old name is importable here too."""

from __future__ import annotations

from ..errors import TarFormatError as TarFormatError
from ..formats.webdataset.tarparse import _IN_BLOCK as _IN_BLOCK
from ..formats.webdataset.tarparse import _PLAIN_KINDS as _PLAIN_KINDS
from ..formats.webdataset.tarparse import _REGULAR as _REGULAR
from ..formats.webdataset.tarparse import _SKIPPED_NAME as _SKIPPED_NAME
from ..formats.webdataset.tarparse import BLOCK as BLOCK
from ..formats.webdataset.tarparse import MAX_MEMBER as MAX_MEMBER
from ..formats.webdataset.tarparse import _checksum_ok as _checksum_ok
from ..formats.webdataset.tarparse import _header as _header
from ..formats.webdataset.tarparse import _long_name as _long_name
from ..formats.webdataset.tarparse import _number as _number
from ..formats.webdataset.tarparse import _pax_path as _pax_path
from ..formats.webdataset.tarparse import _plain_name as _plain_name
from ..formats.webdataset.tarparse import iter_members as iter_members
from ..formats.webdataset.tarparse import plain_members as plain_members
from ..formats.webdataset.tarparse import scan_tar as scan_tar
from ..formats.webdataset.tarparse import split_name as split_name

__all__ = [
    "BLOCK",
    "MAX_MEMBER",
    "TarFormatError",
    "iter_members",
    "plain_members",
    "scan_tar",
    "split_name",
]
