"""``datareel info`` on a metadataset YAML: each dataset it names (per split, nested metadatasets followed),
the split part read and its samples; or every dataset that is missing or not prepared, with the commands
that prepare them (the YAML itself is never prepared)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import DatasetError
from ...storage import join
from ...storage.path import as_path
from ..metafiles import MAX_NODES, load_file


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
    :data:`~datareel.sources.energon_MAX_NODES` entries visited (a file included many times multiplies
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
            self.files[key] = load_file(yaml_path, "metadataset")
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
        if self.visited > MAX_NODES:
            raise DatasetError(
                f"{yaml_path}: the metadataset (with the ones it includes) describes more than {MAX_NODES:,} "
                "blends and datasets; reference each dataset once, with its weight or repetitions"
            )
        if not isinstance(node, dict):
            return
        if isinstance(node.get("path"), str):
            part = node.get("split_part", split)
            target = as_path(join(str(yaml_path.parent), node["path"]))
            if _format_of(target).name == "metadataset":
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
    found = _format_of(target)
    problem = found.problem(target)
    if problem is not None:
        fix = problem.rpartition("run `")[2].partition("`")[0] if "run `datareel prepare" in problem else None
        return {**entry, "problem": problem, "fix": fix}
    if found.entry is None:
        return {**entry, "problem": f"{target} is a {found.name}, which a metadataset does not name as a dataset"}
    return {**entry, **found.entry(target, found.info(target), part)}


def _format_of(path: Any) -> Any:
    """:func:`datareel.formats.format_of` (imported when called: the registry imports this package)."""
    from .. import format_of

    return format_of(path)
