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


def typed_fields(config: Mapping[str, Any], where: str) -> TypedFields | None:
    """Interpret a ``dataset.yaml`` mapping. -> ``None`` for crude datasets, else the field map."""
    cls = config.get("__class__")
    if "sample_loader" in config or "part_filter" in config:
        raise DatasetError(
            f"{where}: 'sample_loader'/'part_filter' run Python code from the dataset, which datareel does "
            f"not do; describe the sample with sample_type + field_map, or use CrudeWebdataset and an encoder"
        )
    if cls == CRUDE:
        return None
    if "sample_type" in config:
        st = config["sample_type"]
        name = st.get("__class__") if isinstance(st, Mapping) else st
    elif isinstance(cls, str) and cls.endswith("Webdataset"):  # legacy: CaptioningWebdataset + field_map
        name = cls[: -len("Webdataset")] + "Sample"
    else:
        raise DatasetError(
            f"{where}: expected __class__: {CRUDE} or a sample_type with field_map, got {dict(config)!r}"
        )
    if name not in SAMPLE_TYPES:
        raise DatasetError(
            f"{where}: sample_type {name!r} is not supported; supported: {sorted(SAMPLE_TYPES)} and {CRUDE}"
        )
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
    return TypedFields(
        sample_type=name, fields=tuple((f, parse_field(str(spec), where)) for f, spec in field_map.items())
    )
