"""``datareel info``: what a prepared dataset holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..sources import energon_meta as meta
from ..sources.fieldmap import CRUDE
from ..sources.index_files import read_index
from ..storage.path import as_path


def dataset_info(path: str | Path) -> dict[str, Any]:
    """Splits, shards, samples, bytes and sample type of a prepared directory or JSONL file."""
    p = as_path(path)
    if p.suffix == ".jsonl":
        idx = read_index(as_path(f"{p}.idx"))
        return {"path": str(p), "kind": "jsonl", "samples": len(idx) - 1, "bytes": p.stat().st_size}
    if not (p.is_dir() and meta.is_prepared(p)):
        raise DatasetError(f"{p} is not a prepared dataset directory or .jsonl file; run `datareel prepare {p}`")
    info = meta.read_info(p)
    config = meta.read_dataset_yaml(p)
    sample_type = (
        config.get("sample_type", {}).get("__class__") if isinstance(config.get("sample_type"), dict) else None
    )
    splits = {}
    config_split = meta.load_file(p / meta.META / "split.yaml") if (p / meta.META / "split.yaml").is_file() else {}
    for name in (config_split or {}).get("split_parts", {}):
        split = meta.read_split(p, name, info)
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


def format_info(info: dict[str, Any]) -> str:
    lines = [f"{info['path']}: {info['kind']}"]
    if info["kind"] == "jsonl":
        lines.append(f"  samples: {info['samples']:,}   bytes: {_size(info['bytes'])}")
        return "\n".join(lines)
    lines.append(f"  sample type: {info['sample_type']}")
    lines.append(f"  shards: {info['shards']:,}   samples: {info['samples']:,}   bytes: {_size(info['bytes'])}")
    lines.append(f"  {'split':<10}{'shards':>8}{'samples':>12}{'excluded':>10}{'bytes':>12}")
    for name, s in info["splits"].items():
        lines.append(
            f"  {name:<10}{s['shards']:>8,}{s['samples']:>12,}{s['excluded_samples']:>10,}{_size(s['bytes']):>12}"
        )
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
