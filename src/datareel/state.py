"""The loader state: a cursor into the reel plus the fingerprint of the spec it belongs to.

Format (JSON-serialisable, the same on every rank, a few hundred bytes)::

    {"format": "datareel.loader", "version": 1, "cursor": P,
     "spec": {"seed": ..., "shuffle": ..., "global_batch_size": ...,
              "dataset": {"name": ..., "size": ..., "digest": ...}}}

``cursor`` is the number of reel positions consumed by all ranks together; the
spec records everything that, if changed, would make ``P`` point into another
reel or cut other global batches (invariant I6).
"""

from __future__ import annotations

from typing import Any

from .errors import DatareelError, StateMismatchError

FORMAT = "datareel.loader"
VERSION = 1

# What each spec field protects; quoted in StateMismatchError messages.
GUARANTEES: dict[str, str] = {
    "version": "the state layout this datareel reads; an unknown layout cannot be interpreted safely",
    "seed": "the order of the reel: with another seed the resumed run would repeat some samples and skip others",
    "shuffle": "the order of the reel: switching shuffle would repeat some samples and skip others",
    "dataset": "what each reel position reads: another dataset (name, size or content) would map the cursor to other samples",
    "global_batch_size": "the global batches: with another global batch size they would differ from the uninterrupted run's",
}


def make_state(cursor: int, spec: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "cursor": int(cursor), "spec": spec}


def read_state(state: Any, spec: dict[str, Any]) -> int:
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
        raise DatareelError(
            f"a datareel state is a dict (from loader.state_dict()), got {type(state).__name__}"
        )
    if state.get("format") != FORMAT:
        raise DatareelError(
            f"this is not a datareel loader state (format={state.get('format')!r}, expected "
            f"{FORMAT!r}; keys {sorted(state)[:8]}); pass the dict returned by loader.state_dict()"
        )
    if state.get("version") != VERSION:
        raise StateMismatchError(
            f"state version {state.get('version')!r} cannot be restored by this datareel (reads "
            f"version {VERSION}): {GUARANTEES['version']}; restore it with the datareel release "
            f"that wrote it",
            {"version": (state.get("version"), VERSION)},
        )
    cursor = state.get("cursor")
    if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
        raise DatareelError(f"state cursor={cursor!r} must be a non-negative integer")
    saved = state.get("spec")
    if not isinstance(saved, dict):
        raise DatareelError(f"state spec={saved!r} must be a dict; the state is damaged")
    differences = {
        field: (saved.get(field), spec.get(field))
        for field in sorted(set(saved) | set(spec))
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
