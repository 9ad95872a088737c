"""What a path that is not a prepared dataset is instead, and the command that makes it one: the errors
``open_dataset`` raises (:func:`unprepared`) and the problems ``datareel info`` reports (:func:`problem`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import DatasetError
from ...storage.path import as_path
from ..metafiles import close_names
from .meta import META, is_prepared


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


def problem(p: Any) -> str | None:
    """Why ``p`` is not a prepared dataset ``datareel info`` can describe, and the command that fixes it (one
    that works), or ``None``.  A local path is looked at (missing, a shard, a file, inside a prepared
    dataset, a directory without shards); in a store, where a look costs requests, a prefix is a dataset
    when its ``.nv-meta/`` says so."""
    p = as_path(p)
    if not isinstance(p, Path):
        if is_prepared(p):
            return None
        return f"{p} is not a prepared dataset directory or .jsonl file; run `datareel prepare {p}`"
    if not p.exists():
        return f"{p} does not exist"
    if p.is_dir() and is_prepared(p):
        return None
    inside = next((a for a in p.resolve().parents if is_prepared(a)), None)
    if inside is not None:
        return f"{p} is inside the prepared dataset {inside}: run `datareel info {inside}`"
    if p.is_file():
        if p.suffix == ".tar":
            return f"{p} is one shard; a dataset is the directory of its shards: run `datareel prepare {p.parent}`"
        return f"{p} is a file, not a dataset: give a prepared directory, a .jsonl file or a metadataset .yaml"
    if not any(p.rglob("*.tar")):
        return (
            f"{p} holds no .tar shards and no {META}/: it is not a dataset (datareel prepare indexes a "
            "directory of WebDataset .tar shards, or a .jsonl file)"
        )
    return str(unprepared(p))  # "run `datareel prepare DIR`" (or the metadata an interrupted run set aside)
