"""Indexing the shards of a WebDataset for ``datareel prepare``: one tar scanned into its samples' offsets,
keys and parts (:func:`scan_shard`), the split cut by shard, and the ``.nv-meta`` texts Energon reads."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ...errors import DatasetError, OptionError
from ...sources.fieldmap import CRUDE, SAMPLE_TYPES, typed_fields
from .index_db import IndexDb
from .meta import META
from .tarparse import BLOCK, scan_tar


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
    """Every ``*.tar`` file under ``root``, relative, sorted. A directory so named is not a shard: one that
    holds no shard either (an unpacked shard, a download that made a folder) is refused by name, not skipped
    (its samples would be missing without a word); one that holds shards is a folder of them."""
    found = [p for p in root.rglob("*.tar") if META not in p.relative_to(root).parts]
    shards = sorted(p.relative_to(root).as_posix() for p in found if p.is_file())
    for folder in sorted(p for p in found if p.is_dir()):
        inside = folder.relative_to(root).as_posix() + "/"
        if not any(shard.startswith(inside) for shard in shards):
            raise DatasetError(
                f"{folder} is a directory, not a tar shard: `datareel prepare` indexes *.tar files, and would "
                f"leave out whatever it holds. An unpacked shard? pack its files into a .tar file again; anything "
                f"else: rename the directory so that its name does not end in .tar"
            )
    return shards


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
    from ... import __version__

    info = {"energon_version": f"datareel {__version__}", "shard_counts": counts}
    return {
        "split.yaml": yaml.safe_dump({"split_parts": splits, "exclude": []}, sort_keys=False),
        "dataset.yaml": yaml.safe_dump(config, sort_keys=False),
        "index.uuid": str(uuid.uuid4()),
        ".info.json": json.dumps(info, indent=2),
    }
