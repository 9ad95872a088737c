"""``split.yaml``: a split's shards (brace-expanded, each once) and what it excludes (shards, or samples by
key), checked against ``.info.json``; brace ranges are counted before they are expanded."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from braceexpand import braceexpand

from ...errors import DatasetError
from ..metafiles import _short, check_keys, load_file
from .meta import META, Split, _is_file, _meta_file, confined

SPLIT_KEYS = ("split_parts", "exclude")
"""The keys of ``split.yaml`` (Energon's ``WebdatasetSplits``)."""


def _expand(entries: Any, path: Path, what: str, info: dict[str, int]) -> list[str]:
    """Brace-expand ``entries``; an entry that names a shard as it is (braces and all) is taken literally."""
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise DatasetError(f"{path}: {what} must be a list of strings, got {_short(entries)}")
    # a split names each shard at most once and an exclude each shard and sample: more names than that
    # is an error anyway (named by the caller), and a brace range must not be expanded beyond it
    limit = len(info) + (sum(info.values()) if what == "exclude" else 0)
    out: list[str] = []
    for entry in entries:
        if entry in info:
            out.append(entry)
            continue
        if _brace_count(entry) > limit:  # braceexpand materialises each range, so check the count first
            raise DatasetError(
                f"{path}: {what} entry {entry!r} expands to more than {limit:,} names, more than the dataset "
                f"has {'shards and samples' if what == 'exclude' else 'shards'}; check its brace range"
            )
        try:
            out.extend(braceexpand(entry))
        except ValueError as exc:  # braceexpand's UnbalancedBracesError
            raise DatasetError(f"{path}: {what} entry {entry!r}: {exc}; balance its braces") from None
    return out


_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")


def _brace_count(pattern: str) -> int:
    """How many names ``braceexpand(pattern)`` gives (an upper bound for character ranges), without
    expanding: the product over top-level ``{...}`` groups of their sizes."""
    total, depth, start, pos = 1, 0, 0, 0
    while pos < len(pattern):
        char = pattern[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            depth, start = depth + 1, (pos if depth == 0 else start)
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                total *= _group_count(pattern[start + 1 : pos])
        pos += 1
    return total


def _group_count(expr: str) -> int:
    """Names one ``{expr}`` group gives: an integer range, a character range, or comma alternatives."""
    match = _INT_RANGE.match(expr)
    if match:
        first, last, step = int(match[1]), int(match[2]), int(match[3] or 1) or 1
        return abs(last - first) // step + 1
    if re.match(r"^[A-Za-z]\.\.[A-Za-z](\.\.-?\d+)?$", expr):
        return 52
    alternatives, depth, start = [], 0, 0
    for pos, char in enumerate(expr):
        depth += (char == "{") - (char == "}")
        if char == "," and depth == 0:
            alternatives.append(expr[start:pos])
            start = pos + 1
    if not alternatives:
        return _brace_count(expr)  # not a group: "{" expr "}" kept literally
    return sum(_brace_count(a) for a in alternatives + [expr[start:]])


def read_split(root: Path, split: str, info: dict[str, int], split_config: str = "split.yaml") -> Split:
    """The shards of ``split`` (brace-expanded, excludes applied), checked against the info file."""
    meta = root / META
    path = _meta_file(root, split_config, "split_config", "split")
    if not _is_file(path) and split_config == "split.yaml" and _is_file(meta / "split.json"):
        path = meta / "split.json"
    if not _is_file(path):
        raise DatasetError(f"split file {path} is missing; run `datareel prepare` on {root}")
    config = load_file(path)
    parts = config.get("split_parts") if isinstance(config, dict) else None
    if not isinstance(parts, dict):
        raise DatasetError(
            f"{path} has no 'split_parts' mapping of split name -> shard list, got "
            f"{_short(parts if isinstance(config, dict) else config)}; fix it, or re-run `datareel prepare` on {root}"
        )
    check_keys(config, SPLIT_KEYS, str(path), "a split file")
    if split not in parts:
        raise DatasetError(f"split {split!r} is not in {path}; it has {sorted(parts)}: pass one of them as split=")
    shards = _expand(parts[split], path, f"split_parts[{split!r}]", info)
    for shard in shards:
        if shard not in info:  # .info.json's shards are checked: only a name it does not list can escape
            confined(shard, path, f"split {split!r} names shard", f"Name the shards {META}/.info.json lists")
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
