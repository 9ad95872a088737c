"""``datareel prepare``: index plain WebDataset shards (or a JSONL file) into Energon's format.

For a directory of ``*.tar`` shards it writes, per shard, ``X.tar.idx`` and, in
``.nv-meta/``, ``.info.json``, ``split.yaml``, ``dataset.yaml``,
``index.sqlite`` and ``index.uuid`` — what Energon's own loaders and tools read.
Shards are scanned in parallel with a progress bar and streamed to disk as they
come, into a staging directory beside the shards: each shard's index file, and
its keys and parts into ``index.sqlite`` (whose unique key index is the
duplicate-key check), so memory holds a few shards' scans whatever the dataset
size.  Nothing becomes visible until every shard has been scanned and checked
(duplicate keys, sample type, field map): the files are then renamed into place,
so a failure leaves no half-written metadata (a killed run leaves only its
staging directory, which a later run on the same host removes once the killed
process is gone; a kill during the final renames, a few milliseconds, can leave
some new ``.idx`` files beside the old metadata, as before streaming).  ``--overwrite`` swaps the new
``.nv-meta`` in atomically (:mod:`.atomic`), keeping a length index, and two
runs on one directory do not interleave: the second is refused at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import uuid
from functools import partial
from pathlib import Path

from ...errors import DatasetError, OptionError
from ...sources.fieldmap import CRUDE
from ...sources.index_files import write_index
from ...storage.atomic import leftover, locked, swap_in
from ..writes import probe, writing
from .index_db import IndexDb
from .meta import META
from .pool import scan_in_order, terminated_cleanly
from .scan import (
    PrepareReport,
    check_report,
    dataset_yaml,
    find_shards,
    metadata_texts,
    parse_split_ratio,
    scan_shard,
    split_shards,
)


def prepare_webdataset(
    root: str | os.PathLike,
    *,
    split_ratio: str = "1,0,0",
    sample_type: str = CRUDE,
    field_map: dict[str, str] | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> PrepareReport:
    """Index every ``*.tar`` under ``root`` and write Energon-compatible metadata."""
    root = Path(root)
    if not root.is_dir():
        raise OptionError(f"{root} is not a directory of .tar shards")
    with locked(root, "datareel prepare"):
        return _prepare_locked(root, split_ratio, sample_type, field_map, workers, overwrite, progress)


def _prepare_locked(
    root: Path,
    split_ratio: str,
    sample_type: str,
    field_map: dict[str, str] | None,
    workers: int | None,
    overwrite: bool,
    progress: bool,
) -> PrepareReport:
    old = leftover(root / META)
    if old is not None and not overwrite:
        raise DatasetError(
            f"{old} holds the metadata an interrupted `datareel prepare --overwrite` was replacing, and "
            f"{root / META} is missing: rename it back to {META}, or pass --overwrite to prepare {root} again"
        )
    if (root / META).exists() and not overwrite:
        raise OptionError(f"{root / META} already exists; pass --overwrite to prepare {root} again")
    shards = find_shards(root)
    if not shards:
        raise DatasetError(f"no *.tar shards under {root}")
    config = dataset_yaml(sample_type, field_map)
    splits = split_shards(shards, parse_split_ratio(split_ratio))

    _check_writable(root, shards)
    fix = f"`datareel prepare` writes {META}/ and one .idx per shard beside the shards: make {root} writable "
    fix += "(and give it room), then run it again"
    for stale in root.glob(f"{META}*{STAGING}*"):  # left by a killed run
        if _dead_owner(stale):
            shutil.rmtree(stale, ignore_errors=True)
    staged = _staging_dir(root)
    (staged / "idx").mkdir()  # the shards' index files until every shard is checked
    try:
        with terminated_cleanly(), IndexDb(staged / "index.sqlite", str(root)) as db:
            scans = scan_in_order(partial(scan_shard, root), shards, workers, progress, processes=True)
            with contextlib.closing(scans):  # on an error here too, the pool stops now (not when collected)
                for scan in scans:
                    with writing(staged, fix):
                        write_index(staged / "idx" / str(len(db.counts)), scan.offsets)
                    db.add(scan.shard, scan.offsets.tolist(), scan.keys, scan.parts)
            report = check_report(db, config, sample_type, splits)
            db.finish()
        with writing(root, fix):  # every write from here on (the shards were read)
            _put_in_place(root, staged, db.counts, metadata_texts(db.counts, splits, config), overwrite)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return report


def _put_in_place(root: Path, staged: Path, counts: dict[str, int], texts: dict[str, str], overwrite: bool) -> None:
    """The checked metadata into ``staged``, then each shard's index beside it and ``staged`` in as ``.nv-meta``."""
    for name, text in texts.items():
        (staged / name).write_text(text)
    for i, shard in enumerate(counts):
        os.replace(staged / "idx" / str(i), root / f"{shard}.idx")
    (staged / "idx").rmdir()
    (staged / OWNER).unlink()
    old = root / META
    previous = old if old.exists() else leftover(old)
    if previous is not None:
        if not overwrite:
            raise DatasetError(f"{old} appeared while preparing; pass --overwrite to replace it")
        for keep in ("lengths.npy", "lengths.npy.json"):  # a length index survives; if stale, it is refused
            if (previous / keep).exists():
                shutil.copy2(previous / keep, staged / keep)
    swap_in(staged, old)
    if previous is not None and previous != old:
        shutil.rmtree(previous)


STAGING = ".tmp-"
"""In the name of a staging directory (``.nv-meta<random>.tmp-<tag>``): removed by a later run once the
process that made it (named in its ``owner`` file) is gone."""
OWNER = "owner"


def _dead_owner(staged: Path) -> bool:
    """Whether the run that made staging directory ``staged`` is gone: its ``owner`` file names this host
    and a process that no longer exists. (Directory locks are per node on some cluster filesystems, so
    another node's run is never assumed dead.)"""
    try:
        host, pid = (staged / OWNER).read_text().split()
    except (OSError, ValueError):
        return False  # no owner recorded (or not ours to judge): left for a person to remove
    if host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return False


def _check_writable(root: Path, shards: list[str]) -> None:
    """Every shard's directory takes its ``.idx`` by a rename from the staging directory: refuse, before the
    long scan, a directory that does not take a new file (read-only, full) or is on another filesystem than
    ``root`` (the rename would fail half way)."""
    device = os.stat(root).st_dev
    for folder in sorted({(root / shard).parent for shard in shards}):
        if os.stat(folder).st_dev != device:
            raise DatasetError(
                f"shard directory {folder} is on another filesystem than {root}; `datareel prepare` writes each "
                f"shard's index beside it by renaming it from {root}: prepare that directory on its own, or "
                f"move it under {root}"
            )
        probe(  # not os.access: root passes it, and a read-only mount or a full disk still refuses
            folder,
            f"`datareel prepare` writes one .idx beside each shard (and {META}/ in {root}): make {folder} "
            f"writable, or prepare a writable copy of the dataset",
        )


def _staging_dir(root: Path) -> Path:
    """A new ``.nv-meta*`` directory beside the shards to write the metadata into (renamed when complete)."""
    try:
        staged = Path(tempfile.mkdtemp(prefix=META, suffix=f"{STAGING}{uuid.uuid4().hex[:8]}", dir=root))
    except OSError as exc:
        raise DatasetError(
            f"cannot write the dataset's metadata into {root}: {exc.strerror or exc}; `datareel prepare` writes "
            f"{META}/ and one .idx per shard beside the shards, so it needs write access to {root}"
        ) from None
    umask = os.umask(0)
    os.umask(umask)
    staged.chmod(0o777 & ~umask)  # mkdtemp makes it private; metadata is as readable as the shards
    (staged / OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
    return staged
