"""A prepared WebDataset's sample from its key and part bytes (a mixin of :class:`~.reader.WebDatasetSource`):
decoded, typed (``sample_type`` + ``field_map``), made by the dataset's trusted ``sample_loader``, or crude; and
the :class:`~datareel.sources.source_info.SourceInfo` record of the read (Energon's)."""

from __future__ import annotations

from typing import Any

from ...sources.base import Sample
from ...sources.dataset_code import DatasetCode
from ...sources.source_info import SourceInfo, make_source_info
from ...sources.typed import SAMPLE_CLASSES


class SampleMaking:
    """Samples and records of a :class:`~.reader.WebDatasetSource` (see the module docstring)."""

    decoder: Any
    typed: Any
    subflavors: dict[str, Any]
    shards: tuple[str, ...]
    root: Any
    _dataset_path: Any
    _typed_parts: Any
    _first: list[int]

    # and the reader's locate(index) and _read_raw(shard, local)

    def _sample(self, s: int, local: int, key: str, parts: dict[str, bytes], where: str) -> Any:
        """Sample ``local`` of shard ``s`` from its key and part bytes: decoded, typed or crude."""
        decode = self.decoder
        head = {"__key__": key, "__restore_key__": ("Webdataset", self.shards[s], local)}
        sources = self._sources(s, local, key, parts)
        if isinstance(self.typed, DatasetCode):  # the dataset's trusted sample_loader (it may rename __key__)
            raw = {**head, "__sources__": sources}
            fields = self.typed.build(parts, (lambda p, d: decode(p, d, where)) if decode else (lambda p, d: d), raw)
            head["__key__"] = fields.pop("__key__", key)
            cls = SAMPLE_CLASSES[self.typed.sample_type]
            return cls(**head, __subflavors__=dict(self.subflavors), __sources__=sources, **fields)
        if self.typed is not None:
            fields = self.typed.build(parts, (lambda p, d: decode(p, d, where)) if decode else (lambda p, d: d), where)
            cls = SAMPLE_CLASSES[self.typed.sample_type]
            return cls(**head, __subflavors__=dict(self.subflavors), __sources__=sources, **fields)
        if decode is not None:
            return Sample(
                head,
                **{part: decode(part, data, where) for part, data in parts.items()},
                __subflavors__=dict(self.subflavors),
                __sources__=sources,
            )
        return Sample(head, **parts, __subflavors__=dict(self.subflavors), __sources__=sources)

    def source_info(self, index: int) -> tuple[SourceInfo]:
        """The record of sample ``index``'s read, from its members alone (nothing decoded)."""
        s, local = self.locate(index)
        key, parts, _ = self._read_raw(s, local)
        return self._sources(s, local, key, parts)

    def _sources(self, s: int, local: int, key: str, parts: dict[str, bytes]) -> tuple[SourceInfo]:
        """The record of this read (Energon's): the dataset, the sample's split index (excluded samples
        counted), its shard and the members read (a typed sample's: the parts its field map names)."""
        path = self._dataset_path
        wanted = self._typed_parts
        if wanted is None:
            names = tuple([f"{key}.{part}" for part in parts])
        else:
            names = tuple([f"{key}.{part}" for part in parts if part in wanted])
        return (make_source_info(path, self._first[s] + local, self.shards[s], names),)
