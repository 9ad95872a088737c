"""``datareel inspect STATE``: what a saved loader state says, and which topologies can resume it.

The state is found in a file by :func:`.state_files.load_state_file` (a JSON file, a ``torch.save`` file,
or a ``torch.distributed.checkpoint`` directory, read by :mod:`.state_dcp`; never an arbitrary unpickle
unless ``--trusted``) and checked (:func:`datareel.state.check_state`: size, depth, keys, types) before
anything in it is used; what is listed from it is bounded (sizes up to :data:`LISTED_UP_TO`).  The
names of those modules are importable from here, as before they were split out.

Which topologies resume it: ``(world_size W, micro_batch_size m)`` such that ``m·W`` divides the
global batch size ``G`` (every topology must) and the offset of the cursor into its global batch
(a state saved mid-batch continues in whole micro-steps), i.e. ``m·W`` divides
``gcd(G, cursor mod G)``.
"""

from __future__ import annotations

from typing import Any

from ..errors import StateMismatchError
from ..plan.schedule import BatchSchedule
from ..state import check_state, state_check
from .state_dcp import DCP_METADATA_GLOBALS, MAX_LIST_INDEX, UNREADABLE, read_dcp, read_dcp_metadata
from .state_files import MAX_JSON_BYTES, SEARCH_DEPTH, load_state_file

__all__ = [
    "DCP_METADATA_GLOBALS",
    "LISTED_UP_TO",
    "MAX_JSON_BYTES",
    "MAX_LIST_INDEX",
    "MAX_PAIRS",
    "PAIRS_SHOWN",
    "SEARCH_DEPTH",
    "UNREADABLE",
    "describe_state",
    "format_description",
    "load_state_file",
    "read_dcp",
    "read_dcp_metadata",
    "sources_at_cursor",
]

PAIRS_SHOWN = 12
"""World sizes listed in the text output (all listed are in ``--json``)."""
LISTED_UP_TO = 4096
"""World and micro-batch sizes listed go up to this (a state's global batch size may be huge)."""
MAX_PAIRS = 10_000
"""At most this many ``(world_size, micro_batch_size)`` pairs are listed."""


def describe_state(state: dict[str, Any]) -> dict[str, Any]:
    """What ``state`` says, as plain data (``--json``); a :class:`~datareel.errors.StateError` naming the field
    of a state that is not well formed (its ``check`` is reported, not required)."""
    check_state(state, binding=False)  # bounded, and every field read below of its type
    spec, cursor = state["spec"], state["cursor"]
    schedule = BatchSchedule.from_spec(spec["global_batch_size"])  # at most MAX_SCHEDULE_PIECES pieces
    b = schedule.batch_at(cursor)
    G, offset = schedule.size(b), cursor - schedule.start(b)
    try:
        expected = state_check(state)
    except (TypeError, ValueError):
        expected = None
    check = (
        "absent (written by datareel 0.1.0)"
        if "check" not in state
        else ("ok" if state["check"] == expected else "MISMATCH: cursor, pack or spec changed after it was written")
    )
    stage = spec.get("stage") if isinstance(spec.get("stage"), dict) else None
    packed = "packing" in spec or stage is not None  # the cursor counts packs (or a windowed stage's outputs)
    fits = schedule.common_divisor(b, offset)  # m·W must divide this
    pairs = _fitting_pairs(fits)
    dataset = spec.get("dataset") if isinstance(spec.get("dataset"), dict) else {}
    out: dict[str, Any] = {
        "format": state.get("format"),
        "version": state.get("version"),
        "check": check,
        "cursor": cursor,
        "unit": "packs" if "packing" in spec or (stage and stage.get("pack")) else "outputs" if stage else "samples",
        "global_batch_size": G,
        "schedule": None if isinstance(spec["global_batch_size"], int) else schedule.describe(),
        "global_batch": b,
        "into_global_batch": offset,
        "pack": state.get("pack"),
        "seed": spec.get("seed"),
        "shuffle": spec.get("shuffle"),
        "locality": spec.get("locality"),
        "dataset": {k: dataset.get(k) for k in ("name", "size", "digest")},
        "sources": dataset.get("sources"),
        "packing": spec.get("packing"),
        "stage": stage,
        "resume": {
            "step_must_divide": fits,
            "pairs": pairs,
            "all_listed": fits <= LISTED_UP_TO and len(pairs) < MAX_PAIRS,
        },
    }
    size = dataset.get("size")
    adopted = dataset.get("adopted") if isinstance(dataset.get("adopted"), dict) else None
    reel = cursor  # the dataset's own reel position
    if adopted is not None:  # a megatron.energon remainder first (datareel.blend.adopted), then the reel from skip
        out["adopted"] = {"samples": adopted.get("samples"), "skip": adopted.get("skip")}
        left, skip = adopted.get("samples"), adopted.get("skip")
        reel = None if not isinstance(left, int) or not isinstance(skip, int) or cursor < left else cursor - left + skip
    if reel is not None and not packed and not dataset.get("sources") and isinstance(size, int) and size > 0:
        out["epoch"], out["epoch_offset"] = divmod(reel, size)  # one dataset: the reel is its passes
    return out


def _fitting_pairs(fits: int) -> list[list[int]]:
    """``[world_size, micro_batch_size]`` with ``m·W`` dividing ``fits``, each up to :data:`LISTED_UP_TO`, at
    most :data:`MAX_PAIRS` of them (by world size, then micro-batch size): bounded for any ``fits``."""
    import numpy as np

    sizes = np.arange(1, min(fits, LISTED_UP_TO) + 1, dtype=np.int64)
    sizes = sizes[fits % sizes == 0]  # the divisors of fits up to LISTED_UP_TO
    pairs: list[list[int]] = []
    for w in sizes.tolist():
        ms = sizes[(fits // w) % sizes == 0]
        pairs += [[w, m] for m in ms[: MAX_PAIRS - len(pairs)].tolist()]
        if len(pairs) >= MAX_PAIRS:
            break
    return pairs


def format_description(d: dict[str, Any]) -> str:
    """The text ``datareel inspect`` prints."""
    lines = [
        f"format      {d['format']} version {d['version']}, check {d['check']}",
        f"cursor      {d['cursor']:,} {d['unit']} consumed by all ranks together",
        f"            = global batch {d['global_batch']:,} (global_batch_size {d['global_batch_size']:,})"
        + (f", {d['into_global_batch']:,} {d['unit']} into it" if d["into_global_batch"] else ", at its start"),
    ]
    if d.get("schedule"):
        lines.append(f"schedule    global batch sizes: {d['schedule']}")
    if d["pack"] is not None:
        lines.append(f"pack        next pack: input window {d['pack'][0]:,}, pack {d['pack'][1]:,} of that window")
    if d.get("adopted"):
        left = d["adopted"]["samples"]
        where = f"{d['cursor']:,} of them served" if d["cursor"] < left else "all served"
        lines.append(f"adopted     a megatron.energon epoch's remainder of {left:,} samples comes first: {where}")
    if "epoch" in d:
        lines.append(f"epoch       {d['epoch']:,}, sample {d['epoch_offset']:,} of {d['dataset']['size']:,} in it")
    blocks, order = d.get("locality"), ""
    if isinstance(blocks, dict):
        b, period, w = (blocks.get(k) for k in ("block", "period", "window"))
        order = f", block shuffle (block {b}, period {period}, window {w})"
    lines.append(f"seed        {d['seed']}, shuffle {d['shuffle']}{order}")
    ds = d["dataset"]
    size = "endless" if ds["size"] is None else f"{ds['size']:,} samples"
    lines.append(f"dataset     {ds['name']!r}: {size}, digest {ds['digest']}")
    for source in d["sources"] or []:
        lines.append(f"  source    {source}")
    if d["packing"]:
        lines.append(f"packing     {d['packing']}")
    if d["stage"]:
        lines.append(f"stage       {d['stage']}")
    if d.get("per_source"):
        from .verify import format_sources

        lines += format_sources(d["per_source"])
    fits = d["resume"]["step_must_divide"]
    some = "" if d["resume"].get("all_listed", True) else f" (sizes up to {LISTED_UP_TO:,} listed)"
    lines.append(f"resumes on  micro_batch_size × world_size dividing {fits:,}{some}:")
    by_world: dict[int, list[int]] = {}
    for w, m in d["resume"]["pairs"]:
        by_world.setdefault(w, []).append(m)
    for i, (w, ms) in enumerate(by_world.items()):
        if i == PAIRS_SHOWN:
            lines.append(f"            ... {len(by_world) - PAIRS_SHOWN} more world sizes (--json lists all)")
            break
        lines.append(f"            world_size {w:>5}: micro_batch_size {', '.join(map(str, ms))}")
    return "\n".join(lines)


def sources_at_cursor(
    state: dict[str, Any], dataset: Any, *, shown: str, trusted: bool = False, task_encoder: Any = None
) -> dict[str, Any]:
    """``inspect --dataset``: each source's samples read before the state's cursor. The state is restored
    into a loader on ``dataset`` (one rank reading the rest of the global batch at once: always fits), as
    ``verify`` does, and no key is listed; :class:`~datareel.errors.StateMismatchError` when it does not
    belong to ``dataset`` (``shown``: its name in the message). Nothing the state names is imported unless
    ``trusted``, or ``task_encoder`` names the encoder (see :mod:`.verify`)."""
    from .verify import verify_state

    fits = describe_state(state)["resume"]["step_must_divide"]
    verdict = verify_state(
        state, dataset, world_size=1, micro_batch_size=fits, show=0, trusted=trusted, task_encoder=task_encoder
    )
    if not verdict["ok"]:
        error = verdict["error"]
        fields = {name: (value["saved"], value["now"]) for name, value in error.get("fields", {}).items()}
        raise StateMismatchError(f"the state does not belong to {shown}: {error['type']}: {error['message']}", fields)
    return {k: verdict[k] for k in ("inputs_read", "inputs_before_window", "sources")}
