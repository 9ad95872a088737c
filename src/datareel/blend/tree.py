"""Blends of datasets: weighted mixes, epochized mixes and concatenations, all nestable.

A blend is part of the reel: which source position ``p`` reads is a pure
function of ``p`` (see :mod:`datareel.plan.split`), never drawn from a
per-worker RNG, so a blend restores on any topology like a single dataset.

Example::

    web = datareel.open_dataset("/data/web")
    code = datareel.open_dataset("/data/code")
    books = datareel.from_sequence(book_list, name="books")
    reel = datareel.mix([(datareel.mix([(web, 3), (code, 1)]), 0.8), (books, 0.2)])
    once = datareel.mix_epochized([(web, 0.5), (books, 2)])   # a finite meta-epoch
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError
from ..sources.base import Source, shorten

MAX_DENOMINATOR = 1 << 24
"""Each split's share is the nearest fraction with a denominator up to 2^24 (relative error
below 1e-13 for shares above 0.001): exact integer routing at any position."""


class Blend:
    """A dataset made of other datasets (sources or blends)."""

    children: tuple[Source | Blend, ...]
    name: str

    def leaves(self) -> list[Source]:
        out: list[Source] = []
        for child in self.children:
            out.extend(child.leaves() if isinstance(child, Blend) else [child])
        return out

    kind: str
    param_name: str | None = None  # the field holding each child's weight or repetitions

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.param_name:
            out[self.param_name] = list(self.params())
        out["children"] = [c.describe() for c in self.children]
        return out

    def params(self) -> tuple[Any, ...]:
        """Each child's weight, repetitions or ``None``."""
        return getattr(self, self.param_name) if self.param_name else (None,) * len(self.children)

    def summary(self) -> list[list[Any]]:
        """Per child ``[name, weight or repetitions, digest]``: what mismatch messages compare."""
        return [[child.name[:24], param, _digest(child)[:6]] for child, param in zip(self.children, self.params())]

    def content_digest(self) -> str | None:
        """A digest of the children's content digests (in order), where any child has one (a sequence)."""
        contents = [child.content_digest() for child in self.children]
        if all(c is None for c in contents):
            return None
        return hashlib.blake2b(json.dumps(contents).encode(), digest_size=8).hexdigest()

    def fingerprint(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": shorten(self.name), "size": self.size_hint(), "digest": _digest(self)}
        summary = self.summary()
        if len(json.dumps(summary)) <= 480:  # keeps the state under 1 KB; the digest covers the rest
            out["sources"] = summary
        content = self.content_digest()
        if content is not None:  # from_sequence leaves: their sampled items (see sources/sequence.py)
            out["content"] = content
        return out

    def size_hint(self) -> int | None:
        return None

    def __repr__(self) -> str:
        inner = ", ".join(repr(c) for c in self.children)
        return f"{type(self).__name__}([{inner}])"


def _digest(ds: Source | Blend) -> str:
    blob = json.dumps(ds.describe(), sort_keys=True, default=str).encode("utf-8")
    return hashlib.blake2b(blob, digest_size=8).hexdigest()


def _check_children(items: Any, what: str, number: str) -> list[tuple[Any, Any]]:
    items = list(items)
    if not items:
        raise OptionError(f"{what} needs at least one (dataset, {number}) pair")
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (Source, Blend))):
            raise OptionError(
                f"{what} takes a list of (dataset, {number}) pairs, got {item!r}; wrap sequences with "
                f"datareel.from_sequence(...)"
            )
    return items


def _number(value: Any, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise OptionError(f"{label}={value!r} must be a finite number")
    if value <= 0:
        raise OptionError(f"{label}={value!r} must be positive")
    return float(value)


@dataclass(frozen=True, eq=False)
class Mix(Blend):
    """An endless reel in which child ``k`` takes exactly the share ``w_k / Σw`` of positions."""

    children: tuple[Source | Blend, ...]
    weights: tuple[float, ...]
    name: str

    kind = "mix"
    param_name = "weights"


@dataclass(frozen=True, eq=False)
class EpochizedMix(Blend):
    """A finite meta-epoch holding exactly ``round(r_k · len_k)`` samples of child ``k`` (``rounding``:
    :data:`ROUNDINGS`)."""

    children: tuple[Source | Blend, ...]
    repetitions: tuple[float, ...]
    counts: tuple[int, ...]
    name: str
    rounding: str = "half_up"

    kind = "mix_epochized"
    param_name = "repetitions"

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.rounding != "half_up" and self.counts != _counts(self.children, self.repetitions, "half_up"):
            out["rounding"] = self.rounding  # only where it changes the counts: digests change with the order
        return out

    def size_hint(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True, eq=False)
class Concat(Blend):
    """Children one after another; one pass reads each child once (no weights)."""

    children: tuple[Source | Blend, ...]
    name: str

    kind = "concat"

    def size_hint(self) -> int:
        return sum(length_of(c) for c in self.children)


def length_of(ds: Source | Blend) -> int:
    if isinstance(ds, Source):
        return len(ds)
    size = ds.size_hint()
    if size is None:
        raise OptionError(f"{ds.name} is an endless weighted mix; it has no length to repeat or concatenate")
    return size


def mix(items: Any, *, name: str | None = None) -> Mix:
    """Blend datasets by weight: child ``k`` takes exactly ``w_k / Σw`` of the reel's positions.

    The children are interleaved with low discrepancy (after any prefix of ``P``
    positions a flat mix of up to 8 children has ``w_k P`` ± 1.5 samples of each),
    each child keeps its own epochs and shuffle, and any position is resolved
    directly, whatever came before.  Weights need not sum to 1; mixes nest.
    """
    items = _check_children(items, "mix", "weight")
    weights = tuple(_number(w, f"weight of {ds.name!r}") for ds, w in items)
    children = tuple(ds for ds, _ in items)
    return Mix(children, weights, name or f"mix({','.join(c.name for c in children)})")


ROUNDINGS = ("half_up", "energon")
"""How :func:`mix_epochized` makes whole samples of ``r · n``: ``"half_up"`` (datareel's, ``floor(r n + 1/2)``)
or ``"energon"`` (Megatron-Energon's ``RepeatDataset``: ``floor(r) n + floor((r - floor(r)) n)``, rounding
down; what a metadataset's ``blend_epochized`` uses)."""


def _counts(children: Any, reps: tuple[float, ...], rounding: str) -> tuple[int, ...]:
    sizes = [length_of(ds) for ds in children]
    if rounding == "half_up":
        return tuple(math.floor(r * n + 0.5) for n, r in zip(sizes, reps))
    return tuple(math.floor(r) * n + math.floor((r - math.floor(r)) * n) for n, r in zip(sizes, reps))


def mix_epochized(items: Any, *, name: str | None = None, rounding: str = "half_up") -> EpochizedMix:
    """Blend datasets by repetitions: a meta-epoch holds exactly ``round(r_k · len_k)`` samples of
    child ``k`` (``rounding``: half-up, or ``"energon"``: down, as Energon's; :data:`ROUNDINGS`),
    interleaved with low discrepancy.

    Fractional repetitions take the next samples of the child's own reel: with
    ``r = 0.5`` two meta-epochs cover the child once.  With ``repeat=False`` the
    loader reads one meta-epoch; otherwise meta-epochs follow one another.
    """
    if rounding not in ROUNDINGS:
        raise OptionError(f"mix_epochized(rounding={rounding!r}): give one of {list(ROUNDINGS)}")
    items = _check_children(items, "mix_epochized", "repetitions")
    reps = tuple(_number(r, f"repetitions of {ds.name!r}") for ds, r in items)
    counts = _counts([ds for ds, _ in items], reps, rounding)
    zero = [ds.name for (ds, r), n in zip(items, counts) if n == 0]
    if zero:  # as mix refuses a zero weight: a child that is never read is a mistake, not a choice
        raise OptionError(
            f"mix_epochized: children {zero} round to 0 samples per meta-epoch (repetitions × length below "
            f"{'0.5' if rounding == 'half_up' else '1'}; counts {list(counts)}); raise their repetitions, or leave "
            f"them out"
        )
    children = tuple(ds for ds, _ in items)
    label = name or f"mix_epochized({','.join(c.name for c in children)})"
    return EpochizedMix(children, reps, counts, label, rounding)


def concat(datasets: Any, *, name: str | None = None) -> Concat:
    """Datasets one after another (what Energon does for val/test splits of a metadataset)."""
    children = tuple(datasets)
    if not children or not all(isinstance(c, (Source, Blend)) for c in children):
        raise OptionError(f"concat takes a non-empty list of datasets, got {datasets!r}")
    return Concat(children, name or f"concat({','.join(c.name for c in children)})")
