"""Energon's dataset metadata in ``.nv-meta/``: ``.info.json`` (shard -> sample count), ``dataset.yaml``,
``etags.json`` (datareel's, for a dataset prepared in a bucket), and the rule on the names they give
(:func:`confined`: inside the dataset directory).  ``split.yaml`` is :mod:`.splits`.

Only the facts of the format are implemented here (see the project's reference notes); nothing is
executed from the dataset directory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import INT64_LIMIT, AccessDenied, DatasetError, NotFound
from ..metafiles import _short, check_keys, load_file

META = ".nv-meta"


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


def _meta_file(root: Path, name: str, option: str, what: str) -> Path:
    """The ``split_config`` / ``dataset_config`` file ``name`` (relative to ``.nv-meta/``) of ``root``,
    refused by :func:`confined` unless it is inside the dataset directory; read by its normal name."""
    relative = name if name.startswith("/") else f"{META}/{name}"
    fix = f"Name a file in the dataset's {META}/ directory (copy it there if it is elsewhere)"
    return root / confined(relative, f"{option}={name!r}", f"the {what} file", fix)


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


def configured_split(config: dict[str, Any], where: str, split_config: str) -> str:
    """The split file a dataset reads: ``dataset.yaml``'s ``split_config`` where it names one (Energon's
    configured keys win over the caller's defaults), else ``split_config``."""
    named = config.get("split_config")
    if named is None:
        return split_config
    if not isinstance(named, str) or not named:
        raise DatasetError(
            f"{where}: split_config={named!r} must name a split file in {META}/ (e.g. split_config: split2.yaml)"
        )
    return named
