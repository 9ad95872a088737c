"""The fields of a saved spec: each one's type and bounds, and what it protects.

:data:`FIELDS` lists them in the order a state writes them.  Each :class:`Field` knows whether every state
records it, how to check a saved value (``check(spec)`` raises :class:`~datareel.errors.StateDamagedError`
naming the field, the value and the rule), and the guarantee a restore would lose if it differed
(``protects``, quoted when a restore is refused; :data:`GUARANTEES` maps each name to it, with ``version``).
A field a saved spec holds that is not listed here is compared as a value, and protects "the reel".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import INT64_LIMIT, StateDamagedError, brief
from ..plan.schedule import parse_spec

Check = Callable[[Any], bool]


def _is_int(low: int, high: int) -> Check:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _is_length(value: Any) -> bool:
    if isinstance(value, str):  # "index", "bytes", or a 0.1.0 state's qualified name
        return True
    return (
        isinstance(value, dict)
        and set(value) == {"function", "module", "lengths"}
        and all(isinstance(value[k], str) for k in ("function", "module"))
        and (value["lengths"] is None or isinstance(value["lengths"], str))
    )


def expect(parent: dict[str, Any], key: str, where: str, ok: Check, rule: str) -> None:
    """``parent[key]`` is there and ``ok``; else :class:`StateDamagedError` naming ``where.key`` and ``rule``."""
    if key not in parent:
        raise StateDamagedError(f"state {where} has no {key!r} ({rule}); the state is damaged")
    if not ok(parent[key]):
        raise StateDamagedError(f"state {where}.{key}={brief(parent[key])} must be {rule}; the state is damaged")


def _seed(spec: dict[str, Any]) -> None:
    expect(spec, "seed", "spec", _is_int(0, (1 << 64) - 1), "an integer in [0, 2^64)")


def _shuffle(spec: dict[str, Any]) -> None:
    expect(spec, "shuffle", "spec", _is_bool, "true or false")


def _global_batch_size(spec: dict[str, Any]) -> None:
    parse_spec(spec["global_batch_size"])  # checked, not resolved (a schedule of at most MAX_SCHEDULE_PIECES)


def _dataset(spec: dict[str, Any]) -> None:
    dataset = spec["dataset"]
    expect(spec, "dataset", "spec", _is_dict, "a dict (name, size, digest)")
    expect(dataset, "name", "spec.dataset", _is_str, "a string")
    expect(
        dataset, "size", "spec.dataset", lambda v: v is None or _is_int(0, INT64_LIMIT)(v), "null or an integer >= 0"
    )
    expect(dataset, "digest", "spec.dataset", _is_str, "a string")
    if "sources" in dataset:
        expect(dataset, "sources", "spec.dataset", lambda v: isinstance(v, list), "a list")
        for i, entry in enumerate(dataset["sources"]):
            if not (
                isinstance(entry, list | tuple)
                and len(entry) == 3
                and isinstance(entry[0], str)
                and (entry[1] is None or isinstance(entry[1], int | float) and not isinstance(entry[1], bool))
                and isinstance(entry[2], str)
            ):
                raise StateDamagedError(
                    f"state spec.dataset.sources[{i}]={brief(entry)} must be [name, weight, repetitions or null, "
                    f"digest]; the state is damaged"
                )


def _packing(spec: dict[str, Any]) -> None:
    packing = spec["packing"]
    expect(spec, "packing", "spec", _is_dict, "a dict")
    for key in ("max_length", "window"):
        expect(packing, key, "spec.packing", _is_int(1, INT64_LIMIT), "a positive integer")
    expect(packing, "over_length", "spec.packing", _is_str, "a string")
    expect(packing, "length", "spec.packing", _is_length, '"index", "bytes" or {"function", "module", "lengths"}')


def _locality(spec: dict[str, Any]) -> None:
    value = spec["locality"]
    expect(spec, "locality", "spec", _is_dict, "a dict (the block shuffle's block, period and window)")
    for key, high in (("block", 1 << 20), ("period", 1 << 40), ("window", 1 << 10)):
        expect(value, key, "spec.locality", _is_int(1, high), f"an integer in [1, {high}]")


def _stage(spec: dict[str, Any]) -> None:
    stage = spec["stage"]
    expect(spec, "stage", "spec", _is_dict, "a dict")
    expect(stage, "window", "spec.stage", _is_int(1, INT64_LIMIT), "a positive integer")
    # the windowed stage's own fields; a stage of a user's (datareel.reel.Stage) records window and its own
    if "pack" in stage or "encoder" in stage:
        expect(stage, "pack", "spec.stage", _is_bool, "true or false")
        expect(stage, "encoder", "spec.stage", lambda v: v is None or isinstance(v, str), "null or 'module.Class'")


@dataclass(frozen=True)
class Field:
    """One field of the saved spec: its name, whether every state records it, its check, what it protects."""

    name: str
    required: bool
    check: Callable[[dict[str, Any]], None]
    protects: str


FIELDS: tuple[Field, ...] = (
    Field(
        "seed",
        True,
        _seed,
        "the order of the reel: with another seed the resumed run would repeat some samples and skip others",
    ),
    Field(
        "shuffle", True, _shuffle, "the order of the reel: switching shuffle would repeat some samples and skip others"
    ),
    Field(
        "global_batch_size",
        True,
        _global_batch_size,
        "the global batches: with another global batch size (or schedule) they would differ from "
        "the uninterrupted run's. To change it on purpose, restore at a global-batch boundary with "
        "allow_batch_size_change=True (load_state_dict(state, allow_batch_size_change=True), restore_state_global(..., "
        "allow_batch_size_change=True), or get_train_dataset(..., allow_batch_size_change=True) in datareel.energon): "
        "the same samples follow, cut into the new sizes",
    ),
    Field(
        "dataset",
        True,
        _dataset,
        "what each reel position reads: another dataset would map the cursor to other samples. Compared: "
        "each source's name and size and the tree's structure (kinds, weights or repetitions, subsets, splits, "
        "shuffle settings); for a prepared WebDataset its split, shard list, per-shard counts, excluded keys and "
        "sample type; for JSONL its byte size; for from_sequence a digest ('content') of 32 items read at fixed "
        "positions spread evenly over it. Not seen: bytes changed inside a shard or a JSONL file of the same size "
        "and counts, and items of a sequence changed only at positions that are not sampled",
    ),
    Field(
        "locality",
        False,
        _locality,
        "the order of the reel: the block shuffle (datareel.BlockShuffle) with another block, period or window, "
        "or the full shuffle instead of it, would put other samples at the same positions, repeating some and "
        "skipping others. To resume, pass the saved block, period and window (BlockShuffle(block=..., "
        "period=..., window=...)), or the full shuffle where the state has no 'locality'",
    ),
    Field(
        "packing",
        False,
        _packing,
        "which samples each pack holds: other packing options or lengths would plan other packs, so the "
        "cursor's (window, offset) would point at packs the saved run never made",
    ),
    Field(
        "stage",
        False,
        _stage,
        "what each window of the windowed stage yields: another window, packing mode (pack) or encoder class "
        "would plan other outputs (or packs) from the same inputs, so the cursor's (window, offset) would point at "
        "outputs the saved run never made (the encoder class alone may change at a window's start, pack=[w, 0])",
    ),
)
"""The spec's fields, in the order a state writes them."""

BY_NAME: dict[str, Field] = {field.name: field for field in FIELDS}

VERSION_PROTECTS = "the state layout this datareel reads; an unknown layout cannot be interpreted safely"

GUARANTEES: dict[str, str] = {
    "version": VERSION_PROTECTS,
    **{name: BY_NAME[name].protects for name in ("seed", "shuffle", "dataset", "global_batch_size", "packing")},
    "locality": BY_NAME["locality"].protects,
    "stage": BY_NAME["stage"].protects,
}
"""What each spec field (and the state's ``version``) protects; quoted in StateMismatchError messages."""


def protects(name: str) -> str:
    """What field ``name`` protects (a field this release does not know: "the reel")."""
    return GUARANTEES.get(name, "the reel")


def check_fields(spec: dict[str, Any]) -> None:
    """The spec's fields this datareel reads, of their documented types (others are compared, as values):
    first that every state's fields are there, then each field's check, in :data:`FIELDS` order."""
    for field in FIELDS:
        if field.required and field.name not in spec:
            raise StateDamagedError(
                f"state spec has no {field.name!r}; every datareel state records it: the state is damaged"
            )
    for field in FIELDS:
        if field.name in spec:
            field.check(spec)
