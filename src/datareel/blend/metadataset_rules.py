"""What a metadataset's mappings may hold: the keys of each kind of entry (unknown ones refused with the
closest, Energon's that datareel cannot honour refused by name), weights and repetitions, ``subset``
ranges (parsed, then applied innermost first), the walk (:mod:`datareel.formats.metadataset.walk`) reads the rest."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..sources.keys import check_keys

_COMMON = ("subflavors", "shuffle_over_epochs_multiplier", "subset")
DATASET_KEYS = ("path", "split_part", "dataset_config", "split_config", "aux", *_COMMON)
"""Keys of a dataset entry (one with ``path``), besides its ``weight`` / ``repetitions`` in a blend."""
BLEND_KEYS = ("blend", "blend_epochized", *_COMMON)
"""Keys of a blend node (``blend`` or ``blend_epochized``; ``subflavors`` and the multiplier are datareel's
additions there), besides its own ``weight`` / ``repetitions`` when it is an item of a blend."""
_WEIGHT = {"blend": "weight", "blend_epochized": "repetitions"}  # list kind -> the key its items carry
REFUSED = {
    "joiner": "joiner belongs on a join (an entry with join:), beside its list of datasets",
    "nonmatch": "nonmatch belongs on a dataset inside a join: list (a secondary: error, skip or none)",
    "subflavor": "the legacy single subflavor is read in legacy (Metadataset) files only, as Energon; write "
    "subflavors: {__subflavor__: VALUE}",
    "sample_loader": "Python sample loaders run code from the dataset, which datareel does not do",
    "__module__": "a class named inside a split is not read by datareel (it never imports what a metadataset "
    "names); remove __module__/__class__: an entry's keys (path, blend, blend_epochized) say what it is",
    "__class__": "a class named inside a split is not read by datareel (it never imports what a metadataset "
    "names); remove __module__/__class__: an entry's keys (path, blend, blend_epochized) say what it is",
    "__function__": "a function named inside a split is not read by datareel (it never imports what a "
    "metadataset names); remove it",
}
"""Keys Energon reads that datareel cannot honour: refused by name, never accepted and dropped."""


def check_entry_keys(node: dict, yaml_path: Path, where: str, parent: str | None) -> None:
    """Refuse a key the entry cannot hold: unknown (with the closest), Energon's that datareel cannot
    honour (by name), a weight outside a ``blend`` list or repetitions outside a ``blend_epochized`` one,
    or a dataset's own key on a blend."""
    own = check_weight_keys(node, yaml_path, where, parent)
    is_blend = "path" not in node and any(k in node for k in ("blend", "blend_epochized"))
    allowed = (BLEND_KEYS if is_blend else DATASET_KEYS) + ((own,) if own else ())
    if is_blend:
        wrong = sorted(set(node) & (set(DATASET_KEYS) - set(BLEND_KEYS)))
        if wrong:
            raise DatasetError(
                f"{yaml_path}: {where} is a blend: {wrong} belong to a dataset entry (one with 'path'); move "
                f"them into the entries of the list"
            )
    what = "a blend" if is_blend else "a dataset entry" if "path" in node else "an entry"
    if not is_blend and "path" not in node:
        allowed = tuple(sorted(set(DATASET_KEYS) | set(BLEND_KEYS))) + ((own,) if own else ())
    check_keys(node, allowed, f"{yaml_path}: {where}", what, REFUSED, suggest=("weight", "repetitions", "path"))


def check_weight_keys(node: dict, yaml_path: Path, where: str, parent: str | None) -> str | None:
    """Refuse a weight outside a ``blend`` list or repetitions outside a ``blend_epochized`` one -> the key
    the entry's list gives its items (``None`` for a split's own entry)."""
    own = _WEIGHT.get(parent or "")
    for key in ("weight", "repetitions"):
        if key in node and key != own:
            home = "blend" if key == "weight" else "blend_epochized"
            raise DatasetError(
                f"{yaml_path}: {where} has {key!r}, which belongs in a {home} list"
                + (f" (items of a {parent} list take {own!r})" if own else " (a split's own entry takes neither)")
            )
    return own


def entry_number(item: dict, key: str, yaml_path: Path, where: str) -> float:
    """A blend item's ``weight`` or ``repetitions`` (default 1): a positive finite number."""
    value = item.get(key, 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e300 or value != value:
        raise DatasetError(f"{yaml_path}: {where}.{key}={value!r} must be a positive number")
    return float(value)


def parse_subset(spec: Any, yaml_path: Path, where: str, leaf: bool) -> tuple[Any, Any]:
    """``subset: {range: [a, b]}`` -> ``(a, b)``: ``"end"``, ``("%", share)`` or an absolute index (datasets only)."""
    if isinstance(spec, dict):
        check_keys(spec, ("range",), f"{yaml_path}: {where}.subset", "subset")
    if not (
        isinstance(spec, dict)
        and set(spec) == {"range"}
        and isinstance(spec["range"], list)
        and len(spec["range"]) == 2
    ):
        raise DatasetError(f"{yaml_path}: {where}.subset must be {{range: [start, end]}}, got {spec!r}")
    out = []
    for value in spec["range"]:
        if value == "end":
            out.append("end")
        elif isinstance(value, str) and value.endswith("%"):
            try:
                share = float(value[:-1]) / 100
            except ValueError:
                share = math.nan
            if not 0 <= share <= 1:  # also refuses nan
                raise DatasetError(
                    f"{yaml_path}: {where}.subset range value {value!r} is not a percentage in [0%, 100%]"
                ) from None
            out.append(("%", share))
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            if not leaf:
                raise DatasetError(
                    f"{yaml_path}: {where}.subset: absolute ranges ({value}) are only allowed for a leaf dataset (an "
                    f"entry with 'path'), use percentages here"
                )
            out.append(value)
        else:
            raise DatasetError(f"{yaml_path}: {where}.subset range value {value!r} must be 'N%', an integer or 'end'")
    return tuple(out)


def apply_range(rng: tuple[Any, Any], start: int, stop: int, yaml_path: Path, where: str) -> tuple[int, int]:
    """``[start, stop)`` narrowed by one parsed subset ``rng`` (percentages of the current range)."""
    length = stop - start

    def point(value: Any) -> int:
        if value == "end":
            return stop
        if isinstance(value, tuple):  # a percentage of the current range
            return start + int(length * value[1])
        return start + value  # absolute (datasets only, applied first)

    a, b = point(rng[0]), point(rng[1])
    if not start <= a < b <= stop:
        raise DatasetError(f"{yaml_path}: {where}.subset selects [{a}, {b}) outside [{start}, {stop}) or nothing")
    return a, b
