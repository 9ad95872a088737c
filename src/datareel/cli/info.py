"""``datareel info``: what a prepared dataset holds; for a metadataset YAML, what each of its datasets holds.

Whatever info cannot describe, it says why, and the command that makes it describable when there is one
(``datareel prepare`` takes a directory of ``.tar`` shards or a ``.jsonl`` file: never a shard, a YAML,
or a directory without shards). A metadataset needs no preparing of its own: its datasets do.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..sources import energon_meta as meta
from ..sources.fieldmap import CRUDE
from ..sources.index_files import read_index
from ..storage import join
from ..storage.path import as_path


def dataset_info(path: str | Path) -> dict[str, Any]:
    """Splits, shards, samples, bytes and sample type of a prepared directory or JSONL file."""
    p = as_path(path)
    if p.suffix in (".yaml", ".yml"):
        return metadataset_info(p)
    problem = not_ready(p)
    if problem is not None:
        raise DatasetError(problem)
    if p.suffix == ".jsonl":
        idx = read_index(as_path(f"{p}.idx"))
        return {"path": str(p), "kind": "jsonl", "samples": len(idx) - 1, "bytes": p.stat().st_size}
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


def not_ready(p: Any) -> str | None:
    """Why ``p`` is not a dataset info can describe, and the command that fixes it (one that works), or ``None``."""
    if not isinstance(p, Path):  # a URL: what the bucket holds is read when opened
        if p.suffix == ".jsonl" or (p.is_dir() and meta.is_prepared(p)):
            return None
        return f"{p} is not a prepared dataset directory or .jsonl file; run `datareel prepare {p}`"
    if not p.exists():
        return f"{p} does not exist"
    if p.suffix == ".jsonl":
        if not Path(f"{p}.idx").is_file():
            return f"{p} is not indexed ({p}.idx is missing); run `datareel prepare {p}`"
        return None
    if p.is_dir() and meta.is_prepared(p):
        return None
    inside = next((a for a in p.resolve().parents if meta.is_prepared(a)), None)
    if inside is not None:
        return f"{p} is inside the prepared dataset {inside}: run `datareel info {inside}`"
    if p.is_file():
        if p.suffix == ".tar":
            return f"{p} is one shard; a dataset is the directory of its shards: run `datareel prepare {p.parent}`"
        return f"{p} is a file, not a dataset: give a prepared directory, a .jsonl file or a metadataset .yaml"
    if not any(p.rglob("*.tar")):
        return (
            f"{p} holds no .tar shards and no {meta.META}/: it is not a dataset (datareel prepare indexes a "
            "directory of WebDataset .tar shards, or a .jsonl file)"
        )
    return str(meta.unprepared(p))  # "run `datareel prepare DIR`" (or the metadata an interrupted run set aside)


def metadataset_info(path: Any) -> dict[str, Any]:
    """Each dataset a metadataset YAML names (per split, nested metadatasets followed): its path, the split
    part read and its samples. Raises naming every dataset that is missing or not prepared, with the
    commands that prepare them (the YAML itself is never prepared)."""
    walk = _MetadatasetWalk()
    walk.file(as_path(path), None, ())
    broken = [d for d in walk.datasets if d["problem"]]
    if broken:
        fixes = sorted({d["fix"] for d in broken if d["fix"]})
        raise DatasetError(
            f"{path} is a metadataset: it needs no preparing itself, its datasets do; "
            + "; ".join(f"{d['yaml']}: {d['where']}: {d['problem'].partition('; run `')[0]}" for d in broken)
            + ("" if not fixes else "; run " + " and ".join(f"`{f}`" for f in fixes))
        )
    return {"path": str(path), "kind": "metadataset", "datasets": walk.datasets}


class _MetadatasetWalk:
    """The datasets of a metadataset tree, in file order; each file and dataset read once, and at most
    :data:`~datareel.sources.energon_meta.MAX_NODES` entries visited (a file included many times multiplies
    them). What is malformed is skipped: ``open_dataset`` names it."""

    def __init__(self) -> None:
        self.datasets: list[dict[str, Any]] = []
        self.files: dict[str, Any] = {}
        self.entries: dict[tuple[str, Any], dict[str, Any]] = {}
        self.visited = 0

    def file(self, yaml_path: Any, only: str | None, stack: tuple[str, ...]) -> None:
        """Each dataset of ``yaml_path`` (of split ``only``, or of every split)."""
        key = str(yaml_path.resolve() if isinstance(yaml_path, Path) else yaml_path)
        if key in stack:
            raise DatasetError(f"{yaml_path}: metadatasets include each other in a cycle: {list(stack)}")
        if key not in self.files:
            self.files[key] = meta.load_file(yaml_path, "metadataset")
        config = self.files[key]
        splits = config.get("splits") if isinstance(config, dict) else None
        if not isinstance(splits, dict):
            raise DatasetError(f"{yaml_path}: a metadataset is a mapping with '__class__' and 'splits'")
        legacy = config.get("__class__") == "Metadataset"  # v1: {split: {datasets: [...]}}
        for split, node in splits.items():
            if only is None or split == only:
                if legacy and isinstance(node, dict) and isinstance(node.get("datasets"), list):
                    node = {"blend": node["datasets"]}
                self.node(node, yaml_path, str(split), f"splits.{split}", (*stack, key))

    def node(self, node: Any, yaml_path: Any, split: str, where: str, stack: tuple[str, ...]) -> None:
        self.visited += 1
        if self.visited > meta.MAX_NODES:
            raise DatasetError(
                f"{yaml_path}: the metadataset (with the ones it includes) describes more than {meta.MAX_NODES:,} "
                "blends and datasets; reference each dataset once, with its weight or repetitions"
            )
        if not isinstance(node, dict):
            return
        if isinstance(node.get("path"), str):
            part = node.get("split_part", split)
            target = as_path(join(str(yaml_path.parent), node["path"]))
            if target.suffix in (".yaml", ".yml"):
                self.file(target, part if isinstance(part, str) else split, stack)
                return
            if (str(target), part) not in self.entries:
                self.entries[(str(target), part)] = _entry(target, part)
            self.datasets.append({"yaml": str(yaml_path), "where": where, "split": split,
                                  **self.entries[(str(target), part)]})  # fmt: skip
            return
        for kind in ("blend", "blend_epochized"):
            if isinstance(node.get(kind), list):
                for i, item in enumerate(node[kind]):
                    self.node(item, yaml_path, split, f"{where}.{kind}[{i}]", stack)


def _entry(target: Any, part: Any) -> dict[str, Any]:
    """One dataset of a metadataset: its kind and samples of ``part``, or the problem and its fix."""
    entry: dict[str, Any] = {"path": str(target), "split_part": part, "samples": None, "problem": None, "fix": None}
    problem = not_ready(target)
    if problem is not None:
        fix = problem.rpartition("run `")[2].partition("`")[0] if "run `datareel prepare" in problem else None
        return {**entry, "problem": problem, "fix": fix}
    info = dataset_info(target)
    if info["kind"] == "jsonl":
        return {**entry, "kind": "jsonl", "samples": info["samples"]}
    split = info["splits"].get(part)
    if split is None or not split["samples"]:
        having = {name: s["shards"] for name, s in info["splits"].items() if s["shards"]}
        problem = f"{target} has {'no' if split is None else 'an empty'} split {part!r} (shards per split: {having})"
        if info["shards"] < 2:
            problem += "; splits are cut by whole shards and it has one: write it as more shards, then prepare it"
            return {**entry, "problem": problem}
        fix = _prepare_again(target, having, part)
        problem += f": prepare it again giving {part!r} a share of its shards"
        if fix is None:
            problem += " (with --overwrite, --split-ratio and its --sample-type / --field-map)"
        return {**entry, "problem": problem, "fix": fix}
    return {**entry, "kind": "webdataset", "samples": split["samples"]}


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
