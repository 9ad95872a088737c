"""Energon's dataset metadata: ``.nv-meta/.info.json``, ``split.yaml`` and ``dataset.yaml``.

Only the facts of the format are implemented here (see the project's
reference notes); nothing is executed from the dataset directory.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from braceexpand import braceexpand

from ..errors import DatasetError

META = ".nv-meta"


@dataclass(frozen=True, kw_only=True)
class Split:
    """One split: its shards in order, excluded shards and excluded samples (by shard, key)."""

    name: str
    shards: tuple[str, ...]
    excluded_samples: dict[str, frozenset[str]] = field(default_factory=dict)


def is_prepared(root: Path) -> bool:
    meta = root / META
    return (meta / ".info.json").is_file() or (meta / ".info.yaml").is_file()


def load_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc


def read_info(root: Path) -> dict[str, int]:
    """Shard path (relative to root) -> sample count, from ``.info.json`` (or ``.info.yaml``)."""
    meta = root / META
    path = meta / ".info.json" if (meta / ".info.json").is_file() else meta / ".info.yaml"
    info = load_file(path)
    counts = info.get("shard_counts") if isinstance(info, dict) else None
    if not isinstance(counts, dict) or not all(isinstance(v, int) and v >= 0 for v in counts.values()):
        raise DatasetError(
            f"{path} has no valid 'shard_counts' mapping (shard path -> sample count); re-run "
            f"`datareel prepare` or `energon prepare` on {root}"
        )
    return {str(k): int(v) for k, v in counts.items()}


def _expand(entries: Any, path: Path, what: str, info: dict[str, int]) -> list[str]:
    """Brace-expand ``entries``; an entry that names a shard as it is (braces and all) is taken literally."""
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise DatasetError(f"{path}: {what} must be a list of strings, got {entries!r}")
    return [item for entry in entries for item in ([entry] if entry in info else braceexpand(entry))]


def read_split(root: Path, split: str, info: dict[str, int], split_config: str = "split.yaml") -> Split:
    """The shards of ``split`` (brace-expanded, excludes applied), checked against the info file."""
    meta = root / META
    path = meta / split_config
    if not path.is_file() and split_config == "split.yaml" and (meta / "split.json").is_file():
        path = meta / "split.json"
    if not path.is_file():
        raise DatasetError(f"split file {path} is missing; run `datareel prepare` on {root}")
    config = load_file(path)
    parts = config.get("split_parts") if isinstance(config, dict) else None
    if not isinstance(parts, dict):
        raise DatasetError(f"{path} has no 'split_parts' mapping of split name -> shard list")
    if split not in parts:
        raise DatasetError(f"split {split!r} is not in {path}; it has {sorted(parts)}: pass one of them as split=")
    shards = _expand(parts[split], path, f"split_parts[{split!r}]", info)
    twice = sorted(s for s, n in Counter(shards).items() if n > 1)
    if twice:
        raise DatasetError(
            f"{path}: split {split!r} names shards {twice[:5]} more than once (directly or through overlapping "
            f"brace ranges); each shard may be listed once, or its samples would be read twice"
        )
    excluded_shards: set[str] = set()
    excluded_samples: dict[str, set[str]] = {}
    for entry in _expand(config.get("exclude"), path, "exclude", info):
        if entry in info:
            excluded_shards.add(entry)
            continue
        shard, slash, key = entry.rpartition("/")
        # a sample exclude is "<shard>/<key>"; keys may contain "/" themselves
        while slash and shard not in info:
            shard, slash, rest = shard.rpartition("/")
            key = f"{rest}/{key}"
        if not slash:
            raise DatasetError(
                f"{path}: exclude entry {entry!r} names neither a shard of the dataset nor '<shard>/<sample key>'"
            )
        excluded_samples.setdefault(shard, set()).add(key)
    unknown = [s for s in shards if s not in info]
    if unknown:
        raise DatasetError(
            f"{path}: split {split!r} names shards that {META}/.info.json does not list: {unknown[:5]}; "
            f"re-run `datareel prepare` on {root}"
        )
    kept = tuple(s for s in shards if s not in excluded_shards)
    return Split(
        name=split, shards=kept, excluded_samples={s: frozenset(k) for s, k in excluded_samples.items() if s in kept}
    )


def read_dataset_yaml(root: Path, dataset_config: str = "dataset.yaml") -> dict[str, Any]:
    path = root / META / dataset_config
    if not path.is_file():
        raise DatasetError(
            f"{path} is missing; write it (e.g. `datareel prepare {root} --sample-type CrudeWebdataset`)"
        )
    config = load_file(path)
    if not isinstance(config, dict):
        raise DatasetError(f"{path} must hold a mapping, got {config!r}")
    return config
