"""``datareel prepare``'s writers now live with their formats: :mod:`datareel.formats.webdataset.prepare` (with
``scan`` and ``pool``) and :mod:`datareel.formats.jsonl.prepare`; every old name is importable here too."""

from __future__ import annotations

import tempfile as tempfile  # tests patch tempfile.mkdtemp through this module, as before

from ..formats.jsonl.prepare import _CHUNK as _CHUNK
from ..formats.jsonl.prepare import _check_jsonl_sample as _check_jsonl_sample
from ..formats.jsonl.prepare import _write_offsets as _write_offsets
from ..formats.jsonl.prepare import prepare_jsonl as prepare_jsonl
from ..formats.webdataset.pool import _pool_worker_started as _pool_worker_started
from ..formats.webdataset.pool import _stop_pool as _stop_pool
from ..formats.webdataset.pool import scan_in_order as scan_in_order
from ..formats.webdataset.pool import terminated_cleanly as terminated_cleanly
from ..formats.webdataset.prepare import OWNER as OWNER
from ..formats.webdataset.prepare import STAGING as STAGING
from ..formats.webdataset.prepare import _check_writable as _check_writable
from ..formats.webdataset.prepare import _dead_owner as _dead_owner
from ..formats.webdataset.prepare import _prepare_locked as _prepare_locked
from ..formats.webdataset.prepare import _staging_dir as _staging_dir
from ..formats.webdataset.prepare import prepare_webdataset as prepare_webdataset
from ..formats.webdataset.scan import PrepareReport as PrepareReport
from ..formats.webdataset.scan import ShardScan as ShardScan
from ..formats.webdataset.scan import _is_utf8 as _is_utf8
from ..formats.webdataset.scan import check_report as check_report
from ..formats.webdataset.scan import dataset_yaml as dataset_yaml
from ..formats.webdataset.scan import find_shards as find_shards
from ..formats.webdataset.scan import metadata_texts as metadata_texts
from ..formats.webdataset.scan import parse_split_ratio as parse_split_ratio
from ..formats.webdataset.scan import scan_shard as scan_shard
from ..formats.webdataset.scan import split_shards as split_shards

__all__ = [
    "OWNER",
    "PrepareReport",
    "STAGING",
    "ShardScan",
    "check_report",
    "dataset_yaml",
    "find_shards",
    "metadata_texts",
    "parse_split_ratio",
    "prepare_jsonl",
    "prepare_webdataset",
    "scan_in_order",
    "scan_shard",
    "split_shards",
    "terminated_cleanly",
]
