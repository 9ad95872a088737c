"""``datareel prepare s3://...``: index a WebDataset in a bucket and write its metadata back.

Each shard is downloaded once to a temporary file (one at a time per worker, deleted after its scan)
and indexed by the same code as a local shard. Nothing is written until every shard has been scanned
and checked; then the ``.tar.idx`` objects, the ``.nv-meta`` files and, last of all,
``.nv-meta/.info.json`` are uploaded: a reader takes a dataset as prepared by that object, so it
never sees half a dataset. ``.nv-meta/etags.json`` records each shard's ETag as indexed; readers
compare it on a shard's first use, so a shard replaced by another of the same size is refused too. A
bucket offers no lock, so two concurrent runs are not refused here (their results are identical when
the shards are).
"""

from __future__ import annotations

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from ..errors import DatasetError, OptionError
from ..sources.energon_meta import ETAGS, META
from ..sources.index_files import DTYPE
from ..storage.remote import remote_files
from .prepare import (
    PrepareReport,
    ShardScan,
    check_scans,
    dataset_yaml,
    metadata_texts,
    parse_split_ratio,
    scan_shard,
    split_shards,
    write_sqlite,
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
    files = remote_files()
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
    scans, etags = _scan_remote(url, shards, workers, progress)
    report = check_scans(url, scans, config, sample_type, splits)
    if files.exists(f"{url}/{META}/.info.json"):  # --overwrite: readers see no dataset until .info.json is back
        files.delete(f"{url}/{META}/.info.json")
    for scan in scans:
        files.write(f"{url}/{scan.shard}.idx", scan.offsets.astype(DTYPE).tobytes())
    with tempfile.TemporaryDirectory(prefix="datareel-prepare-") as tmp:
        write_sqlite(Path(tmp) / "index.sqlite", scans)
        files.write(f"{url}/{META}/index.sqlite", (Path(tmp) / "index.sqlite").read_bytes())
    files.write(f"{url}/{META}/{ETAGS}", json.dumps({"shards": etags}, indent=2).encode())  # readers check them
    for name, text in metadata_texts(scans, splits, config).items():  # .info.json comes last
        files.write(f"{url}/{META}/{name}", text.encode())
    return report


def _scan_remote(
    url: str, shards: list[str], workers: int | None, progress: bool
) -> tuple[list[ShardScan], dict[str, str]]:
    """Download and scan each shard (a few at a time: the work is mostly waiting on the network).
    -> the scans, in shard order, and each shard's ETag as indexed (where the store gives one)."""
    workers = max(1, min(workers or 4, len(shards)))

    def scan(shard: str) -> tuple[ShardScan, str | None]:
        files = remote_files()
        with tempfile.TemporaryDirectory(prefix="datareel-shard-") as tmp:
            local = os.path.join(tmp, "shard.tar")
            before = files.info(f"{url}/{shard}")
            files.download(f"{url}/{shard}", local)
            after = files.info(f"{url}/{shard}")
            if after != before or os.path.getsize(local) != after.size:
                raise DatasetError(
                    f"shard {url}/{shard} changed while it was being indexed (size/ETag {before.size}/{before.etag} "
                    f"then {after.size}/{after.etag}); run `datareel prepare` again once the upload is done"
                )
            try:
                found = scan_shard(Path(tmp), "shard.tar")
            except DatasetError as exc:  # name the shard by its URL, not the temporary copy
                raise DatasetError(str(exc).replace(local, f"{url}/{shard}")) from None
        return ShardScan(shard, found.offsets, found.keys, found.parts), after.etag

    with tqdm(total=len(shards), unit="shard", desc="indexing", disable=not progress) as bar:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            out, etags = [], {}
            for result, etag in pool.map(scan, shards):  # in shard order; re-raises a shard's error
                out.append(result)
                if etag is not None:
                    etags[result.shard] = etag
                bar.update()
    return out, etags
