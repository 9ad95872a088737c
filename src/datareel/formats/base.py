"""What a dataset format is to datareel: a :class:`Format`, the functions that give one kind of data its
meaning (detect it, open it, describe it, prepare it).  :data:`datareel.formats.FORMATS` lists them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Opener = Callable[..., Any]
"""``open(path, *, split, image_decode, decode, subflavors, name, split_config, dataset_config,
trust_dataset_code)`` -> a Source or a Blend (the keywords of :func:`datareel.open_dataset`; a format
documents those it ignores)."""
Preparer = Callable[..., "str | None"]
"""``prepare(path, *, split_ratio, sample_type, field_map, workers, overwrite, progress, lengths)`` -> the
one-line answer of ``datareel prepare`` (``None``: nothing was indexed, only a length index is asked for)."""


@dataclass(frozen=True, kw_only=True)
class Format:
    """One dataset format: each field is one job, and a format is complete with the first four.

    - ``name``: what ``datareel info`` calls it (``"webdataset"``, ``"jsonl"``, ``"metadataset"``);
    - ``detect(path) -> bool``: whether ``path`` is data of this format, prepared or not (cheap: the name,
      or one metadata file; :data:`~datareel.formats.FORMATS` asks the formats in order, the first that
      says yes owns the path);
    - ``open`` (:data:`Opener`): the dataset at ``path``; ``None`` for the metadataset, a blend of other formats'
      datasets, which the blend layer opens (:func:`datareel.open_dataset` and a metadataset's entries
      through :mod:`datareel.blend.metadataset`), as no format reaches up into the blends built on it;
    - ``info(path) -> dict``: what ``datareel info`` shows (``{"path", "kind", "samples", ...}``), or a
      :class:`~datareel.errors.DatasetError` naming what is wrong and the fix;
    - ``problem(path) -> str | None``: why ``path`` is not ready to read, with the command that makes it
      ready; ``None`` when it is (``datareel info`` checks a metadataset's datasets with it);
    - ``entry(path, info, part) -> dict``: one dataset of a metadataset in ``datareel info``: its
      ``kind`` and the ``samples`` of split ``part``, or its ``problem`` and ``fix``;
    - ``prepare`` (:data:`Preparer`): the writer behind ``datareel prepare`` (``None``: nothing to prepare);
    - ``every_sample(path) -> Source``: every sample in length-index order (``datareel prepare --lengths``);
      ``None`` where a length index is not made for this format;
    - ``splits``: whether the format has named splits (a metadataset entry's name is ``path/split``);
    - ``prepares_in_stores``: whether ``prepare`` writes into a store (a bucket), not only a local directory.
    """

    name: str
    detect: Callable[[Any], bool]
    open: Opener | None
    info: Callable[[Any], dict[str, Any]]
    problem: Callable[[Any], str | None] = lambda path: None
    entry: Callable[[Any, dict[str, Any], Any], dict[str, Any]] | None = None
    prepare: Preparer | None = None
    every_sample: Callable[[str], Any] | None = None
    splits: bool = False
    prepares_in_stores: bool = False
