"""``datareel info`` on a metadataset YAML: each dataset it names (per split, nested metadatasets followed),
the split part read and its samples; or every dataset that is missing or not prepared, with the commands
that prepare them (the YAML itself is never prepared)."""

from __future__ import annotations

from typing import Any

from ...errors import DatasetError
from ...storage.path import as_path
from .scope import Passive, Scope
from .walk import Walk


def metadataset_info(path: Any) -> dict[str, Any]:
    """Each dataset a metadataset YAML names (per split, nested metadatasets followed): its path, the split
    part read and its samples. Raises naming every dataset that is missing or not prepared, with the
    commands that prepare them (the YAML itself is never prepared)."""
    path = as_path(path)
    listing = _Listing()
    walk: Walk[None] = Walk(listing, lenient=True)  # what is malformed is skipped: opening it names it
    for split in walk.document(path)["splits"]:
        walk.tree(path, str(split))
    broken = [d for d in listing.datasets if d["problem"]]
    if broken:
        fixes = sorted({d["fix"] for d in broken if d["fix"]})
        raise DatasetError(
            f"{path} is a metadataset: it needs no preparing itself, its datasets do; "
            + "; ".join(f"{d['yaml']}: {d['where']}: {d['problem'].partition('; run `')[0]}" for d in broken)
            + ("" if not fixes else "; run " + " and ".join(f"`{f}`" for f in fixes))
        )
    return {"path": str(path), "kind": "metadataset", "datasets": listing.datasets}


class _Listing(Passive):
    """The walk's visitor that lists the datasets of a metadataset tree, in file order (each dataset read once)."""

    def __init__(self) -> None:
        self.datasets: list[dict[str, Any]] = []
        self.entries: dict[tuple[str, Any], dict[str, Any]] = {}

    def dataset(self, node: dict, target: Any, scope: Scope) -> None:
        try:
            part = scope.part(node)  # null or empty: the split read, as every reader
        except DatasetError:
            part = node["split_part"]  # listed as written (opening the metadataset names it)
        if (str(target), part) not in self.entries:
            self.entries[(str(target), part)] = _entry(target, part)
        self.datasets.append(
            {"yaml": str(scope.yaml), "where": scope.where, "split": scope.split, **self.entries[(str(target), part)]}
        )


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
