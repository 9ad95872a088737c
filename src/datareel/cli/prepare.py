"""``datareel prepare``: index plain WebDataset shards (or a JSONL file) into Energon's format.

For a directory of ``*.tar`` shards it writes, per shard, ``X.tar.idx`` and, in
``.nv-meta/``, ``.info.json``, ``split.yaml``, ``dataset.yaml``,
``index.sqlite`` and ``index.uuid`` — what Energon's own loaders and tools read.
Shards are scanned in parallel with a progress bar.  Nothing is written until
every shard has been scanned and checked (duplicate keys, sample type, field
map); files are then written under temporary names and renamed into place, so
a failure leaves no half-written metadata.  ``--overwrite`` swaps the new
``.nv-meta`` in atomically (:mod:`.atomic`), keeping a length index, and two
runs on one directory do not interleave: the second is refused at once.
"""

from __future__ import annotations

import codecs
import json
import os
import shutil
import sqlite3
import tempfile
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tqdm import tqdm

from ..errors import DatasetError, OptionError
from ..sources.energon_meta import META
from ..sources.fieldmap import CRUDE, SAMPLE_TYPES, typed_fields
from ..sources.index_files import write_index
from ..sources.tarparse import BLOCK, scan_tar
from .atomic import leftover, locked, swap_in


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

    scans = _scan_all(root, shards, workers, progress)
    report = check_scans(str(root), scans, config, sample_type, splits)
    _write_all(root, scans, splits, config, overwrite)
    return report


def check_scans(
    root: str, scans: list[ShardScan], config: dict[str, Any], sample_type: str, splits: dict[str, list[str]]
) -> PrepareReport:
    """Refuse duplicate keys across the dataset and a field map naming parts no sample has; the report."""
    owner: dict[str, tuple[str, int]] = {}
    for scan in scans:
        for i, key in enumerate(scan.keys):
            other = owner.setdefault(key, (scan.shard, i))
            if other != (scan.shard, i):
                raise DatasetError(
                    f"duplicate sample key {key!r}: sample {other[1]} of shard {root}/{other[0]} and sample {i} "
                    f"of shard {root}/{scan.shard}; keys must be unique across the dataset: rename one"
                )
    found_parts = sorted({part for scan in scans for _, part, _, _ in scan.parts})
    if sample_type != CRUDE:
        fields = typed_fields(config, "--field-map")
        missing = sorted(p for p in fields.parts if p not in found_parts)
        required = SAMPLE_TYPES[sample_type][0]
        if any(all(a.part in missing for a in alts) for f, alts in fields.fields if f in required):
            raise OptionError(f"--field-map names parts {missing} that no sample has; parts found: {found_parts}")
    return PrepareReport(
        shards=len(scans),
        samples=sum(len(s.keys) for s in scans),
        parts=found_parts,
        splits={name: sum(len(s.keys) for s in scans if s.shard in set(lst)) for name, lst in splits.items()},
    )


def metadata_texts(scans: list[ShardScan], splits: dict[str, list[str]], config: dict[str, Any]) -> dict[str, str]:
    """The text files of ``.nv-meta`` (``.info.json`` last: readers take a dataset as prepared by it)."""
    from .. import __version__

    info = {"energon_version": f"datareel {__version__}", "shard_counts": {s.shard: len(s.keys) for s in scans}}
    return {
        "split.yaml": yaml.safe_dump({"split_parts": splits, "exclude": []}, sort_keys=False),
        "dataset.yaml": yaml.safe_dump(config, sort_keys=False),
        "index.uuid": str(uuid.uuid4()),
        ".info.json": json.dumps(info, indent=2),
    }


def _scan_all(root: Path, shards: list[str], workers: int | None, progress: bool) -> list[ShardScan]:
    workers = max(1, min(workers or os.cpu_count() or 1, len(shards)))
    bar = tqdm(total=len(shards), unit="shard", desc="indexing", disable=not progress)
    try:
        if workers == 1:
            scans = []
            for shard in shards:
                scans.append(scan_shard(root, shard))
                bar.update()
            return scans
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(scan_shard, root, shard) for shard in shards]
            scans = []
            for future in futures:
                scans.append(future.result())  # in shard order; re-raises a shard's error
                bar.update()
            return scans
    finally:
        bar.close()


def _write_all(
    root: Path, scans: list[ShardScan], splits: dict[str, list[str]], config: dict[str, Any], overwrite: bool
) -> None:
    tag = f".tmp-{uuid.uuid4().hex[:8]}"
    try:
        staged = Path(tempfile.mkdtemp(prefix=".nv-meta", suffix=tag, dir=root))
    except OSError as exc:
        raise DatasetError(
            f"cannot write the dataset's metadata into {root}: {exc.strerror or exc}; `datareel prepare` writes "
            f"{META}/ and one .idx per shard beside the shards, so it needs write access to {root}"
        ) from None
    umask = os.umask(0)
    os.umask(umask)
    staged.chmod(0o777 & ~umask)  # mkdtemp makes it private; metadata is as readable as the shards
    idx_tmp = [(root / f"{scan.shard}.idx{tag}", root / f"{scan.shard}.idx") for scan in scans]
    try:
        for (tmp, _), scan in zip(idx_tmp, scans):
            write_index(tmp, scan.offsets)
        for name, text in metadata_texts(scans, splits, config).items():
            (staged / name).write_text(text)
        write_sqlite(staged / "index.sqlite", scans)
        for tmp, final in idx_tmp:
            os.replace(tmp, final)
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
        for tmp, _ in idx_tmp:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(staged, ignore_errors=True)
        raise


def write_sqlite(path: Path, scans: list[ShardScan]) -> None:
    """Energon's lookup index (samples by key, parts by sample), for its key-based tools."""
    db = sqlite3.connect(path)
    try:
        db.executescript(
            "CREATE TABLE samples (tar_file_id INTEGER NOT NULL, sample_key TEXT NOT NULL UNIQUE,"
            " sample_index INTEGER NOT NULL, byte_offset INTEGER, byte_size INTEGER);"
            "CREATE TABLE sample_parts (tar_file_id INTEGER NOT NULL, sample_index INTEGER NOT NULL,"
            " part_name TEXT NOT NULL, content_byte_offset INTEGER, content_byte_size INTEGER);"
        )
        for tar_id, scan in enumerate(scans):
            offsets = scan.offsets.tolist()
            db.executemany(
                "INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
                ((tar_id, key, i, offsets[i], offsets[i + 1] - offsets[i]) for i, key in enumerate(scan.keys)),
            )
            db.executemany(
                "INSERT INTO sample_parts VALUES (?, ?, ?, ?, ?)",
                ((tar_id, i, part, off, size) for i, part, off, size in scan.parts),
            )
        db.executescript(
            "CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index);"
            "CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset);"
            "CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name,"
            " content_byte_offset, content_byte_size);"
        )
        db.commit()
    finally:
        db.close()


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
    starts: list[int] = []
    pos = 0
    sample = bytearray()  # the current sample's range: its line and the blank lines after it
    first = 1  # the current sample's line number
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            text = line.strip()
            if text:
                if starts:
                    _check_jsonl_sample(path, first, bytes(sample))
                    sample.clear()
                if not (text.startswith(b"{") and text.endswith(b"}")):
                    bom = " (it starts with a UTF-8 byte-order mark: save the file without one)"
                    raise DatasetError(
                        f"{path} line {number}: not a JSON object (must start with '{{' and end with '}}')"
                        + (bom if line.startswith(codecs.BOM_UTF8) else "")
                    )
                starts.append(pos)
                first = number
            sample += line
            pos += len(line)
    if starts:
        _check_jsonl_sample(path, first, bytes(sample))
    if not starts:
        raise DatasetError(f"{path} holds no JSON lines")
    starts[0] = 0
    tmp = Path(f"{path}.idx.tmp-{uuid.uuid4().hex[:8]}")
    try:
        write_index(tmp, np.array(starts + [pos], dtype=np.uint64))
        os.replace(tmp, Path(f"{path}.idx"))
    finally:
        tmp.unlink(missing_ok=True)
    return len(starts)


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
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: a JSONL sample is a JSON object, got {type(value).__name__}")
