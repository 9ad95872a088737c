"""Energon's dataset metadata: ``.nv-meta/.info.json``, ``split.yaml`` and ``dataset.yaml``.

Only the facts of the format are implemented here (see the project's
reference notes); nothing is executed from the dataset directory.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from braceexpand import braceexpand

from ..errors import INT64_LIMIT, DatasetError, RepeatedKey
from ..storage import AccessDenied, NotFound

META = ".nv-meta"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader (~10x faster) where built, refusing a key repeated in a mapping (YAML keeps
    the last and drops the others without a word).  A merge key's (``<<: *base``) entries may be given
    again beside it: that is how YAML overrides them."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:  # each mapping's first step, before merging
        checked = self.__dict__.setdefault("_checked", set())
        if id(node) not in checked:
            checked.add(id(node))
            seen: dict[tuple[str, str], tuple[yaml.Node, yaml.Node]] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # a key that is not a string is refused later (_check_bounded)
                key = key_node.tag, key_node.value  # a string key: its text ('a' and "a" are one key)
                if key in seen:
                    first_key, first_value = seen[key]
                    raise RepeatedKey(
                        self.construct_object(key_node),
                        self.construct_object(first_value, deep=True),
                        self.construct_object(value_node, deep=True),
                        key_node.start_mark.line + 1,
                        first_key.start_mark.line + 1,
                    )
                seen[key] = key_node, value_node
        super().flatten_mapping(node)


SAFE_LOADER = _Loader


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (``json`` keeps the last)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: dict[str, Any] = {}
        for key, item in pairs:
            if key in seen:
                raise RepeatedKey(key, seen[key], item)
            seen[key] = item
    return value


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
    try:
        return (meta / ".info.json").is_file() or (meta / ".info.yaml").is_file()
    except OSError as exc:  # a name too long, a loop of links, a directory that cannot be entered
        raise DatasetError(f"cannot open dataset directory {root}: {exc.strerror or exc}") from None


def unprepared(root: Path) -> DatasetError:
    """The error for a path that is not a prepared dataset, saying what it is instead: missing (with the
    names beside it that come close), a tar shard or index file (open its directory), another file, a
    directory without ``.nv-meta/`` (run ``datareel prepare``), one whose ``.nv-meta/`` has no info file,
    or one whose metadata an interrupted ``prepare --overwrite`` left aside (see :mod:`datareel.cli.atomic`)."""
    if isinstance(root, Path):
        try:
            kind = "dir" if root.is_dir() else "file" if root.exists() else "missing"
        except OSError as exc:
            return DatasetError(f"cannot open dataset path {root}: {exc.strerror or exc}")
        if kind == "missing":
            return DatasetError(f"{root} does not exist{close_names(root)}")
        if kind == "file":
            return _a_file(root)
        try:
            aside = sorted(root.glob(f"{META}.replaced-*"))
            has_meta = (root / META).is_dir()
        except OSError as exc:
            return DatasetError(f"cannot read dataset directory {root}: {exc.strerror or exc}")
    else:  # a URL: a listing costs a request; say what a prepared dataset needs
        aside, has_meta = [], True
    if aside:
        return DatasetError(
            f"{root} has no {META}/: an interrupted `datareel prepare --overwrite` left the old metadata in "
            f"{aside[0]}; rename it back to {META}, or run `datareel prepare --overwrite {root}`"
        )
    if not has_meta:
        return DatasetError(
            f"{root} is a directory but not a prepared dataset: it has no {META}/ (the metadata `datareel prepare` "
            f"or `energon prepare` writes beside the shards); run `datareel prepare {root}`"
        )
    return DatasetError(
        f"{root} has no {META}/.info.json (or .info.yaml): it is not a prepared dataset, or its preparation did "
        f"not finish; run `datareel prepare {root}` (with --overwrite if {META}/ holds other files)"
    )


def _a_file(path: Path) -> DatasetError:
    """The error for a file given where a dataset directory was expected."""
    name = path.name
    if name.endswith((".tar", ".tgz", ".tar.idx")):
        shard = name.removesuffix(".idx")
        folder = next((p for p in path.parents if (p / META).is_dir()), path.parent)
        return DatasetError(
            f"{path} is a {'tar shard' if shard == name else 'shard index'}, not a dataset: a dataset is the directory "
            f"that holds its shards and {META}/. Open {folder}"
            + ("" if (folder / META).is_dir() else f" after `datareel prepare {folder}`")
        )
    if name.endswith(".jsonl.idx"):
        return DatasetError(f"{path} is the index of a JSONL dataset: open {path.parent / name[: -len('.idx')]}")
    return DatasetError(
        f"{path} is a file, not a dataset: datareel opens a prepared directory (tar shards with {META}/), "
        f"a .jsonl file or a metadataset .yaml"
    )


def close_names(path: Any) -> str:
    """``"; did you mean ...?"`` naming entries beside a missing ``path`` whose names come close."""
    import difflib
    import itertools

    if not isinstance(path, Path):
        return ""  # a URL: listing the prefix costs requests
    try:
        siblings = [p.name for p in itertools.islice(path.parent.iterdir(), 10_000)] if path.parent.is_dir() else []
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, siblings, n=3)
    return f"; did you mean {' or '.join(str(path.parent / c) for c in close)}?" if close else ""


def load_file(path: Path, what: str = "", fix: str = "re-run `datareel prepare` on the dataset") -> Any:
    """A JSON or YAML metadata file (safe loading only), bounded in size as written and as expanded.
    Anything wrong with it (unreadable, not UTF-8, not JSON/YAML, an integer past Python's 4,300-digit
    conversion limit, nested past the parser's stack) is a :class:`DatasetError` naming it and ``fix``."""
    label = f"{what}{' ' if what else ''}{path}"
    try:
        text = path.read_text(encoding="utf-8")
    except DatasetError:
        raise
    except FileNotFoundError:
        raise DatasetError(f"{label} does not exist{close_names(path)}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"cannot read {label}: it is not UTF-8 text (byte {exc.start}: {exc.reason}); {fix}"
        ) from None
    except OSError as exc:
        raise DatasetError(f"cannot read {label}: {exc.strerror or exc}; {fix}") from None
    try:
        if path.suffix == ".json":
            value = json.loads(text, object_pairs_hook=_json_object)
        else:
            value = yaml.load(text, Loader=SAFE_LOADER)
    except RepeatedKey as exc:
        where = f" line {exc.line}: key {_short(exc.key)} appears twice (first on line {exc.first})"
        if exc.line is None:  # JSON: the parser gives no position
            where = f": key {_short(exc.key)} appears twice in one object"
        raise DatasetError(
            f"{label}{where}: {_short(exc.old)} and then {_short(exc.new)}; a mapping gives each key once (a "
            f"parser would keep the last and drop the other without a word): remove one"
        ) from None
    except RecursionError:
        raise DatasetError(f"cannot read {label}: it is nested too deeply to parse; {fix}") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DatasetError(f"cannot read {label}: {exc}; {fix}") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise DatasetError(
                f"cannot read {label}: it holds an integer of more than {sys.get_int_max_str_digits():,} digits, "
                f"which no count or setting needs; {fix}"
            ) from None
        raise DatasetError(f"cannot read {label}: {exc}; {fix}") from None
    except Exception as exc:  # a parser's own failure on hostile text: never a bare traceback
        raise DatasetError(f"cannot read {label}: {type(exc).__name__}: {exc}; {fix}") from None
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


INFO_KEYS = ("energon_version", "shard_counts")
"""The keys of ``.info.json`` / ``.info.yaml``: all Energon 7.4.1 writes (its ``WebdatasetInfo``)."""


def read_info(root: Path) -> dict[str, int]:
    """Shard path (relative to root) -> sample count, from ``.info.json`` (or ``.info.yaml``)."""
    meta = root / META
    path = meta / ".info.json" if (meta / ".info.json").is_file() else meta / ".info.yaml"
    fix = f"re-run `datareel prepare` or `energon prepare` on {root}"
    info = load_file(path, fix=fix)
    if isinstance(info, dict):
        check_keys(info, INFO_KEYS, str(path), "an info file")
    counts = info.get("shard_counts") if isinstance(info, dict) else None
    if not isinstance(counts, dict):
        raise DatasetError(
            f"{path} has no valid 'shard_counts' mapping (shard path -> sample count), got "
            f"{_short(counts if isinstance(info, dict) else info)}; {fix}"
        )
    for shard, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= INT64_LIMIT:
            raise DatasetError(
                f"{path}: shard_counts[{_short(shard)}]={_short(count)} is not a sample count (an integer from 0 "
                f"to {INT64_LIMIT:,}); {fix}"
            )
        if not shard or "\0" in shard:
            raise DatasetError(f"{path}: shard_counts names {_short(shard)}, which is not a shard path; {fix}")
    inside = (
        f"Re-run `datareel prepare` or `energon prepare` on {root} (they name shards relative to it), or bring "
        f"the shard inside {root} (a symbolic link there to a shard elsewhere is read)"
    )
    what = "shard_counts names shard"
    odd = {shard: confined(shard, path, what, inside) for shard in counts if normal(shard) != shard}
    if odd:  # a name not in normal form may be another name of a listed shard
        seen: dict[str, str] = {}
        for shard in counts:
            name = odd.get(shard, shard)
            if name in seen:
                raise DatasetError(
                    f"{path}: shard_counts names one shard twice, as {_short(seen[name])} and {_short(shard)}: "
                    f"its samples would be read twice; {fix}"
                )
            seen[name] = shard
    if sum(counts.values()) > INT64_LIMIT:
        raise DatasetError(f"{path}: shard_counts adds up to more than {INT64_LIMIT:,} samples; {fix}")
    return {str(k): int(v) for k, v in counts.items()}


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (a hostile value may be huge, an int past the conversion limit)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return f"<an integer of {value.bit_length():,} bits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


CONFINED = (
    "a path a dataset's metadata names must be relative to the dataset directory and stay inside it ('..' may "
    "not climb out of it): datareel reads nothing outside a dataset because its metadata says so"
)
"""The rule :func:`confined` enforces (in its refusals)."""


def normal(name: str) -> str | None:
    """``name`` in normal form (``.`` and empty components dropped, ``..`` resolved by name, as Energon
    does), or ``None`` when it is absolute or leads outside the directory it is relative to."""
    padded = f"/{name}/"
    if "/./" not in padded and "/../" not in padded and "//" not in padded:
        return name  # already normal (every name Energon or datareel writes): the fast path
    if name.startswith("/"):
        return None
    parts: list[str] = []
    for part in name.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def confined(name: str, file: Any, what: str, fix: str) -> str:
    """``name`` (a shard, split or config file ``file``'s metadata names) in :func:`normal` form, refused
    unless it is relative and stays inside the dataset directory.  The rule is on names, the same for a
    local directory and a bucket prefix; the file is then read by its normal name (``link/../x.tar`` is
    ``x.tar`` in the dataset, never beside the link's target), and a symbolic link inside the dataset is
    followed wherever it points (datasets assembled from links)."""
    found = normal(name)
    if found is None:
        how = "is an absolute path" if name.startswith("/") else "leads outside the dataset directory"
        raise DatasetError(f"{file}: {what} {_short(name)} {how}; {CONFINED}. {fix}")
    if not found:
        raise DatasetError(f"{file}: {what} {_short(name)} names the dataset directory itself, not a file. {fix}")
    return found


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


def _meta_file(root: Path, name: str, option: str, what: str) -> Path:
    """The ``split_config`` / ``dataset_config`` file ``name`` (relative to ``.nv-meta/``) of ``root``,
    refused by :func:`confined` unless it is inside the dataset directory; read by its normal name."""
    relative = name if name.startswith("/") else f"{META}/{name}"
    fix = f"Name a file in the dataset's {META}/ directory (copy it there if it is elsewhere)"
    return root / confined(relative, f"{option}={name!r}", f"the {what} file", fix)


SPLIT_KEYS = ("split_parts", "exclude")
"""The keys of ``split.yaml`` (Energon's ``WebdatasetSplits``)."""


def _is_file(path: Path) -> bool:
    """``path.is_file()``, with an error the OS gives for the name (too long, a loop of links) named."""
    try:
        return path.is_file()
    except OSError as exc:
        raise DatasetError(f"cannot open {path}: {exc.strerror or exc}") from None


def read_dataset_yaml(root: Path, dataset_config: str = "dataset.yaml") -> dict[str, Any]:
    path = _meta_file(root, dataset_config, "dataset_config", "dataset")
    fix = f"write it, e.g. with `datareel prepare {root} --overwrite --sample-type CrudeWebdataset`"
    if not _is_file(path):
        raise DatasetError(f"{path} is missing; {fix}")
    config = load_file(path, fix=f"fix it, or {fix}")
    if not isinstance(config, dict):
        raise DatasetError(
            f"{path} must hold a mapping (__class__, or sample_type and field_map), got {_short(config)}; {fix}"
        )
    return config


def check_keys(
    mapping: dict[str, Any],
    allowed: Iterable[str],
    where: str,
    what: str,
    refused: dict[str, str] | None = None,
    suggest: Iterable[str] = (),
) -> None:
    """Refuse a key of ``mapping`` (at ``where``: the file and the place in it) that is not ``allowed``:
    one in ``refused`` (a key Energon reads but datareel cannot honour: ``key -> why``) by name and
    reason, any other as unknown, with the allowed keys and the closest one of them or of ``suggest``
    (keys valid elsewhere, refused there by name) — a typo is never ignored."""
    import difflib

    allowed = sorted(allowed)
    refused = refused or {}
    for key in mapping:
        if key in allowed:
            continue
        if key in refused:
            raise DatasetError(f"{where}: {key!r}: {refused[key]}")
        close = difflib.get_close_matches(str(key), allowed + sorted(set(suggest) - set(allowed)), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise DatasetError(
            f"{where} has an unknown key {_short(key)}{hint}; {what} takes {', '.join(allowed)}. "
            f"Fix or remove it: datareel refuses a key it does not know rather than ignore it"
        )
