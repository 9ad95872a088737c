"""WebDataset tar shards, prepared as Energon prepares them: ``X.tar.idx`` beside each shard and
``.nv-meta/`` (``.info.json``, ``split.yaml``, ``dataset.yaml``, ``index.sqlite``) beside the shards.

The reader (:mod:`.reader`, :mod:`.shards`, :mod:`.members`, :mod:`.tarparse`, :mod:`.decode` with
:mod:`.images` and :mod:`.compress`), the metadata (:mod:`.meta`, :mod:`.splits`), what a path is when
it is not a dataset (:mod:`.explain`), ``datareel info`` (:mod:`.info`) and the writer: a local
directory (:mod:`.prepare`, with :mod:`.scan`, :mod:`.pool`, :mod:`.index_db`) or a store
(:mod:`.prepare_store`).  Last in :data:`datareel.formats.FORMATS`: a directory or prefix no other
format claims is taken as shards, and opening it says what it is when it is not a prepared dataset.
"""

from __future__ import annotations

from typing import Any

from ...lazy import lazy_names
from ...storage.path import as_path
from ..base import Format


def open_webdataset(
    path: Any,
    *,
    split: str | None = "train",
    image_decode: str | None = "torchrgb",
    decode: bool | str = True,
    subflavors: dict[str, Any] | None = None,
    name: str | None = None,
    split_config: str = "split.yaml",
    dataset_config: str = "dataset.yaml",
    trust_dataset_code: bool = False,
) -> Any:
    """Split ``split`` of the prepared dataset at ``path`` (see :class:`~.reader.WebDatasetSource`)."""
    from .reader import WebDatasetSource

    return WebDatasetSource(
        as_path(path),
        split=split,
        image_decode=image_decode,
        decode=decode,
        subflavors=subflavors,
        split_config=split_config,
        dataset_config=dataset_config,
        name=name,
        trust_dataset_code=trust_dataset_code,
    )


def _info(path: Any) -> dict[str, Any]:
    from .info import info

    return info(as_path(path))


def _problem(path: Any) -> str | None:
    from .explain import problem

    return problem(path)


def _entry(path: Any, info: dict[str, Any], part: Any) -> dict[str, Any]:
    from .info import entry

    return entry(as_path(path), info, part)


def prepare_line(
    path: str,
    *,
    split_ratio: str = "1,0,0",
    sample_type: str = "CrudeWebdataset",
    field_map: dict[str, str] | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    lengths: str | None = None,
) -> str | None:
    """``datareel prepare DIR``: index the shards of a local directory (:func:`~.prepare.prepare_webdataset`)
    or of a store's prefix (:func:`~.prepare_store.prepare_remote_webdataset`) and say what was found; an
    already prepared dataset given ``lengths`` (and not ``overwrite``) is left as it is (``None``): only its
    length index is asked for."""
    from ...storage import scheme_of
    from .meta import is_prepared

    if lengths and not overwrite and is_prepared(as_path(path)):
        return None
    target: Any = as_path(path)
    if scheme_of(path) in (None, "file"):
        from .prepare import prepare_webdataset as write
    else:  # a store: shards downloaded one at a time, metadata written back
        from .prepare_store import prepare_remote_webdataset as write

        target = path
    report = write(
        target,
        split_ratio=split_ratio,
        sample_type=sample_type,
        field_map=field_map,
        workers=workers,
        overwrite=overwrite,
        progress=progress,
    )
    return f"{path}: {report.shards} shards, {report.samples:,} samples, parts {report.parts}; " + ", ".join(
        f"{k}: {v:,}" for k, v in report.splits.items()
    )


def every_sample(path: str) -> Any:
    """Every sample of every shard, in ``.info.json`` order (what a length index is keyed by)."""
    from .reader import WebDatasetSource

    return WebDatasetSource(path, split=None)


FORMAT = Format(
    name="webdataset",
    detect=lambda path: True,  # last in FORMATS: what no other format claims
    open=open_webdataset,
    info=_info,
    problem=_problem,
    entry=_entry,
    prepare=prepare_line,
    every_sample=every_sample,
    splits=True,
    prepares_in_stores=True,
)
"""Energon's prepared WebDataset, in :data:`datareel.formats.FORMATS`."""

_LAZY = {
    "WebDatasetSource": ".reader",
    "READ_MANY_BYTES": ".reader",
    "PartDecoder": ".decode",
    "IMAGE_DECODE": ".decode",
    "prepare_webdataset": ".prepare",
    "prepare_remote_webdataset": ".prepare_store",
    "PrepareReport": ".scan",
    "META": ".meta",
    "is_prepared": ".meta",
    "unprepared": ".explain",
}


__getattr__ = lazy_names(__name__, globals(), _LAZY)[0]  # the reader and writers, imported on first use
