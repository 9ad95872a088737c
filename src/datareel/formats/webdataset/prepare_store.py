"""``datareel prepare s3://...``: index a WebDataset in a store (a bucket, any registered URL scheme whose
store lists, downloads and writes) and write its metadata back.

Each shard is downloaded once to a temporary file (one at a time per worker, deleted after its scan)
and indexed by the same code as a local shard; its index and keys are streamed to a local staging
directory as they come (memory stays bounded, as locally). Nothing is written to the bucket until every
shard has been scanned and checked; then the ``.tar.idx`` objects, the ``.nv-meta`` files and, last of all,
``.nv-meta/.info.json`` are uploaded: a reader takes a dataset as prepared by that object, so it
never sees half a dataset. ``.nv-meta/etags.json`` records each shard's ETag as indexed; readers
compare it on a shard's first use, so a shard replaced by another of the same size is refused too. A
bucket offers no lock, so two concurrent runs are not refused here (their results are identical when
the shards are).
"""

from __future__ import annotations

import json
import os
from functools import partial

from ...errors import DatasetError, OptionError
from ...sources.index_files import write_index
from ...storage import files_for
from ..writes import local_temp_dir, writing
from .index_db import IndexDb
from .meta import ETAGS, META
from .pool import scan_in_order
from .scan import (
    PrepareReport,
    ShardScan,
    check_report,
    dataset_yaml,
    metadata_texts,
    parse_split_ratio,
    scan_shard,
    split_shards,
)


def prepare_remote_webdataset(
    url: str,
    *,
    split_ratio: str = "1,0,0",
    sample_type: str = "CrudeWebdataset",
    field_map: dict[str, str] | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> PrepareReport:
    """Index every ``*.tar`` under the URL ``url`` and upload Energon-compatible metadata beside them."""
    files = files_for(url)
    url = url.rstrip("/")
    if files.exists(f"{url}/{META}/.info.json") and not overwrite:
        raise OptionError(f"{url}/{META} already exists; pass --overwrite to prepare {url} again")
    shards = [
        name[len(url) + 1 :]
        for name in files.list(url)
        if name.endswith(".tar") and f"/{META}/" not in name[len(url) :]
    ]
    if not shards:
        raise DatasetError(f"no *.tar shards under {url}")
    config = dataset_yaml(sample_type, field_map)
    splits = split_shards(shards, parse_split_ratio(split_ratio))
    etags: dict[str, str] = {}
    with local_temp_dir("datareel-prepare-", STAGED) as staged:  # uploaded once every shard is checked
        with IndexDb(staged / "index.sqlite", url) as db:
            for scan, etag in scan_in_order(partial(_scan_one, url), shards, workers or 4, progress, processes=False):
                write_index(staged / f"{len(db.counts)}.idx", scan.offsets)
                db.add(scan.shard, scan.offsets.tolist(), scan.keys, scan.parts)
                if etag is not None:
                    etags[scan.shard] = etag
            report = check_report(db, config, sample_type, splits)
            db.finish()
        if files.exists(f"{url}/{META}/.info.json"):  # --overwrite: readers see no dataset until .info.json is back
            files.delete(f"{url}/{META}/.info.json")
        for i, shard in enumerate(db.counts):
            files.write(f"{url}/{shard}.idx", (staged / f"{i}.idx").read_bytes())
        files.write(f"{url}/{META}/index.sqlite", (staged / "index.sqlite").read_bytes())
    files.write(f"{url}/{META}/{ETAGS}", json.dumps({"shards": etags}, indent=2).encode())  # readers check them
    for name, text in metadata_texts(db.counts, splits, config).items():  # .info.json comes last
        files.write(f"{url}/{META}/{name}", text.encode())
    return report


STAGED = "`datareel prepare` on a URL builds each shard's index and the sqlite index locally before uploading them"
DOWNLOADED = "`datareel prepare` on a URL downloads each shard to a local temporary file to index it (a few at a time)"


def _scan_one(url: str, shard: str) -> tuple[ShardScan, str | None]:
    """Download one shard to a temporary file and scan it (the work is mostly waiting on the network).
    -> its scan and its ETag as indexed (where the store gives one)."""
    files = files_for(url)
    with local_temp_dir("datareel-shard-", DOWNLOADED) as tmp:
        local = os.path.join(tmp, "shard.tar")
        before = files.info(f"{url}/{shard}")
        with writing(tmp, DOWNLOADED + ": set TMPDIR to a directory with room for it (e.g. TMPDIR=/scratch/tmp)"):
            files.download(f"{url}/{shard}", local)
        after = files.info(f"{url}/{shard}")
        if after != before or os.path.getsize(local) != after.size:
            raise DatasetError(
                f"shard {url}/{shard} changed while it was being indexed (size/ETag {before.size}/{before.etag} "
                f"then {after.size}/{after.etag}); run `datareel prepare` again once the upload is done"
            )
        try:
            found = scan_shard(tmp, "shard.tar")
        except DatasetError as exc:  # name the shard by its URL, not the temporary copy
            raise DatasetError(str(exc).replace(local, f"{url}/{shard}")) from None
    return ShardScan(shard, found.offsets, found.keys, found.parts), after.etag
