"""Energon's dataset metadata: ``.nv-meta/.info.json``, ``split.yaml`` and ``dataset.yaml``.

Only the facts of the format are implemented here (see the project's
reference notes); nothing is executed from the dataset directory.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from braceexpand import braceexpand

from ..errors import DatasetError
from ..storage import AccessDenied, NotFound

META = ".nv-meta"
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader (~10x faster) where built
MAX_NODES = 100_000  # values one metadata file may add through YAML aliases (each use counted)
MAX_DEPTH = 64  # nesting of one metadata file


@dataclass(frozen=True, kw_only=True)
class Split:
    """One split: its shards in order, excluded shards and excluded samples (by shard, key)."""

    name: str
    shards: tuple[str, ...]
    excluded_samples: dict[str, frozenset[str]] = field(default_factory=dict)


def is_prepared(root: Path) -> bool:
    meta = root / META
    return (meta / ".info.json").is_file() or (meta / ".info.yaml").is_file()


def unprepared(root: Path) -> DatasetError:
    """The error for a directory without metadata, naming old metadata an interrupted
    ``prepare --overwrite`` left aside (see :mod:`datareel.cli.atomic`)."""
    aside = sorted(root.glob(f"{META}.replaced-*"))
    if aside:
        return DatasetError(
            f"{root} has no {META}/: an interrupted `datareel prepare --overwrite` left the old metadata in "
            f"{aside[0]}; rename it back to {META}, or run `datareel prepare --overwrite {root}`"
        )
    return DatasetError(f"{root} has no {META}/.info.json: it is not a prepared dataset; run `datareel prepare {root}`")


def load_file(path: Path, what: str = "") -> Any:
    """A JSON or YAML metadata file (safe loading only), bounded in size as written and as expanded."""
    try:
        text = path.read_text(encoding="utf-8")
        value = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=SAFE_LOADER)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DatasetError(f"cannot read {what}{' ' if what else ''}{path}: {exc}") from exc
    except RecursionError:
        raise DatasetError(f"cannot read {what}{' ' if what else ''}{path}: it is nested too deeply to parse") from None
    _check_bounded(value, path)
    return value


def _check_bounded(value: Any, path: Path) -> None:
    """Refuse a document whose YAML aliases expand beyond :data:`MAX_NODES` values, that nests deeper
    than :data:`MAX_DEPTH` levels, or that holds a mapping key that is not a string (every key of
    these formats is one).

    YAML anchors are shared, not copied, when loaded, but everything that walks the document visits an
    alias each time it is used: a few lines of anchors doubling at each line (a "billion laughs")
    describe millions of entries, and an anchor used inside itself describes an endless one.  Only
    values reached again through a container already seen are counted, so a long document written out
    in full (a split of 10^6 shards) is never refused for its size.
    """
    seen: set[int] = set()
    repeated = 0

    def visit(node: Any, depth: int, again: bool) -> None:
        nonlocal repeated
        if depth > MAX_DEPTH:
            raise DatasetError(
                f"{path} is nested more than {MAX_DEPTH} levels deep (an anchor used inside itself?); "
                f"metadata files are a few levels deep"
            )
        if not isinstance(node, (dict, list)):
            return
        if id(node) in seen:
            again = True
        seen.add(id(node))
        if again:
            repeated += len(node)
            if repeated > MAX_NODES:
                raise DatasetError(
                    f"{path} expands to more than {MAX_NODES:,} values through YAML aliases (each counted every "
                    f"time it is used): it is not a dataset description datareel will walk; write the entries "
                    f"out, or split the file"
                )
        if isinstance(node, dict):
            odd = [key for key in node if not isinstance(key, str)]
            if odd:
                raise DatasetError(
                    f"{path} has mapping keys that are not strings: {odd[:5]} (quote them in YAML: a bare yes, "
                    f"no, on, off or a number is not a string)"
                )
        for child in node.values() if isinstance(node, dict) else node:
            visit(child, depth + 1, again)

    visit(value, 0, False)


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


ETAGS = "etags.json"  # datareel's own: each shard's ETag when `datareel prepare` indexed it in a bucket


def read_etags(root: Path) -> dict[str, str]:
    """Shard path -> the ETag it had when indexed (``{}`` when not recorded: prepared locally or by Energon)."""
    path = root / META / ETAGS
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotFound, AccessDenied):  # S3 answers 403 for a missing key to credentials
        return {}  # that may not list the bucket
    try:
        etags = json.loads(raw).get("shards")
    except (ValueError, AttributeError):
        etags = None
    if not isinstance(etags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in etags.items()):
        raise DatasetError(
            f"{path} is not a valid ETag record ({{'shards': {{shard: etag}}}}); re-run `datareel prepare`"
        )
    return etags


def _expand(entries: Any, path: Path, what: str, info: dict[str, int]) -> list[str]:
    """Brace-expand ``entries``; an entry that names a shard as it is (braces and all) is taken literally."""
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise DatasetError(f"{path}: {what} must be a list of strings, got {entries!r}")
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
