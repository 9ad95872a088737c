"""A ``dataset.yaml`` whose samples are built by Python in the dataset folder (Energon's ``sample_loader``
and ``part_filter``), run only where the user trusts the dataset's code.

``sample_loader: sample_loader.py:fn`` names a function in a file of ``.nv-meta/`` that turns one raw
sample (``{"__key__", "__restore_key__", "__sources__", <part>: decoded value}``, only the parts
``part_filter`` keeps) into the fields of ``sample_type``; it may rename ``__key__``.  ``part_filter`` is
``file.py:fn`` (``fn(part) -> bool``) or a list of part names.  Running it executes code a dataset ships,
so it is refused unless the dataset is opened with ``trust_dataset_code=True`` (:func:`datareel.open_dataset`,
and ``datareel.energon``'s ``get_*_dataset`` / ``get_dataset_from_config``).

The functions are loaded once per process, by first use (a worker loads its own), so a source that holds
a :class:`DatasetCode` pickles as plain names and paths.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import DatasetError

REFUSAL = (
    "runs Python from the dataset folder, which datareel does only when told to trust it: pass "
    "trust_dataset_code=True (datareel.open_dataset, or datareel.energon's get_*_dataset / "
    "get_dataset_from_config); or describe the sample with sample_type + field_map"
)
_LOADED: dict[tuple[str, str], Callable[..., Any]] = {}  # (file url, function name) -> the function, per process


@dataclass(frozen=True, kw_only=True)
class DatasetCode:
    """A trusted ``sample_loader`` with its ``part_filter``: where they are, and how a raw sample becomes the
    fields of ``sample_type``."""

    sample_type: str
    meta: Any  # the dataset's .nv-meta directory (a Path or RemotePath)
    loader: str  # "file.py:function" or "file.py" (function sample_loader)
    part_filter: str | tuple[str, ...]  # "file.py:function", or the part names kept
    where: str  # the dataset.yaml, for errors

    def keeps(self, part: str) -> bool:
        """Whether ``part`` is read for the loader (``part_filter``)."""
        if isinstance(self.part_filter, tuple):
            return part in self.part_filter
        return bool(self._function(self.part_filter, "part_filter")(part))

    @property
    def parts(self) -> _Filtered:
        """The parts a sample's record names: a set-like view of :meth:`keeps`."""
        return _Filtered(self)

    def build(self, raw: Mapping[str, bytes], decode: Callable[[str, bytes], Any], head: dict[str, Any]) -> dict:
        """The sample's fields from the loader, given its raw parts and ``head`` (``__key__``,
        ``__restore_key__``, ``__sources__``); a ``__key__`` the loader returns renames the sample."""
        sample = {**head, **{part: decode(part, data) for part, data in raw.items() if self.keeps(part)}}
        fields = self._function(self.loader, "sample_loader")(sample)
        if not isinstance(fields, Mapping):
            raise DatasetError(
                f"{self.where}: sample_loader {self.loader!r} returned {type(fields).__name__}, not a dict of "
                f"{self.sample_type} fields; return dict(field=value, ...)"
            )
        return {k: v for k, v in fields.items() if k not in ("__restore_key__", "__sources__", "__subflavors__")}

    def _function(self, spec: str, default: str) -> Callable[..., Any]:
        file, _, name = spec.partition(":")
        name = name or default
        url = str(self.meta / file)
        fn = _LOADED.get((url, name))
        if fn is None:
            fn = _LOADED[(url, name)] = _load(self.meta / file, name, f"{self.where}: {default}={spec!r}")
        return fn


@dataclass(frozen=True)
class _Filtered:
    code: DatasetCode

    def __contains__(self, part: object) -> bool:
        return isinstance(part, str) and self.code.keeps(part)


def _load(path: Any, name: str, where: str) -> Callable[..., Any]:
    """Function ``name`` of the Python file at ``path``, run as a module of its own."""
    try:
        source = path.read_text()
    except OSError as exc:
        raise DatasetError(f"{where}: cannot read {path}: {exc}; put the file in the dataset's .nv-meta/") from None
    module = types.ModuleType(f"datareel_dataset_code_{abs(hash(str(path))):x}")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)  # reached only with trust_dataset_code=True
    fn = module.__dict__.get(name)
    if not callable(fn):
        raise DatasetError(f"{where}: {path} defines no function {name!r}; name one as file.py:function")
    return fn


def dataset_code(config: Mapping[str, Any], meta: Any, where: str, sample_type: str) -> DatasetCode:
    """The :class:`DatasetCode` of a trusted ``dataset.yaml`` with ``sample_loader`` (the caller checked the
    trust: :data:`REFUSAL`)."""
    loader = config["sample_loader"]
    if not isinstance(loader, str) or not loader.split(":")[0].endswith(".py"):
        raise DatasetError(f"{where}: sample_loader={loader!r} must name a Python file, e.g. sample_loader.py:fn")
    if "field_map" in config:
        raise DatasetError(f"{where}: give field_map or sample_loader, not both (Energon's rule); remove one")
    part_filter = config.get("part_filter")
    if isinstance(part_filter, list) and all(isinstance(p, str) for p in part_filter):
        part_filter = tuple(part_filter)
    elif not (isinstance(part_filter, str) and part_filter.split(":")[0].endswith(".py")):
        raise DatasetError(
            f"{where}: a sample_loader needs part_filter (a list of parts, or file.py:function), got "
            f"{part_filter!r}; e.g. part_filter: [json, png]"
        )
    return DatasetCode(sample_type=sample_type, meta=meta, loader=loader, part_filter=part_filter, where=where)
