"""Energon's dataset metadata now lives in :mod:`datareel.formats.webdataset` (``meta``, ``splits``, ``explain``) and
:mod:`datareel.formats.metafiles` (safe, bounded JSON/YAML); every old name is importable from here too."""

from __future__ import annotations

from ..formats.metafiles import MAX_DEPTH as MAX_DEPTH
from ..formats.metafiles import MAX_NODES as MAX_NODES
from ..formats.metafiles import SAFE_LOADER as SAFE_LOADER
from ..formats.metafiles import _check_bounded as _check_bounded
from ..formats.metafiles import _json_object as _json_object
from ..formats.metafiles import _Loader as _Loader
from ..formats.metafiles import _short as _short
from ..formats.metafiles import check_keys as check_keys
from ..formats.metafiles import close_names as close_names
from ..formats.metafiles import load_file as load_file
from ..formats.webdataset.explain import _a_file as _a_file
from ..formats.webdataset.explain import unprepared as unprepared
from ..formats.webdataset.meta import CONFINED as CONFINED
from ..formats.webdataset.meta import ETAGS as ETAGS
from ..formats.webdataset.meta import INFO_KEYS as INFO_KEYS
from ..formats.webdataset.meta import META as META
from ..formats.webdataset.meta import Split as Split
from ..formats.webdataset.meta import _is_file as _is_file
from ..formats.webdataset.meta import _meta_file as _meta_file
from ..formats.webdataset.meta import confined as confined
from ..formats.webdataset.meta import is_prepared as is_prepared
from ..formats.webdataset.meta import normal as normal
from ..formats.webdataset.meta import read_dataset_yaml as read_dataset_yaml
from ..formats.webdataset.meta import read_etags as read_etags
from ..formats.webdataset.meta import read_info as read_info
from ..formats.webdataset.splits import _INT_RANGE as _INT_RANGE
from ..formats.webdataset.splits import SPLIT_KEYS as SPLIT_KEYS
from ..formats.webdataset.splits import _brace_count as _brace_count
from ..formats.webdataset.splits import _expand as _expand
from ..formats.webdataset.splits import _group_count as _group_count
from ..formats.webdataset.splits import read_split as read_split

__all__ = [
    "CONFINED",
    "ETAGS",
    "INFO_KEYS",
    "MAX_DEPTH",
    "MAX_NODES",
    "META",
    "SAFE_LOADER",
    "SPLIT_KEYS",
    "Split",
    "check_keys",
    "close_names",
    "confined",
    "is_prepared",
    "load_file",
    "normal",
    "read_dataset_yaml",
    "read_etags",
    "read_info",
    "read_split",
    "unprepared",
]
