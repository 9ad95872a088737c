"""Energon metadatasets: a ``.yaml`` / ``.yml`` file blending (or, for val and test, concatenating) other
datasets, each named by a path relative to it (a prepared directory, a ``.jsonl``, another metadataset, or
a URL).  The tree is built by :mod:`datareel.blend.metadataset` (a blend is the dataset users compose);
``datareel info`` walks it (:mod:`.info`).  Nothing to prepare: its datasets are prepared."""

from __future__ import annotations

from typing import Any

from ...storage.path import as_path
from ..base import Format

SUFFIXES = (".yaml", ".yml")


def detect(path: Any) -> bool:
    """A ``.yaml`` / ``.yml`` file (by its name)."""
    return as_path(path).suffix in SUFFIXES


def open_metadataset(
    path: Any,
    *,
    split: str = "train",
    image_decode: str | None = "torchrgb",
    decode: bool | str = True,
    shuffle_over_epochs_multiplier: int | None = 1,
    trust_dataset_code: bool = False,
    **ignored: Any,
) -> Any:
    """Split ``split`` of the metadataset at ``path`` as a blend. Its entries name their own splits, configs and
    subflavors: ``subflavors``, ``name``, ``split_config`` and ``dataset_config`` do not apply (as ever);
    ``shuffle_over_epochs_multiplier`` multiplies each dataset's own."""
    from ...blend.metadataset import load_metadataset

    return load_metadataset(
        as_path(path),
        split=split,
        image_decode=image_decode,
        decode=decode,
        shuffle_over_epochs_multiplier=shuffle_over_epochs_multiplier,
        trust_dataset_code=trust_dataset_code,
    )


def _info(path: Any) -> dict[str, Any]:
    from .info import metadataset_info

    return metadataset_info(as_path(path))


FORMAT = Format(name="metadataset", detect=detect, open=open_metadataset, info=_info)
"""Energon's metadataset, in :data:`datareel.formats.FORMATS` (first: it is told by its name alone)."""
