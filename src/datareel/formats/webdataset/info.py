"""``datareel info`` on a prepared WebDataset: its sample type, shards, samples and bytes per split; and,
for a metadataset entry naming one, the samples of the split it reads (or the command that gives the
split its shards)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ...errors import DatasetError
from ...sources.fieldmap import CRUDE
from ..metafiles import load_file
from . import meta
from .explain import problem
from .splits import read_split


def info(p: Any) -> dict[str, Any]:
    """Splits, shards, samples, bytes and sample type of a prepared directory (or prefix)."""
    found = problem(p)
    if found is not None:
        raise DatasetError(found)
    info = meta.read_info(p)
    config = meta.read_dataset_yaml(p)
    sample_type = (
        config.get("sample_type", {}).get("__class__") if isinstance(config.get("sample_type"), dict) else None
    )
    splits = {}
    config_split = load_file(p / meta.META / "split.yaml") if (p / meta.META / "split.yaml").is_file() else {}
    for name in (config_split or {}).get("split_parts", {}):
        split = read_split(p, name, info)
        splits[name] = {
            "shards": len(split.shards),
            "samples": sum(info[s] for s in split.shards),
            "excluded_samples": sum(len(k) for k in split.excluded_samples.values()),
            "bytes": sum((p / s).stat().st_size for s in split.shards if (p / s).exists()),
        }
    return {
        "path": str(p),
        "kind": "webdataset",
        "sample_type": sample_type or config.get("__class__", CRUDE),
        "shards": len(info),
        "samples": sum(info.values()),
        "bytes": sum((p / s).stat().st_size for s in info if (p / s).exists()),
        "splits": splits,
    }


def entry(target: Any, info: dict[str, Any], part: Any) -> dict[str, Any]:
    """A metadataset's dataset ``target`` (``info``: what :func:`info` says of it) reading split ``part``:
    its samples, or why that split cannot be read and the ``datareel prepare`` that fixes it."""
    split = info["splits"].get(part)
    if split is None or not split["samples"]:
        having = {name: s["shards"] for name, s in info["splits"].items() if s["shards"]}
        why = f"{target} has {'no' if split is None else 'an empty'} split {part!r} (shards per split: {having})"
        if info["shards"] < 2:
            why += "; splits are cut by whole shards and it has one: write it as more shards, then prepare it"
            return {"problem": why}
        fix = _prepare_again(target, having, part)
        why += f": prepare it again giving {part!r} a share of its shards"
        if fix is None:
            why += " (with --overwrite, --split-ratio and its --sample-type / --field-map)"
        return {"problem": why, "fix": fix}
    return {"kind": "webdataset", "samples": split["samples"]}


def _prepare_again(target: Path, having: dict[str, int], part: str) -> str | None:
    """The ``datareel prepare --overwrite`` that gives ``part`` one shard (taken from the largest split) and
    keeps the dataset's sample type and field map; ``None`` when its dataset.yaml holds more than those."""
    config = meta.read_dataset_yaml(target)
    flags = ""
    if set(config) - {"__module__", "__class__"} or config.get("__class__") != CRUDE:
        sample_type, field_map = config.get("sample_type"), config.get("field_map")
        if set(config) - {"sample_type", "field_map"} or not isinstance(sample_type, dict):
            return None
        flags = f" --sample-type {shlex.quote(str(sample_type.get('__class__')))}"
        if field_map:
            flags += f" --field-map {shlex.quote(json.dumps(field_map))}"
    shares = dict(having)
    largest = max(shares, key=lambda name: shares[name])
    shares[largest] -= 1
    shares[part] = 1
    order = ["train", "val", "test", *sorted(set(shares) - {"train", "val", "test"})]
    ratio = ",".join(f"{name}:{shares[name]}" for name in order if shares.get(name))
    return f"datareel prepare {target} --overwrite --split-ratio {ratio}{flags}"
