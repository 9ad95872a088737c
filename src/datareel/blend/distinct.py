"""Leaves a checkpoint can tell apart: a blend refuses two leaves of one name opened from different places.

A leaf goes into the state by its name, weight and description (:meth:`~datareel.blend.tree.Blend.summary`),
never by where it lives, so that a copy of the same data restores anywhere. A prepared split's default name
is a digest of its layout in ``.nv-meta`` (:mod:`datareel.formats.webdataset.naming`) and a JSONL file's is
its file name: two *different* datasets with the same layout share it. In one blend such leaves could not be
told apart — a state of ``mix([(A, 3), (B, 1)])`` would continue ``mix([(B, 3), (A, 1)])`` without a word —
so the blend is refused, naming both places and the fix (``open_dataset(..., name=...)`` for each). The same
dataset twice (two subsets of one split, one location) is the same data, and stays allowed.
"""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from ..sources.base import Source


def location(source: Source) -> str | None:
    """Where a leaf's data lives (its prepared directory, file or URL; a join's columns, ``+``-joined), through
    views, filters and aux; ``None`` where it has none (``from_sequence``: its content digest tells it apart)."""
    for attr in ("root", "path"):
        where = getattr(source, attr, None)
        if where is not None and not callable(where):
            return str(where)
    columns = getattr(source, "columns", None)
    if isinstance(columns, list) and columns and all(isinstance(c, Source) for c in columns):
        places = [location(c) for c in columns]
        return None if None in places else "+".join(str(p) for p in places)
    base = getattr(source, "base", None)
    return location(base) if isinstance(base, Source) else None


def check_distinct(leaves: list[Source], where: str) -> None:
    """Refuse leaves of one name from different locations (see the module's docstring)."""
    seen: dict[str, str] = {}
    for leaf in leaves:
        place = location(leaf)
        if place is None:
            continue
        first = seen.setdefault(leaf.name, place)
        if first != place:
            raise OptionError(_message(where, leaf.name, first, place))


def _message(where: str, name: str, first: str, second: str) -> str:
    fix = ", ".join(f"open_dataset({_q(p)}, name={_q(_suggest(p))})" for p in (first, second))
    return (
        f"{where[:200]}: two datasets share the name {name!r}: {first} and {second}. A checkpoint records a "
        f"dataset by its name (a prepared split's default name is a digest of its layout in .nv-meta: shard "
        f"paths, sample counts, excluded keys; a JSONL file's is its file name), so it could not tell them apart "
        f"and would continue a blend with them swapped without a word. Give each its own name: {fix}"
    )


def _suggest(place: str) -> str:
    parts = [p for p in place.replace("\\", "/").rstrip("/").split("/") if p]
    return "/".join(parts[-2:]) if parts else place


def _q(value: Any) -> str:
    return repr(str(value))
