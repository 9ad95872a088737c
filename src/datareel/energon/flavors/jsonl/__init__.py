"""Energon's ``megatron.energon.flavors.jsonl``: JSONL datasets read crude (each line a
:class:`~datareel.energon.flavors.crude.CrudeSample` with its parsed object under ``json``, for cookers).

``CrudeJsonlDatasetFactory.prepare_dataset(path)`` writes ``path.idx`` (Energon's offset index,
datareel's :func:`~datareel.formats.jsonl.prepare.prepare_jsonl`); the dataset is then opened by path
(``get_train_dataset("x.jsonl")``, a metadataset entry), which datareel reads itself.
"""

from __future__ import annotations

from typing import Any

from ....errors import OptionError
from ..crude import CrudeSample

__all__ = ["CrudeJsonlDatasetFactory", "DefaultCrudeJsonlDatasetFactory"]


class CrudeJsonlDatasetFactory:
    """Energon's factory of crude JSONL datasets: :meth:`prepare_dataset` indexes a file; datasets are opened
    by path (see the module docstring)."""

    __sample_type__ = CrudeSample

    def __init__(self, path: Any, **kwargs: Any):
        raise OptionError(
            f"{type(self).__name__}({path!r}) is not built by hand in datareel.energon: open the .jsonl by path "
            f"(get_train_dataset / get_val_dataset, or a metadataset entry), after prepare_dataset(path)"
        )

    @classmethod
    def prepare_dataset(cls, path: Any) -> int:
        """Write ``path.idx`` (the offsets of the file's samples); returns how many samples it holds."""
        from ....formats.jsonl.prepare import prepare_jsonl

        return prepare_jsonl(str(path))


class DefaultCrudeJsonlDatasetFactory(CrudeJsonlDatasetFactory):
    """Energon's default crude JSONL factory (subflavors on every sample, the line parsed as JSON)."""
