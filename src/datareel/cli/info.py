"""``datareel info``: what a prepared dataset holds; for a metadataset YAML, what each of its datasets holds.

Whatever info cannot describe, it says why, and the command that makes it describable when there is one
(``datareel prepare`` takes a directory of ``.tar`` shards or a ``.jsonl`` file: never a shard, a YAML,
or a directory without shards). A metadataset needs no preparing of its own: its datasets do.  What a path
is and what its description holds are its format's (:data:`datareel.formats.FORMATS`); this module shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..formats import format_of
from ..formats.metadataset.info import metadataset_info as metadataset_info
from ..storage.path import as_path


def dataset_info(path: str | Path) -> dict[str, Any]:
    """Splits, shards, samples, bytes and sample type of a prepared directory or JSONL file; each dataset of a
    metadataset YAML."""
    p = as_path(path)
    return format_of(p).info(p)


def not_ready(p: Any) -> str | None:
    """Why ``p`` is not a dataset info can describe, and the command that fixes it (one that works), or ``None``."""
    return format_of(p).problem(p)


def format_info(info: dict[str, Any]) -> str:
    lines = [f"{info['path']}: {info['kind']}"]
    if info["kind"] == "metadataset":
        head = ("split", "entry", "dataset", "part", "samples")
        rows = [head, *((d["split"], d["where"], d["path"], str(d["split_part"]), f"{d['samples']:,}")
                        for d in info["datasets"])]  # fmt: skip
        widths = [max(len(row[c]) for row in rows) for c in range(len(head))]
        for row in rows:
            cells = [
                cell.rjust(w) if c == len(head) - 1 else cell.ljust(w) for c, (cell, w) in enumerate(zip(row, widths))
            ]
            lines.append("  " + "  ".join(cells).rstrip())
        return "\n".join(lines)
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
