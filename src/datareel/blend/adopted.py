"""``Adopted(dataset, remainder)``: a dataset whose reel starts with a remainder adopted from another loader's
checkpoint (each of its samples once, in a keyed order: :mod:`datareel.plan.adopted`), then continues the
dataset's own reel at the epoch after the adopted one.

The remainder is part of the dataset's identity: its record is in :meth:`Adopted.fingerprint`, so a state
saved from an adopted loader carries it, and :func:`adopted_from_state` makes the same dataset again from
such a state on any topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import OptionError
from ..plan.adopted import Remainder
from ..sources.base import Source
from .tree import Blend


@dataclass(frozen=True, eq=False)
class Adopted(Blend):
    """``dataset``'s reel with ``remainder`` (leaf ids of ``dataset``'s leaves) served first."""

    dataset: Source | Blend
    remainder: Remainder

    kind = "adopted"

    def __post_init__(self) -> None:
        if isinstance(self.dataset, Adopted):
            raise OptionError("Adopted(dataset=...) is already adopted: adopt into the plain dataset")

    @property
    def children(self) -> tuple[Source | Blend, ...]:  # type: ignore[override]
        return (self.dataset,)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.dataset.name

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "digest": self.remainder.digest(), "children": [self.dataset.describe()]}

    def summary(self) -> list[list[Any]]:
        return self.dataset.summary() if isinstance(self.dataset, Blend) else super().summary()

    def fingerprint(self) -> dict[str, Any]:
        return {**self.dataset.fingerprint(), "adopted": self.remainder.to_json()}

    def size_hint(self) -> int | None:
        return len(self.remainder)


def adopted_from_state(dataset: Source | Blend, state: Any) -> Adopted | None:
    """``dataset`` with the remainder a saved state records, or ``None`` where the state records none."""
    spec = state.get("spec") if isinstance(state, dict) else None
    record = spec.get("dataset", {}).get("adopted") if isinstance(spec, dict) else None
    if record is None:
        return None
    return Adopted(dataset, Remainder.from_json(record))
