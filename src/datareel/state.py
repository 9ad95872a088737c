"""The loader state: a cursor into the reel plus the fingerprint of the spec it belongs to.

Format, version 1 (JSON-serialisable, the same on every rank, a few hundred bytes)::

    {"format": "datareel.loader",          # always this string
     "version": 1,                         # the layout of this dict
     "cursor": P,                          # positions (packs, with packing) consumed by all ranks together
     "spec": {
        "seed": int, "shuffle": bool,
        "global_batch_size": int | schedule,  # int: constant; else {"ramp_up": [start, increment, samples, final]}
                                              # or {"pieces": [[from_batch, G], ...]}, wrapped as
                                              # {"from": [batch, position], "rule": ...} after a change
                                              # (see datareel.plan.schedule)
        "dataset": {"name": str,           # the dataset's name, cut to 80 characters
                    "size": int | null,    # samples (one pass; null: an endless weighted mix)
                    "digest": str,         # 16 hex digits over the whole dataset tree's description
                    "sources": [[name, weight | repetitions | null, 6-hex digest], ...],  # blends, if short
                    "content": str},       # with from_sequence sources only: 16 hex digits over sampled items
        "packing": {"max_length": int, "window": int, "over_length": str,            # with packing only
                    "length": "index" | "bytes" | {"function": qualname, "module": str, "lengths": 16-hex digest}},
        "stage": {"window": int, "pack": bool, "encoder": "module.Class" | null}},   # a windowed stage only
     "pack": [window, offset],             # with packing only: the input window of the next pack, and its number
     "check": str}                         # 16 hex digits binding cursor, pack and spec (see below)

The spec records everything that, if changed, would make the cursor point into
another reel or cut other global batches (invariant I6); every field is quoted
with what it protects (:data:`GUARANTEES`) when a restore is refused.  The key
order above is the order written; ``tests/data/golden_states.json`` pins the bytes.

``check`` is a digest of ``cursor``, ``pack`` and ``spec`` together.  A packed
state's ``(window, offset)`` cannot be checked against its ``cursor`` without
planning every window before it (restores stay O(1)), so a state spliced from
two checkpoints, or hand-edited, would silently re-serve or skip packs; the
digest refuses it instead.  States written before the field existed (datareel
0.1.0) have no ``check`` and are read as before; older readers ignore it.

A state comes from a file, so it is checked before anything in it is used (:func:`check_state`): a tree
of JSON values (dicts with string keys, lists, strings, numbers, booleans, null) at most
:data:`MAX_DEPTH` deep, of at most :data:`MAX_NODES` values, strings of at most :data:`MAX_STRING`
characters, integers below ``2^64`` and finite floats; the top-level keys above and no others; each
field of the spec this datareel reads of the type documented above; then its ``check``.  Only then are
its schedule resolved or its fields compared, and every malformed state is a :class:`DatareelError`
naming the field.  The walk is iterative and stops at the first value past a bound.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from typing import Any

from .errors import INT64_LIMIT, DatareelError, StateMismatchError
from .plan.schedule import MAX_SCHEDULE_PIECES, brief, parse_spec
from .reel.cursor import Cursor

log = logging.getLogger("datareel")

FORMAT = "datareel.loader"
VERSION = 1
KEYS = ("format", "version", "cursor", "spec", "pack", "check")
"""Every top-level key a state may have (``pack`` with packing or a windowed stage; ``check`` since 0.2)."""

MAX_DEPTH = 16
"""Containers a state may nest (a schedule's pieces are the deepest written: 7)."""
MAX_NODES = 4 * MAX_SCHEDULE_PIECES + 10_000
"""Values a state may hold (a piecewise schedule of the most pieces, three values each, and the rest)."""
MAX_STRING = 4096
"""Characters a string (or key) of a state may hold (names are cut to 80; module paths are short)."""

# What each spec field protects; quoted in StateMismatchError messages.
GUARANTEES: dict[str, str] = {
    "version": "the state layout this datareel reads; an unknown layout cannot be interpreted safely",
    "seed": "the order of the reel: with another seed the resumed run would repeat some samples and skip others",
    "shuffle": "the order of the reel: switching shuffle would repeat some samples and skip others",
    "dataset": "what each reel position reads: another dataset would map the cursor to other samples. Compared: "
    "each source's name and size and the tree's structure (kinds, weights or repetitions, subsets, splits, "
    "shuffle settings); for a prepared WebDataset its split, shard list, per-shard counts, excluded keys and "
    "sample type; for JSONL its byte size; for from_sequence a digest ('content') of 32 items read at fixed "
    "positions spread evenly over it. Not seen: bytes changed inside a shard or a JSONL file of the same size "
    "and counts, and items of a sequence changed only at positions that are not sampled",
    "global_batch_size": "the global batches: with another global batch size (or schedule) they would differ from "
    "the uninterrupted run's. To change it on purpose, restore at a global-batch boundary with "
    "allow_batch_size_change=True (load_state_dict(state, allow_batch_size_change=True), restore_state_global(..., "
    "allow_batch_size_change=True), or get_train_dataset(..., allow_batch_size_change=True) in datareel.energon): "
    "the same samples follow, cut into the new sizes",
    "packing": "which samples each pack holds: other packing options or lengths would plan other packs, so the "
    "cursor's (window, offset) would point at packs the saved run never made",
}


def make_state(cursor: Cursor, spec: dict[str, Any]) -> dict[str, Any]:
    fields = cursor.state_fields()
    state = {"format": FORMAT, "version": VERSION, "cursor": int(fields.pop("cursor")), "spec": spec, **fields}
    return {**state, "check": state_check(state)}


def state_check(state: dict[str, Any]) -> str:
    """16 hex digits over a state's ``cursor``, ``pack`` and ``spec`` (JSON with sorted keys)."""
    bound = [state.get("cursor"), state.get("pack"), state.get("spec")]
    text = json.dumps(bound, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def check_state(state: Any, *, binding: bool = True) -> dict[str, Any]:
    """``state`` if it is a well-formed datareel state (see the module doc): bounded, of the documented keys
    and types, and (``binding``) with a ``check`` that matches; else :class:`DatareelError` (a
    :class:`StateMismatchError` for a version or check that does not match) naming the field. Nothing in
    the state is resolved or compared before the bounds are checked: the work is O(its size)."""
    if _looks_like_energon(state):
        raise DatareelError(
            "this is a checkpoint written by Megatron-Energon's own loader, not by datareel: it records each "
            "worker's shuffle buffers and shard positions, which do not determine a position in one global "
            "sample order, so it cannot be converted. Start this run's data from the beginning (or from a "
            "datareel checkpoint); from then on datareel's checkpoints restore on any topology"
        )
    if not isinstance(state, dict):
        raise DatareelError(f"a datareel state is a dict (from loader.state_dict()), got {type(state).__name__}")
    if state.get("format") != FORMAT:
        keys = sorted(str(k)[:40] for k in itertools.islice(state, 64))[:8]
        raise DatareelError(
            f"this is not a datareel loader state (format={brief(state.get('format'))}, expected "
            f"{FORMAT!r}; keys {keys}); pass the dict returned by loader.state_dict()"
        )
    version = state.get("version")
    if type(version) is not int or version != VERSION:
        raise StateMismatchError(
            f"state version {brief(version)} cannot be restored by this datareel (reads "
            f"version {VERSION}): {GUARANTEES['version']}; restore it with the datareel release "
            f"that wrote it",
            {"version": (version, VERSION)},
        )
    _check_bounds(state)
    unknown = [key for key in state if key not in KEYS]
    if unknown:
        raise DatareelError(
            f"state key {unknown[0]!r} is not one of a datareel state's keys {list(KEYS)}: the state was edited, "
            f"or written by another program; restore the state exactly as loader.state_dict() returned it"
        )
    Cursor.from_state(state)
    if "check" in state and not isinstance(state["check"], str):
        raise DatareelError(
            f"state check={brief(state['check'])} must be a string of 16 hex digits; the state is damaged"
        )
    spec = state.get("spec")
    if not isinstance(spec, dict):
        raise DatareelError(f"state spec={brief(spec)} must be a dict; the state is damaged")
    if binding:
        _check_binding(state)
    _check_spec(spec)
    packed = "packing" in spec or "stage" in spec
    if packed != ("pack" in state):
        raise DatareelError(
            f"state {'has no' if packed else 'has a'} pack=[window, offset] but its spec "
            f"{'packs' if packed else 'neither packs nor has a windowed stage'}: a packed (or windowed) state "
            f"has both, any other neither; the state is damaged"
        )
    return state


def _check_bounds(state: dict[str, Any]) -> None:
    """Refuse a state that is not a bounded tree of JSON values (the limits in the module doc), naming the
    first value past a bound; iterative, and it stops there (so O(MAX_NODES) at most)."""
    stack: list[tuple[Any, str, int]] = [(state, "", 0)]
    nodes = 0
    while stack:
        value, where, depth = stack.pop()
        nodes += 1
        name = where or "the state"
        if nodes > MAX_NODES:
            raise DatareelError(
                f"state holds more than {MAX_NODES:,} values (at {name}); a datareel state is small (its size does "
                f"not grow with the dataset or the run): the file is damaged or not a datareel state"
            )
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            if not -(1 << 64) < value < 1 << 64:
                raise DatareelError(f"state {name}={brief(value)} is beyond 64 bits; the state is damaged")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise DatareelError(f"state {name}={value} is not a finite number; the state is damaged")
        elif isinstance(value, str):
            if len(value) > MAX_STRING:
                raise DatareelError(
                    f"state {name} is a string of {len(value):,} characters (at most {MAX_STRING:,}); the state "
                    f"is damaged"
                )
        elif isinstance(value, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise DatareelError(
                    f"state {name} is nested deeper than {MAX_DEPTH} levels; a datareel state is shallow: the "
                    f"state is damaged"
                )
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str) or len(key) > MAX_STRING:
                        raise DatareelError(
                            f"state {name} has the key {brief(key)}: keys are strings (JSON); the state is damaged"
                        )
                    stack.append((item, f"{where}.{key}" if where else key, depth + 1))
            else:
                if len(value) > MAX_NODES:
                    raise DatareelError(f"state {name} is a list of {len(value):,} values; the state is damaged")
                stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        else:
            raise DatareelError(
                f"state {name} is a {type(value).__name__}: a state holds JSON values only (dicts, lists, "
                f"strings, numbers, booleans, null); the state is damaged"
            )


def _check_spec(spec: dict[str, Any]) -> None:
    """The spec's fields this datareel reads, of their documented types (others are compared, as values)."""
    for key in ("seed", "shuffle", "global_batch_size", "dataset"):
        if key not in spec:
            raise DatareelError(f"state spec has no {key!r}; every datareel state records it: the state is damaged")
    _expect(spec, "seed", "spec", _is_int(0, (1 << 64) - 1), "an integer in [0, 2^64)")
    _expect(spec, "shuffle", "spec", lambda v: isinstance(v, bool), "true or false")
    parse_spec(spec["global_batch_size"])  # checked, not resolved (a schedule of at most MAX_SCHEDULE_PIECES)
    dataset = spec["dataset"]
    _expect(spec, "dataset", "spec", lambda v: isinstance(v, dict), "a dict (name, size, digest)")
    _expect(dataset, "name", "spec.dataset", lambda v: isinstance(v, str), "a string")
    _expect(
        dataset, "size", "spec.dataset", lambda v: v is None or _is_int(0, INT64_LIMIT)(v), "null or an integer >= 0"
    )
    _expect(dataset, "digest", "spec.dataset", lambda v: isinstance(v, str), "a string")
    if "sources" in dataset:
        _expect(dataset, "sources", "spec.dataset", lambda v: isinstance(v, list), "a list")
        for i, entry in enumerate(dataset["sources"]):
            if not (
                isinstance(entry, list | tuple)
                and len(entry) == 3
                and isinstance(entry[0], str)
                and (entry[1] is None or isinstance(entry[1], int | float) and not isinstance(entry[1], bool))
                and isinstance(entry[2], str)
            ):
                raise DatareelError(
                    f"state spec.dataset.sources[{i}]={brief(entry)} must be [name, weight, repetitions or null, "
                    f"digest]; the state is damaged"
                )
    if "packing" in spec:
        packing = spec["packing"]
        _expect(spec, "packing", "spec", lambda v: isinstance(v, dict), "a dict")
        for key in ("max_length", "window"):
            _expect(packing, key, "spec.packing", _is_int(1, INT64_LIMIT), "a positive integer")
        _expect(packing, "over_length", "spec.packing", lambda v: isinstance(v, str), "a string")
        _expect(packing, "length", "spec.packing", _is_length, '"index", "bytes" or {"function", "module", "lengths"}')
    if "stage" in spec:
        stage = spec["stage"]
        _expect(spec, "stage", "spec", lambda v: isinstance(v, dict), "a dict")
        _expect(stage, "window", "spec.stage", _is_int(1, INT64_LIMIT), "a positive integer")
        _expect(stage, "pack", "spec.stage", lambda v: isinstance(v, bool), "true or false")
        _expect(stage, "encoder", "spec.stage", lambda v: v is None or isinstance(v, str), "null or 'module.Class'")


def _is_int(low: int, high: int) -> Any:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _is_length(value: Any) -> bool:
    if isinstance(value, str):  # "index", "bytes", or a 0.1.0 state's qualified name
        return True
    return (
        isinstance(value, dict)
        and set(value) == {"function", "module", "lengths"}
        and all(isinstance(value[k], str) for k in ("function", "module"))
        and (value["lengths"] is None or isinstance(value["lengths"], str))
    )


def _expect(parent: dict[str, Any], key: str, where: str, ok: Any, rule: str) -> None:
    if key not in parent:
        raise DatareelError(f"state {where} has no {key!r} ({rule}); the state is damaged")
    if not ok(parent[key]):
        raise DatareelError(f"state {where}.{key}={brief(parent[key])} must be {rule}; the state is damaged")


def read_state(state: Any, spec: dict[str, Any]) -> Cursor:
    """Check a saved state (:func:`check_state`) against the current spec and return its cursor.

    Raises :class:`StateMismatchError` naming every differing field.
    """
    check_state(state)
    cursor = Cursor.from_state(state)
    saved = _upgrade(state["spec"], spec)
    differences = {
        field: (saved.get(field), spec.get(field))
        for field in sorted(set(saved) | set(spec), key=str)
        if saved.get(field) != spec.get(field)
    }
    if differences:
        lines = [
            f"  - {field}: saved {brief(old, 300)}, now {brief(new, 300)} — protects "
            f"{GUARANTEES.get(field, 'the reel')}"
            for field, (old, new) in differences.items()
        ]
        if "dataset" in differences:
            lines += [f"      {line}" for line in dataset_changes(*differences["dataset"])]
        raise StateMismatchError(
            "the state does not belong to this loader; restoring it would break datareel's "
            "exactly-once and identical-batches guarantees. Differing fields:\n"
            + "\n".join(lines)
            + "\nBuild the loader with the saved values, or start without restoring.",
            differences,
        )
    return cursor


def _check_binding(state: dict[str, Any]) -> None:
    """Refuse a state whose ``cursor``, ``pack`` or ``spec`` changed after it was written (see ``check``)."""
    if "check" not in state:
        return  # written by datareel 0.1.0, before the field existed
    saved = state["check"]
    try:
        expected = state_check(state)
    except (TypeError, ValueError, RecursionError) as exc:
        raise DatareelError(f"state spec cannot be read as JSON ({exc}); the state is damaged") from None
    if saved != expected:
        raise StateMismatchError(
            f"state check={brief(saved)} does not match its cursor={state.get('cursor')!r}, "
            f"pack={brief(state.get('pack'))} "
            f"and spec (expected {expected!r}): the state was edited, or spliced from two checkpoints, after "
            f"the loader wrote it. Restoring it would re-serve or skip samples; restore the state exactly as "
            f"loader.state_dict() returned it",
            {"check": (saved, expected)},
        )


def _upgrade(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """Read specs written by older releases of format version 1.

    datareel 0.1.0 named a packing length function by its bare ``__qualname__``; today it is
    ``{"function": qualname, "module": module, "lengths": digest}``.  Such a state restores when
    the qualified names are equal (as 0.1.0 required) and every other packing option is too, with
    a warning that its lengths could not be verified.
    """
    saved = _upgrade_content(saved, current)
    old, new = saved.get("packing"), current.get("packing")
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return saved
    length, now = old.get("length"), new.get("length")
    if isinstance(length, str) and length not in ("index", "bytes") and isinstance(now, dict):
        if now.get("function") == length and {**old, "length": now} == new:
            log.warning(
                "this checkpoint predates length-function digests: packing length %r is accepted by "
                "name, but datareel cannot verify that the function still returns the same lengths",
                length,
            )
            return {**saved, "packing": new}
    return saved


def _upgrade_content(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """States written before ``from_sequence`` sources had a content digest (datareel 0.1.0 and 0.2) have
    no ``dataset.content``: such a state restores when every other field of its dataset fingerprint is
    equal (as those releases required), with a warning that the items could not be verified."""
    old, new = saved.get("dataset"), current.get("dataset")
    if not (isinstance(old, dict) and isinstance(new, dict)) or "content" in old or "content" not in new:
        return saved
    if {**old, "content": new["content"]} != new:
        return saved
    log.warning(
        "this checkpoint predates content digests of from_sequence datasets: dataset %r is accepted by name "
        "and size, but datareel cannot verify that the sequence still holds the same items",
        new.get("name"),
    )
    return {**saved, "dataset": new}


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


def _looks_like_energon(state: Any) -> bool:
    """Energon's states: ``SavableDataLoaderState`` objects (or lists of them, or their dict form)."""
    items = state if isinstance(state, (list, tuple)) else [state]
    for item in items:
        if type(item).__module__.startswith("megatron.energon") or "SavableDataLoaderState" in type(item).__name__:
            return True
        if isinstance(item, dict) and ("worker_states" in item or "micro_batch_size" in item and "format" not in item):
            return True
    return False
