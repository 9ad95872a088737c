"""Indexing named shards in place, as Energon's ``prepare_dataset`` does: the shards a caller lists (paths
relative to the dataset directory, local or in a store), each one's ``.tar.idx`` beside it, and in
``.nv-meta/`` only the files indexing owns — ``index.sqlite``, ``index.uuid``, then ``.info.json`` and the
split config (:func:`write_info`, :func:`write_split`); ``dataset.yaml`` and anything else there is kept.

The scan is ``datareel prepare``'s (:func:`~.scan.scan_shard`, in parallel, streamed into a staging
directory): nothing is renamed (or uploaded) into place until every shard has been scanned and checked,
so a failure (a missing or empty shard, a duplicate key) leaves the old index as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import yaml

from ...errors import DatasetError, OptionError
from ...sources.index_files import write_index
from ...storage import files_for, is_remote
from ...storage.atomic import locked
from ..writes import local_temp_dir
from .index_db import IndexDb
from .meta import ETAGS, META
from .pool import scan_in_order, terminated_cleanly
from .prepare import OWNER, STAGING, _check_writable, _dead_owner, _staging_dir
from .scan import ShardScan, scan_shard

MAX_PARTS = 50
"""Energon reports at most this many part names (the prepare wizard's choices)."""


class MediaFilter(Protocol):
    """What indexing asks of a media filter (``datareel.energon``'s ``MediaFilterConfig``)."""

    def should_consider_media(self, name: str) -> bool: ...

    def extract_metadata(self, data: bytes, *, filename: str) -> Any: ...


@dataclass(frozen=True)
class Indexed:
    """What indexing found: ``counts`` shard -> samples (in the order given), ``parts`` Energon's report of
    part names (each shard's first :data:`MAX_PARTS`, added while fewer than that are known)."""

    counts: dict[str, int]
    parts: set[str]


def index_shards(
    root: str,
    shards: list[str],
    *,
    workers: int | None = None,
    on_shard: Callable[[], None] | None = None,
    media: MediaFilter | None = None,
    serialize_media: Callable[[Any], tuple[str, str]] | None = None,
    sqlite_build_path: str | os.PathLike | None = None,
) -> Indexed:
    """Index ``shards`` (relative to ``root``, a directory or a URL) and write each one's ``.tar.idx``,
    ``.nv-meta/index.sqlite`` and a new ``.nv-meta/index.uuid``.  ``on_shard`` is called once per shard
    indexed; ``media`` (with ``serialize_media(metadata) -> (type, json)``) fills Energon's media tables;
    ``sqlite_build_path`` is where the sqlite index is built before it is moved (or uploaded) into place."""
    if not shards:
        raise OptionError(f"no shards to index under {root}: pass the shard paths (relative to {root})")
    if len(set(shards)) != len(shards):
        twice = sorted({s for s in shards if shards.count(s) > 1})
        raise OptionError(f"shards {twice[:5]} are listed more than once; list each shard of {root} once")
    if media is not None and serialize_media is None:
        raise OptionError("a media filter needs serialize_media (metadata -> (type, json)) to store what it finds")
    if is_remote(root):
        return _index_in_store(root.rstrip("/"), shards, workers, on_shard, media, serialize_media, sqlite_build_path)
    local = Path(root)
    if not local.is_dir():
        raise DatasetError(f"{root} is not a directory; pass the directory the shard paths are relative to")
    with locked(local, "prepare_dataset"):
        return _index_local(local, shards, workers, on_shard, media, serialize_media, sqlite_build_path)


def _index_local(root, shards, workers, on_shard, media, serialize_media, sqlite_build_path) -> Indexed:
    for shard in shards:
        if not (root / shard).is_file():
            raise DatasetError(f"shard {root / shard} does not exist; pass paths of .tar files relative to {root}")
    _check_writable(root, shards)
    for stale in root.glob(f"{META}*{STAGING}*"):  # left by a killed run
        if _dead_owner(stale):
            shutil.rmtree(stale, ignore_errors=True)
    staged = _staging_dir(root)
    (staged / "idx").mkdir()
    built = Path(sqlite_build_path) if sqlite_build_path is not None else staged / "index.sqlite"
    built.unlink(missing_ok=True)
    try:
        with terminated_cleanly():
            scans = scan_in_order(
                partial(scan_shard, root), shards, _workers(workers, root, shards), False, processes=True
            )
            found = _collect(
                scans, built, str(root), staged / "idx", on_shard, media, serialize_media, _local_reader(root)
            )
        meta = root / META
        meta.mkdir(exist_ok=True)
        for i, shard in enumerate(found.counts):
            os.replace(staged / "idx" / str(i), root / f"{shard}.idx")
        shutil.move(built, meta / "index.sqlite")
        _write_local(meta / "index.uuid", str(uuid.uuid4()))
    finally:
        shutil.rmtree(staged, ignore_errors=True)
        if sqlite_build_path is not None:
            Path(sqlite_build_path).unlink(missing_ok=True)
    return found


def _index_in_store(url, shards, workers, on_shard, media, serialize_media, sqlite_build_path) -> Indexed:
    from .prepare_store import STAGED, _scan_one

    files = files_for(url)
    with local_temp_dir("datareel-prepare-", STAGED) as staged:
        built = Path(sqlite_build_path) if sqlite_build_path is not None else staged / "index.sqlite"
        built.unlink(missing_ok=True)
        etags: dict[str, str] = {}

        def scans() -> Iterator[ShardScan]:
            for scan, etag in scan_in_order(partial(_scan_one, url), shards, workers or 4, False, processes=False):
                if etag is not None:
                    etags[scan.shard] = etag
                yield scan

        def read(shard: str, start: int, stop: int) -> bytes:
            return files.read_range(f"{url}/{shard}", start, stop)

        try:
            found = _collect(scans(), built, url, staged, on_shard, media, serialize_media, read)
            for i, shard in enumerate(found.counts):
                files.write(f"{url}/{shard}.idx", (staged / str(i)).read_bytes())
            files.write(f"{url}/{META}/index.sqlite", built.read_bytes())
        finally:
            if sqlite_build_path is not None:
                built.unlink(missing_ok=True)
    files.write(f"{url}/{META}/{ETAGS}", json.dumps({"shards": etags}, indent=2).encode())  # readers check them
    files.write(f"{url}/{META}/index.uuid", str(uuid.uuid4()).encode())
    return found


def _collect(scans, built, where, idx_dir, on_shard, media, serialize_media, read) -> Indexed:
    """Stream the scans into the sqlite index at ``built`` and the staged ``.idx`` files (``idx_dir/<i>``)."""
    parts: set[str] = set()
    with contextlib.closing(scans) if hasattr(scans, "close") else contextlib.nullcontext():
        with IndexDb(built, where, media=media is not None) as db:
            for scan in scans:
                if not scan.keys:
                    raise DatasetError(
                        f"shard {where}/{scan.shard} holds no samples (no member named <key>.<part>); remove it "
                        f"from the shard list, or fill it"
                    )
                write_index(idx_dir / str(len(db.counts)), scan.offsets)
                db.add(scan.shard, scan.offsets.tolist(), scan.keys, scan.parts)
                if len(parts) < MAX_PARTS:
                    parts.update(list(dict.fromkeys(p for _, p, _, _ in scan.parts))[:MAX_PARTS])
                if media is not None:
                    db.add_media(_media_rows(scan, media, serialize_media, read))
                if on_shard is not None:
                    on_shard()
            if media is not None:
                strategy = getattr(media, "strategy", None)
                patterns = getattr(media, "patterns", None) or []
                db.add_media_filter(str(getattr(strategy, "value", strategy)), ",".join(patterns))
            db.finish()
            counts = dict(db.counts)
    return Indexed(counts, parts)


def _media_rows(scan: ShardScan, media: MediaFilter, serialize, read) -> list[tuple[str, str, str]]:
    rows = []
    for sample, part, offset, size in scan.parts:
        entry = f"{scan.keys[sample]}.{part}"
        if not media.should_consider_media(entry):
            continue
        found = media.extract_metadata(read(scan.shard, offset, offset + size), filename=entry)
        if found is not None:
            kind, text = serialize(found)
            rows.append((entry, str(getattr(kind, "value", kind)), text))
    return rows


def _local_reader(root: Path) -> Callable[[str, int, int], bytes]:
    def read(shard: str, start: int, stop: int) -> bytes:
        with open(root / shard, "rb") as f:
            f.seek(start)
            return f.read(stop - start)

    return read


SMALL = 32 << 20
"""Shards totalling fewer bytes than this are scanned in this process: starting workers costs more."""


def _workers(workers: int | None, root: Path, shards: list[str]) -> int:
    """At most ``workers`` scanning processes, no more than the CPUs (one is enough for a small dataset)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise OptionError(f"workers={workers!r} must be a positive number of processes")
    if sum((root / s).stat().st_size for s in shards) < SMALL:
        return 1
    return max(1, min(workers or os.cpu_count() or 1, os.cpu_count() or 1))


def _write_local(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place (no reader sees half of it)."""
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_meta_file(root: str, name: str, text: str) -> None:
    """Write ``.nv-meta/<name>`` of the dataset at ``root`` (a directory or a URL) whole."""
    if is_remote(root):
        files_for(root).write(f"{root.rstrip('/')}/{META}/{name}", text.encode())
    else:
        (Path(root) / META).mkdir(exist_ok=True)
        _write_local(Path(root) / META / name, text)


def meta_file_exists(root: str, name: str) -> bool:
    if is_remote(root):
        return files_for(root).exists(f"{root.rstrip('/')}/{META}/{name}")
    return (Path(root) / META / name).is_file()


def write_info(root: str, counts: dict[str, int]) -> None:
    """``.info.json`` (and ``.info.yaml`` where one was there already, kept in step, as Energon does)."""
    from ... import __version__

    info = {"energon_version": f"datareel {__version__}", "shard_counts": counts}
    if meta_file_exists(root, ".info.yaml"):
        write_meta_file(root, ".info.yaml", yaml.safe_dump(info, sort_keys=False))
    write_meta_file(root, ".info.json", json.dumps(info, indent=2))


def write_split(root: str, split_config: str, splits: dict[str, list[str]]) -> None:
    """The split config (``split_parts`` by split, ``exclude`` empty), YAML or JSON by its file name."""
    config = {"split_parts": splits, "exclude": []}
    if split_config.endswith(".yaml"):
        text = yaml.safe_dump(config, sort_keys=False)
    elif split_config.endswith(".json"):
        text = json.dumps(config, indent=2)
    else:
        raise OptionError(f"split_config={split_config!r} must name a .yaml or .json file in {META}/")
    if "/" in split_config or split_config in ("", ".", ".."):
        raise OptionError(f"split_config={split_config!r} must be a file name inside {META}/, not a path")
    write_meta_file(root, split_config, text)


__all__ = ["MAX_PARTS", "OWNER", "Indexed", "MediaFilter", "index_shards", "write_info", "write_split"]
