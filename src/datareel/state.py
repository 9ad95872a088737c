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
                    "sources": [[name, weight or repetitions, 6-hex digest], ...]},  # blends only, if short
        "packing": {"max_length": int, "window": int, "over_length": str,            # with packing only
                    "length": "index" | "bytes" | {"function": qualname, "module": str, "lengths": 16-hex digest}}},
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
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from .errors import DatareelError, StateMismatchError
from .reel.cursor import Cursor

log = logging.getLogger("datareel")

FORMAT = "datareel.loader"
VERSION = 1

# What each spec field protects; quoted in StateMismatchError messages.
GUARANTEES: dict[str, str] = {
    "version": "the state layout this datareel reads; an unknown layout cannot be interpreted safely",
    "seed": "the order of the reel: with another seed the resumed run would repeat some samples and skip others",
    "shuffle": "the order of the reel: switching shuffle would repeat some samples and skip others",
    "dataset": "what each reel position reads: another dataset (name, size or content) would map the cursor to "
    "other samples",
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


def read_state(state: Any, spec: dict[str, Any]) -> Cursor:
    """Check a saved state against the current spec and return its cursor.

    Raises :class:`StateMismatchError` naming every differing field.
    """
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
        raise DatareelError(
            f"this is not a datareel loader state (format={state.get('format')!r}, expected "
            f"{FORMAT!r}; keys {sorted(map(str, state))[:8]}); pass the dict returned by loader.state_dict()"
        )
    if state.get("version") != VERSION:
        raise StateMismatchError(
            f"state version {state.get('version')!r} cannot be restored by this datareel (reads "
            f"version {VERSION}): {GUARANTEES['version']}; restore it with the datareel release "
            f"that wrote it",
            {"version": (state.get("version"), VERSION)},
        )
    cursor = Cursor.from_state(state)
    saved = state.get("spec")
    if not isinstance(saved, dict):
        raise DatareelError(f"state spec={saved!r} must be a dict; the state is damaged")
    _check_binding(state)
    saved = _upgrade(saved, spec)
    differences = {
        field: (saved.get(field), spec.get(field))
        for field in sorted(set(saved) | set(spec), key=str)
        if saved.get(field) != spec.get(field)
    }
    if differences:
        lines = [
            f"  - {field}: saved {old!r}, now {new!r} — protects {GUARANTEES.get(field, 'the reel')}"
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
    except (TypeError, ValueError) as exc:
        raise DatareelError(f"state spec cannot be read as JSON ({exc}); the state is damaged") from None
    if saved != expected:
        raise StateMismatchError(
            f"state check={saved!r} does not match its cursor={state.get('cursor')!r}, pack={state.get('pack')!r} "
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
