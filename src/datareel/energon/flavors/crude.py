"""Energon's ``megatron.energon.flavors.crude``: :class:`CrudeSample` (a dict of a sample's parts, for cookers)
and :class:`CrudeWebdataset` (the ``dataset.yaml`` class of datasets read crude)."""

from __future__ import annotations

from typing import Any

from ...errors import OptionError
from ...sources.base import Sample

__all__ = ["CrudeSample", "CrudeWebdataset"]


class CrudeSample(Sample):
    """A crude sample: its parts by extension plus ``__key__``, ``__restore_key__``, ``__subflavors__`` and
    ``__sources__`` (a dict whose keys are also attributes), turned into a typed sample by a cooker."""

    __slots__ = ()


class CrudeWebdataset:
    """The class a crude dataset's ``.nv-meta/dataset.yaml`` names (``__class__: CrudeWebdataset``): datareel
    opens such datasets itself (``get_train_dataset(path)``, ``datareel.open_dataset(path)``), and each
    sample is a :class:`CrudeSample` for the task encoder's cookers."""

    __sample_type__ = CrudeSample

    def __init__(self, path: Any, **kwargs: Any):
        raise OptionError(
            f"CrudeWebdataset({path!r}) is not built by hand in datareel.energon: name it in the dataset's "
            f"dataset.yaml (__class__: CrudeWebdataset) and open the dataset with get_train_dataset / "
            f"get_val_dataset, which read it crude"
        )
