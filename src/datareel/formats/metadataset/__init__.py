"""Energon metadatasets: a ``.yaml`` / ``.yml`` file blending (or, for val and test, concatenating) other
datasets, each named by a path relative to it (a prepared directory, a ``.jsonl``, another metadataset, or
a URL).  This format tells one by its name and describes it (``datareel info`` walks it: :mod:`.info`); the
blend layer opens it (:mod:`datareel.blend.metadataset`: a blend is the dataset users compose, built on the
formats, so no format opens one).  Nothing to prepare: its datasets are prepared."""

from __future__ import annotations

from typing import Any

from ...storage.path import as_path
from ..base import Format
from .walk import SUFFIXES as SUFFIXES
from .walk import detect


def _info(path: Any) -> dict[str, Any]:
    from .info import metadataset_info

    return metadataset_info(as_path(path))


FORMAT = Format(name="metadataset", detect=detect, open=None, info=_info)
"""Energon's metadataset, in :data:`datareel.formats.FORMATS` (first: it is told by its name alone); opened
by the blend layer (:func:`datareel.blend.metadataset.load_metadataset`), as it opens into a blend."""
