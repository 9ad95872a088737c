"""Energon sample types and ``field_map``: which tar parts become which sample fields.

A typed sample is an instance of the type's dataclass (:mod:`.typed`), e.g.
``CaptioningSample(__key__="000001", image=<tensor>, caption="a cat", ...)``.

``field_map`` values follow Energon's grammar: a part name (``jpg``), nested
access into a decoded part (``json[captions][0]``), or alternatives tried in
order (``jpg,png``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import DatasetError
from .dataset_code import REFUSAL, DatasetCode, dataset_code
from .keys import check_keys
from .typed import SAMPLE_CLASSES, type_fields

# type name -> (required fields, optional fields)
SAMPLE_TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {name: type_fields(name) for name in SAMPLE_CLASSES}
CRUDE = "CrudeWebdataset"
_ACCESS = re.compile(r"^([^\[\],]+)((?:\[[^\[\]]+\])*)$")


@dataclass(frozen=True)
class Access:
    """One way to fill a field: a part and an index path into its decoded value."""

    part: str
    path: tuple[str | int, ...]

    def get(self, decoded: Any) -> Any:
        for step in self.path:
            decoded = decoded[step]
        return decoded


def parse_field(spec: str, where: str) -> tuple[Access, ...]:
    alternatives = []
    for alt in spec.split(","):
        match = _ACCESS.match(alt.strip())
        if not match:
            raise DatasetError(f"{where}: field_map value {spec!r} is not 'part', 'part[k][0]' or 'a,b'")
        steps = re.findall(r"\[([^\]]+)\]", match.group(2))
        alternatives.append(Access(match.group(1), tuple(int(s) if s.isdigit() else s for s in steps)))
    return tuple(alternatives)


@dataclass(frozen=True, kw_only=True)
class TypedFields:
    """A validated sample type with its parsed field map."""

    sample_type: str
    fields: tuple[tuple[str, tuple[Access, ...]], ...]

    @property
    def parts(self) -> frozenset[str]:
        return frozenset(a.part for _, alts in self.fields for a in alts)

    def build(self, raw: Mapping[str, bytes], decode: Callable[[str, bytes], Any], where: str) -> dict[str, Any]:
        """Map the raw parts of one sample to the type's fields, decoding only what is used."""
        out: dict[str, Any] = {}
        for field, alternatives in self.fields:
            for access in alternatives:
                if access.part in raw:
                    try:
                        out[field] = access.get(decode(access.part, raw[access.part]))
                    except (KeyError, IndexError, TypeError) as exc:
                        raise DatasetError(
                            f"{where}: field {field!r} = {access.part}{''.join(f'[{s}]' for s in access.path)} "
                            f"cannot be read from the decoded part: {exc!r}"
                        ) from exc
                    break
            else:
                wanted = " or ".join(a.part for a in alternatives)
                raise DatasetError(
                    f"{where}: field {field!r} of {self.sample_type} needs part {wanted}, but the sample has "
                    f"only {sorted(raw)}; fix field_map in dataset.yaml"
                )
        return out


DATASET_KEYS = ("__module__", "__class__", "sample_type", "field_map", "subflavors", "split_config")
"""The keys of ``dataset.yaml`` datareel reads."""
_REFUSED = {
    "part_filter": "a part filter goes with a sample_loader (Energon's rule), which this dataset.yaml does not "
    "name; with a field_map only mapped parts are read: remove part_filter",
    "decoder": "a decoder configured in dataset.yaml is not read by datareel; choose decoding with "
    "open_dataset(image_decode=..., decode=...) (or the task encoder's decoder through datareel.energon) and "
    "remove the key",
    "subflavor": "the legacy single subflavor is not read by datareel; write subflavors: {__subflavor__: VALUE}",
}
_LEGACY = re.compile(r"^[A-Za-z]+Webdataset$")


def _module(value: Any, where: str) -> None:
    """A ``__module__`` must name Energon's package: datareel never imports what a dataset names, and a
    class from elsewhere would make Energon read the dataset otherwise than datareel."""
    if not (isinstance(value, str) and (value == "megatron.energon" or value.startswith("megatron.energon."))):
        raise DatasetError(
            f"{where}: __module__={value!r} is not megatron.energon; datareel reads Energon's own dataset and "
            f"sample classes only (it never imports a module a dataset names); write __module__: megatron.energon"
        )


def typed_fields(
    config: Mapping[str, Any], where: str, meta: Any = None, trusted: bool = False
) -> TypedFields | DatasetCode | None:
    """Interpret a ``dataset.yaml`` mapping. -> ``None`` for crude datasets, else the field map, or the
    dataset's own ``sample_loader`` (:mod:`.dataset_code`) where the caller ``trusted`` the code in ``meta``
    (the ``.nv-meta`` directory).

    Every key is checked: an unknown one is refused with the closest known key, and Energon's keys that
    datareel cannot honour (``decoder``; ``sample_loader`` untrusted) by name."""
    coded = "sample_loader" in config
    if coded and not trusted:
        raise DatasetError(f"{where}: sample_loader {config['sample_loader']!r} {REFUSAL}")
    keys = DATASET_KEYS + (("sample_loader", "part_filter") if coded else ())
    check_keys(dict(config), keys, where, "dataset.yaml", _REFUSED)
    if "__module__" in config:
        _module(config["__module__"], where)
    cls = config.get("__class__")
    if cls is not None and not isinstance(cls, str):
        raise DatasetError(f"{where}: __class__={cls!r} must be a class name such as {CRUDE}")
    subflavors = config.get("subflavors")
    if subflavors is not None and not isinstance(subflavors, Mapping):
        raise DatasetError(
            f"{where}: subflavors={subflavors!r} must be a mapping (name: value), e.g. subflavors: {{source: coco}}"
        )
    if cls == CRUDE:
        if "sample_type" in config or "field_map" in config or coded:
            raise DatasetError(
                f"{where}: {CRUDE} keeps every part of a sample: it takes no sample_type or field_map (nor a "
                f"sample_loader); remove them, or drop __class__ to read a typed sample"
            )
        return None
    if cls is not None and cls != "StandardWebdatasetFactory" and not _LEGACY.match(cls):
        raise DatasetError(
            f"{where}: __class__={cls!r} is not a dataset class datareel reads: {CRUDE}, "
            f"StandardWebdatasetFactory (with sample_type and field_map) or a legacy <Type>Webdataset"
        )
    if "sample_type" in config:
        st = config["sample_type"]
        if isinstance(st, Mapping):
            check_keys(dict(st), ("__module__", "__class__"), f"{where}: sample_type", "sample_type")
            if "__module__" in st:
                _module(st["__module__"], f"{where}: sample_type")
            name = st.get("__class__")
        else:
            name = st
        if not isinstance(name, str):
            raise DatasetError(
                f"{where}: sample_type={st!r} must name a sample class, e.g. "
                f"sample_type: {{__module__: megatron.energon, __class__: TextSample}}"
            )
    elif cls is not None and cls != "StandardWebdatasetFactory":  # legacy: CaptioningWebdataset + field_map
        name = cls[: -len("Webdataset")] + "Sample"
    else:
        raise DatasetError(
            f"{where}: expected __class__: {CRUDE} or a sample_type with field_map, got keys {sorted(config)}"
        )
    if name not in SAMPLE_TYPES:
        raise DatasetError(
            f"{where}: sample_type {name!r} is not supported; supported: {sorted(SAMPLE_TYPES)} and {CRUDE}"
        )
    if coded:
        return dataset_code(config, meta, where, name)
    required, optional = SAMPLE_TYPES[name]
    field_map = config.get("field_map")
    if not isinstance(field_map, Mapping) or not field_map:
        raise DatasetError(
            f"{where}: sample_type {name} needs a field_map (field -> part), e.g. {{{required[0]}: txt}}"
        )
    unknown = [f for f in field_map if f not in required + optional]
    missing = [f for f in required if f not in field_map]
    if unknown or missing:
        raise DatasetError(
            f"{where}: field_map for {name} "
            + (f"names unknown fields {unknown}" if unknown else "")
            + (" and " if unknown and missing else "")
            + (f"lacks required fields {missing}" if missing else "")
            + f"; {name} has fields {list(required + optional)}"
        )
    odd = {f: spec for f, spec in field_map.items() if not isinstance(spec, str) or not spec}
    if odd:
        raise DatasetError(
            f"{where}: field_map values must be part names ('txt', 'json[text]', 'jpg,png'), got {odd!r}"
        )
    return TypedFields(sample_type=name, fields=tuple((f, parse_field(spec, where)) for f, spec in field_map.items()))
