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

import codecs
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np
import yaml
from tqdm import tqdm

from ..errors import DatasetError, OptionError
from ..lifetime import die_with_parent
from ..sources.energon_meta import META
from ..sources.fieldmap import CRUDE, SAMPLE_TYPES, typed_fields
from ..sources.index_files import write_index
from ..sources.jsonl import unparsable
from ..sources.tarparse import BLOCK, scan_tar
from .atomic import leftover, locked, swap_in
from .index_db import IndexDb

T = TypeVar("T")


@dataclass(frozen=True)
class ShardScan:
    """What indexing one shard found. offsets: uint64[count + 1]."""

    shard: str
    offsets: np.ndarray
    keys: list[str]
    parts: list[tuple[int, str, int, int]]  # (sample index, part, data offset, size)


@dataclass(frozen=True)
class PrepareReport:
    shards: int
    samples: int
    parts: list[str]
    splits: dict[str, int]


def scan_shard(root: Path, shard: str) -> ShardScan:
    """Index one tar: each sample's first header offset, its key and its parts."""
    path = root / shard
    offsets: list[int] = []
    keys: list[str] = []
    parts: list[tuple[int, str, int, int]] = []
    seen: dict[str, int] = {}
    with open(path, "rb") as f:
        for header, key, part, data, size in scan_tar(f, f"shard {path}"):
            if not _is_utf8(key) or not _is_utf8(part):
                raw = f"{key}.{part}".encode("utf-8", "surrogateescape")
                raise DatasetError(
                    f"shard {path}: the member name {raw!r} (header at byte {header}) is not valid UTF-8, so its "
                    f"key cannot be stored or looked up; rename the member (keys and parts are UTF-8 text)"
                )
            if not keys or keys[-1] != key:
                if key in seen:
                    raise DatasetError(
                        f"shard {path}: key {key!r} appears again at byte {header} after other samples "
                        f"(first as sample {seen[key]}); a sample's files must be consecutive and keys unique"
                    )
                seen[key] = len(keys)
                offsets.append(header)
                keys.append(key)
                sample_parts: set[str] = set()
            if part in sample_parts:
                raise DatasetError(
                    f"shard {path}: sample {key!r} holds part {part!r} twice (again at byte {header}); a reader "
                    f"would keep one copy silently: remove the duplicate member from the shard"
                )
            sample_parts.add(part)
            parts.append((len(keys) - 1, part, data, size))
        # scan_tar stops after reading the first end block: the last sample's range runs to it, so members
        # that belong to no sample (a README, a directory entry, a symlink) after it stay inside (as Energon's)
        end = f.tell() - BLOCK
    offsets.append(end)
    return ShardScan(shard, np.array(offsets if keys else [0], dtype=np.uint64), keys, parts)


def _is_utf8(text: str) -> bool:
    """Whether a name decoded with ``surrogateescape`` was valid UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def find_shards(root: Path) -> list[str]:
    """Every ``*.tar`` file under ``root`` (a directory so named is not a shard), relative, sorted."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.tar")
        if META not in p.relative_to(root).parts and p.is_file()
    )


def parse_split_ratio(text: str) -> dict[str, float]:
    """``"8,1,1"`` or ``"train:8,val:1,test:1"`` -> split name -> share."""
    names = ("train", "val", "test")
    items = [t.strip() for t in text.split(",") if t.strip()]
    out: dict[str, float] = {}
    for i, item in enumerate(items):
        name, colon, value = item.rpartition(":")
        if not colon:
            if i >= len(names):
                raise OptionError(f"--split-ratio {text!r}: give names (name:share) for more than 3 splits")
            name, value = names[i], item
        try:
            out[name] = float(value)
        except ValueError:
            raise OptionError(f"--split-ratio {text!r}: {value!r} is not a number") from None
    if not out or any(v < 0 for v in out.values()) or sum(out.values()) <= 0:
        raise OptionError(f"--split-ratio {text!r} must hold non-negative shares with a positive sum, e.g. 8,1,1")
    return out


def split_shards(shards: list[str], ratio: dict[str, float]) -> dict[str, list[str]]:
    """Cut the shard list (not samples) by cumulative share, as Energon does."""
    total = sum(ratio.values())
    out, start, cumulative = {}, 0, 0.0
    for name, share in ratio.items():
        cumulative += share / total
        stop = len(shards) if cumulative >= 1 - 1e-12 else int(len(shards) * cumulative)
        out[name] = shards[start:stop]
        start = stop
    return out


def dataset_yaml(sample_type: str, field_map: dict[str, str] | None) -> dict[str, Any]:
    if sample_type == CRUDE:
        if field_map:
            raise OptionError(f"--field-map is for typed samples; {CRUDE} keeps every part")
        return {"__module__": "megatron.energon", "__class__": CRUDE}
    config = {"sample_type": {"__module__": "megatron.energon", "__class__": sample_type}, "field_map": field_map}
    typed_fields(config, "--sample-type/--field-map")  # validates the type and the map
    return config


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
                    write_index(staged / "idx" / str(len(db.counts)), scan.offsets)
                    db.add(scan.shard, scan.offsets.tolist(), scan.keys, scan.parts)
            report = check_report(db, config, sample_type, splits)
            db.finish()
        for name, text in metadata_texts(db.counts, splits, config).items():
            (staged / name).write_text(text)
        for i, shard in enumerate(db.counts):
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
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return report


def check_report(db: IndexDb, config: dict[str, Any], sample_type: str, splits: dict[str, list[str]]) -> PrepareReport:
    """Refuse a field map naming parts no sample has (duplicate keys were refused as they came); the report."""
    found_parts = sorted(db.parts)
    if sample_type != CRUDE:
        fields = typed_fields(config, "--field-map")
        missing = sorted(p for p in fields.parts if p not in found_parts)
        required = SAMPLE_TYPES[sample_type][0]
        if any(all(a.part in missing for a in alts) for f, alts in fields.fields if f in required):
            raise OptionError(f"--field-map names parts {missing} that no sample has; parts found: {found_parts}")
    return PrepareReport(
        shards=len(db.counts),
        samples=sum(db.counts.values()),
        parts=found_parts,
        splits={name: sum(db.counts[s] for s in lst) for name, lst in splits.items()},
    )


def metadata_texts(counts: dict[str, int], splits: dict[str, list[str]], config: dict[str, Any]) -> dict[str, str]:
    """The text files of ``.nv-meta`` (``.info.json`` last: readers take a dataset as prepared by it).
    ``counts``: shard -> samples, in shard order."""
    from .. import __version__

    info = {"energon_version": f"datareel {__version__}", "shard_counts": counts}
    return {
        "split.yaml": yaml.safe_dump({"split_parts": splits, "exclude": []}, sort_keys=False),
        "dataset.yaml": yaml.safe_dump(config, sort_keys=False),
        "index.uuid": str(uuid.uuid4()),
        ".info.json": json.dumps(info, indent=2),
    }


def scan_in_order(
    scan: Callable[[str], T], shards: list[str], workers: int | None, progress: bool, *, processes: bool
) -> Iterator[T]:
    """``scan(shard)`` for every shard, in shard order, ``workers`` at a time (processes or threads), with a
    progress bar. At most ``2 * workers`` scans are under way or waiting to be taken, so memory holds a
    few shards' results whatever the dataset size. A shard's error is raised in order; the rest are
    cancelled.

    Worker processes end with this process however it ends, and at once when the scan stops early (an
    error, Ctrl-C, SIGTERM under :func:`terminated_cleanly`, the consumer closing the generator): they are
    terminated, not waited for (a scan of a large shard takes minutes)."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(shards)))
    with tqdm(total=len(shards), unit="shard", desc="indexing", disable=not progress) as bar:
        if workers == 1:
            for shard in shards:
                yield scan(shard)
                bar.update()
            return
        pool: Executor
        if processes:
            main = threading.current_thread() is threading.main_thread()  # the death signal follows this thread
            pool = ProcessPoolExecutor(workers, initializer=_pool_worker_started, initargs=(os.getpid(), main))
        else:
            pool = ThreadPoolExecutor(workers)
        pending: deque[Future[T]] = deque()
        todo = iter(shards)
        finished = False
        try:
            for shard in itertools.islice(todo, 2 * workers):
                pending.append(pool.submit(scan, shard))
            while pending:
                result = pending.popleft().result()
                for shard in itertools.islice(todo, 1):
                    pending.append(pool.submit(scan, shard))
                yield result
                bar.update()
            finished = True
        finally:
            if not finished:
                _stop_pool(pool)
            pool.shutdown(wait=True, cancel_futures=True)


def _pool_worker_started(parent: int, pdeathsig: bool) -> None:
    """A scanning process: Ctrl-C (sent to the whole process group) and SIGTERM are the parent's to handle
    (it terminates the pool: no traceback from every worker, no handler inherited by fork raising here),
    and the process ends with its parent however that ends (:func:`datareel.lifetime.die_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent, pdeathsig=pdeathsig)


def _stop_pool(pool: Executor) -> None:
    """Cancel what has not started and terminate the processes of a process pool (threads cannot be
    stopped: a running scan of a thread pool finishes)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # ProcessPoolExecutor's
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
    if manager is not None:
        manager.join(timeout=10)  # it sees its processes gone and ends


@contextlib.contextmanager
def terminated_cleanly() -> Iterator[None]:
    """Inside: SIGTERM, where it would end the process on the spot, raises ``SystemExit(143)`` instead, so
    the cleanup of an exception runs (the scanning processes terminated, the staging directory removed)
    before the process exits with the status a shell shows for SIGTERM. Main thread only, and only where
    SIGTERM has its default action (a handler the caller installed stays); a second SIGTERM ends the
    process at once."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
    long scan, a directory that is read-only or on another filesystem than ``root`` (the rename would fail
    half way)."""
    device = os.stat(root).st_dev
    for folder in sorted({(root / shard).parent for shard in shards}):
        if os.stat(folder).st_dev != device:
            raise DatasetError(
                f"shard directory {folder} is on another filesystem than {root}; `datareel prepare` writes each "
                f"shard's index beside it by renaming it from {root}: prepare that directory on its own, or "
                f"move it under {root}"
            )
        if not os.access(folder, os.W_OK):
            raise DatasetError(
                f"cannot write the shard indices into {folder} (no write permission); `datareel prepare` "
                f"writes one .idx beside each shard: make it writable, or prepare a writable copy"
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


def prepare_jsonl(path: str | os.PathLike) -> int:
    """Write ``path.idx`` for a JSONL file; returns the sample count.

    Blank lines belong to the previous sample's range (leading ones to the
    first); every other line must be one JSON object (``{...}``).  Each sample's
    whole range is parsed here exactly as the reader will parse it, so a file
    that prepares is a file that reads: nothing fails later in training.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"JSONL file {path} does not exist")
    count, pos = 0, 0
    starts = array("Q")  # offsets not yet written to the index file (flushed every CHUNK: memory stays flat)
    sample = bytearray()  # the current sample's range: its line and the blank lines after it
    first = 1  # the current sample's line number
    tmp = Path(f"{path}.idx.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(path, "rb") as f, open(tmp, "wb") as out:
            for number, line in enumerate(f, start=1):
                text = line.strip()
                if text:
                    if count:
                        _check_jsonl_sample(path, first, bytes(sample))
                        sample.clear()
                    if not (text.startswith(b"{") and text.endswith(b"}")):
                        try:
                            line.decode("utf-8")
                        except UnicodeDecodeError as exc:  # say so, as the reader does, not "not a JSON object"
                            raise DatasetError(
                                f"{path} line {number}: not valid UTF-8 ({exc.reason} at byte {exc.start} of the "
                                f"line); fix the line, then run `datareel prepare` again"
                            ) from None
                        bom = " (it starts with a UTF-8 byte-order mark: save the file without one)"
                        raise DatasetError(
                            f"{path} line {number}: not a JSON object (must start with '{{' and end with '}}')"
                            + (bom if line.startswith(codecs.BOM_UTF8) else "")
                        )
                    starts.append(pos if count else 0)  # leading blank lines belong to the first sample
                    count += 1
                    first = number
                    if len(starts) == _CHUNK:
                        _write_offsets(out, starts)
                sample += line
                pos += len(line)
            if not count:
                raise DatasetError(f"{path} holds no JSON lines")
            _check_jsonl_sample(path, first, bytes(sample))
            starts.append(pos)
            _write_offsets(out, starts)
        os.replace(tmp, Path(f"{path}.idx"))
    finally:
        tmp.unlink(missing_ok=True)
    return count


_CHUNK = 1 << 16


def _write_offsets(out: BinaryIO, offsets: array[int]) -> None:
    """Append ``offsets`` to an index file being written, and clear it."""
    write_index(out, np.frombuffer(offsets, dtype=np.uint64))
    del offsets[:]


def _check_jsonl_sample(path: Path, number: int, blob: bytes) -> None:
    """Parse one sample's byte range as :class:`~datareel.sources.jsonl.JsonlSource` will."""
    where = f"{path} line {number}"
    try:
        value = json.loads(blob.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start} of the line)") from None
    except json.JSONDecodeError as exc:
        hint = ""
        if b"\r" in blob.rstrip(b"\r\n"):
            hint = "; it holds a carriage return inside the line: convert CR-only line endings to \\n"
        elif any(c in blob for c in b"\x0b\x0c"):
            hint = "; it holds a form feed or vertical tab, which JSON does not allow outside strings"
        elif exc.msg == "Extra data":
            hint = "; each line holds one JSON object (two on one line? split them)"
        raise DatasetError(
            f"{where}: not one valid JSON object: {exc.msg} (line {number + exc.lineno - 1}, column {exc.colno}){hint}"
        ) from None
    except (RecursionError, ValueError) as exc:  # nesting past the stack, an integer past the conversion limit
        raise DatasetError(f"{where}: {unparsable(exc)}; fix the line, then run `datareel prepare` again") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: a JSONL sample is a JSON object, got {type(value).__name__}")
