"""The saved spec as a schema: :class:`Spec`, its JSON form both ways, and what differs between two of them.

A state's ``spec`` records everything that, if changed, would make the cursor point into another reel or
cut other global batches (invariant I6).  :class:`Spec` is that record as a value: one attribute per field
of :data:`~datareel.state.fields.FIELDS` (each field's type, bounds and guarantee are declared there), and
``extra`` for fields a later release may add (compared as values, never dropped).  It holds read-only JSON
(:func:`~datareel.state.values.freeze`), so a frozen ``Spec`` holds no mutable dict.

- :meth:`Spec.to_json` gives the spec's JSON, fields in the order a state writes them;
- :meth:`Spec.from_json` reads one, refusing a damaged or foreign value with a
  :class:`~datareel.errors.StateDamagedError` naming the field (``check=False``: a spec this process built);
- :meth:`Spec.diff` lists ``(field, saved, now, what it protects)`` for every field that differs;
  :func:`mismatch` is the :class:`~datareel.errors.StateMismatchError` a restore raises from it.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import OptionError, StateDamagedError, StateMismatchError, brief
from ..plan.schedule import BatchSchedule
from .fields import BY_NAME, FIELDS, check_fields, protects
from .values import check_bounds, freeze, thaw

Difference = tuple[str, Any, Any, str]
"""``(field, saved value, current value, what the field protects)``; an absent field's value is ``None``."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    """The spec a state records (see the module doc): build it with the values a loader runs with, or read a
    saved one with :meth:`from_json`."""

    seed: int
    shuffle: bool
    global_batch_size: Any
    """The schedule's JSON form (:meth:`datareel.plan.schedule.BatchSchedule.to_json`): an int when constant."""
    dataset: Any
    """The dataset tree's fingerprint (``name``, ``size``, ``digest``, and ``sources``, ``content``)."""
    locality: Any = None
    """The block shuffle's ``{"block", "period", "window"}`` (:class:`datareel.BlockShuffle`), or ``None``."""
    packing: Any = None
    """Length-planned packing's options (:class:`datareel.Packing`'s JSON form), or ``None``."""
    stage: Any = None
    """A window stage's fields, or ``None``: ``window`` always; the windowed stage's ``pack`` and ``encoder``;
    a user's stage (:class:`datareel.reel.Stage`) its planner's own."""
    extra: Mapping[str, Any] = dataclasses.field(default_factory=lambda: _EMPTY)
    """Fields this release does not read (a later release's), kept and compared as values."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, freeze(getattr(self, field.name)))
        clash = [name for name in self.extra if name in BY_NAME]
        if clash:
            raise OptionError(f"Spec(extra=...) holds {clash}, which are fields of the spec: pass them by name")

    # -- JSON -----------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The spec as a state writes it: every field in :data:`~datareel.state.fields.FIELDS` order (those
        a state may omit only when present), then ``extra``."""
        out: dict[str, Any] = {}
        for field in FIELDS:
            value = getattr(self, field.name)
            if field.required or value is not None:
                out[field.name] = thaw(value)
        return {**out, **thaw(self.extra)}

    @classmethod
    def from_json(cls, value: Any, *, check: bool = True) -> Spec:
        """The spec in ``value`` (a state's ``spec``).  ``check``: refuse, with a
        :class:`~datareel.errors.StateDamagedError` naming the field, a value that is not a dict, not a
        bounded tree of JSON values, lacks a field every state records, or holds a field of another type;
        ``check=False`` for a spec this process built (or one already checked with its state)."""
        if not isinstance(value, dict):
            raise StateDamagedError(f"state spec={brief(value)} must be a dict; the state is damaged")
        if check:
            check_bounds(value, "spec")
            check_fields(value)
        known: dict[str, Any] = {field.name: value.get(field.name) for field in FIELDS}
        extra = {key: item for key, item in value.items() if key not in BY_NAME}
        return cls(**known, extra=extra)

    @classmethod
    def of(cls, value: Spec | dict[str, Any]) -> Spec:
        """``value`` as a :class:`Spec`: itself, or a spec dict this process built (not checked)."""
        return value if isinstance(value, Spec) else cls.from_json(value, check=False)

    # -- reading it ---------------------------------------------------------------------------------------
    @property
    def packed(self) -> bool:
        """Whether the cursor counts packs (or a windowed stage's outputs): the state then has a ``pack``."""
        return self.packing is not None or self.stage is not None

    def schedule(self) -> BatchSchedule:
        """The global batch schedule it records (``StateDamagedError`` if that cannot be read)."""
        return BatchSchedule.from_json(thaw(self.global_batch_size))

    def replace(self, **fields: Any) -> Spec:
        """This spec with ``fields`` (JSON values) in place of its own."""
        return dataclasses.replace(self, **fields)

    def diff(self, other: Spec | dict[str, Any]) -> list[Difference]:
        """``(field, saved, now, what it protects)`` for each field where ``self`` (saved) and ``other`` (now)
        differ, by field name; values as JSON, ``None`` for a field one of them lacks."""
        saved, now = self.to_json(), Spec.of(other).to_json()
        return [
            (name, saved.get(name), now.get(name), protects(name))
            for name in sorted(set(saved) | set(now), key=str)
            if saved.get(name) != now.get(name)
        ]

    def __repr__(self) -> str:
        return f"Spec.from_json({self.to_json()!r})"


def mismatch(differences: list[Difference]) -> StateMismatchError:
    """The refusal of a restore whose saved spec differs from the loader's: each field with both values and
    what it protects (a blend's changes child by child), then the fix."""
    lines = [
        f"  - {name}: saved {brief(old, 300)}, now {brief(new, 300)} — protects {guarantee}"
        for name, old, new, guarantee in differences
    ]
    for name, old, new, _ in differences:
        if name == "dataset":
            lines += [f"      {line}" for line in dataset_changes(old, new)]
            lines += [f"  {line}" for line in name_fix(old, new)]
    return StateMismatchError(
        "the state does not belong to this loader; restoring it would break datareel's "
        "exactly-once and identical-batches guarantees. Differing fields:\n"
        + "\n".join(lines)
        + "\nBuild the loader with the saved values, or start without restoring.",
        {name: (old, new) for name, old, new, _ in differences},
    )


def dataset_changes(saved: Any, current: Any) -> list[str]:
    """What differs between two blend fingerprints, child by child (added, removed, weight, content)."""
    if not (isinstance(saved, dict) and isinstance(current, dict)):
        return []
    old = {entry[0]: entry for entry in saved.get("sources") or []}
    new = {entry[0]: entry for entry in current.get("sources") or []}
    if not old or not new:
        return []
    out = [f"source {name!r} was added" for name in new if name not in old]
    out += [f"source {name!r} was removed" for name in old if name not in new]
    for name in old.keys() & new.keys():
        (_, p_old, d_old), (_, p_new, d_new) = old[name], new[name]
        if p_old != p_new:
            out.append(f"source {name!r}: weight/repetitions {p_old} -> {p_new}")
        if d_old != d_new:
            out.append(f"source {name!r}: its content, subset, split or nesting changed")
    if list(old) != list(new) and not out:
        out.append("the order of the sources changed")
    return out


CONTENT_NAME = re.compile(r"[^/@]+@[0-9a-f]{16}")
"""A prepared directory's default name (:mod:`datareel.formats.webdataset.naming`): ``train@<16 hex>``."""


def name_fix(saved: Any, current: Any) -> list[str]:
    """The one-line fix when the dataset's name (or a blend's datasets' names) differ: the name keys the
    shuffle, so the same data opened under another name is another order; under the saved name it continues."""
    if not (isinstance(saved, dict) and isinstance(current, dict)):
        return []
    old = [entry[0] for entry in saved.get("sources") or [] if isinstance(entry, list | tuple) and entry]
    new = [entry[0] for entry in current.get("sources") or [] if isinstance(entry, list | tuple) and entry]
    if old or new:  # a blend: its datasets by name (cut to 24 characters in the state)
        gone = [name for name in old if name not in new and isinstance(name, str)]
        if not gone:
            return []
        cut = " (names are cut to 24 characters in the state)" if any(len(n) >= 24 for n in gone) else ""
        return [
            f"the state's datasets {brief(gone, 200)} are not in this blend (it has {brief(new, 200)}){cut}. "
            f"A dataset's name keys its shuffle: if they are the same data under other names, open each under "
            f"its saved name to continue the saved order, e.g. open_dataset(..., name={brief(gone[0], 100)})"
            + _legacy(gone, new)
        ]
    before, now = saved.get("name"), current.get("name")
    if not isinstance(before, str) or before == now:
        return []
    return [
        f"the dataset is named {brief(before, 100)} in the state and {brief(now, 100)} now, and the name keys "
        f"the shuffle. If it is the same data, open it under the saved name to continue the saved order: "
        f"open_dataset(..., name={brief(before, 100)}) (from_sequence(..., name=...) alike), or check it with "
        f"`datareel verify ... --name {shlex.quote(before[:100])}`" + _legacy([before], [now])
    ]


def _legacy(saved: list[Any], now: list[Any]) -> str:
    """A note when the state predates content names: it named a prepared directory ``<folder>/<split>``."""
    if any(isinstance(n, str) and CONTENT_NAME.fullmatch(n) for n in now) and not any(
        isinstance(n, str) and CONTENT_NAME.fullmatch(n) for n in saved
    ):
        return (
            ". (A prepared directory's default name is now its split and a digest of its layout in .nv-meta: "
            "shard paths, sample counts, excluded keys, the same for every copy wherever it lives; a state written "
            "before that named it by its folder, as in 'ds/train'.)"
        )
    return ""
