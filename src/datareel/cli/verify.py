"""``datareel verify STATE DATASET --world-size W --micro-batch-size m``: will this checkpoint resume there?

The loader is built as the job would build it: the dataset given, and everything else the state's spec
records (seed, shuffle, global batch size, ``datareel.Packing`` with ``"index"`` / ``"bytes"`` lengths or
the length function it names, a windowed stage with the task encoder class it names), each overridable.
Then the state is restored with ``Loader.load_state_dict`` itself, so the verdict is the job's: OK with the
keys of the next global batches as each rank will read them, or the exact error the job would hit.
Nothing is read but the keys of the samples shown (and, for a windowed stage, the windows it plans), and
at most :data:`LISTED_KEYS` keys are listed (a state's global batch size may be huge).

Nothing a state names is imported unless the caller says so: the task encoder is the one given
(``task_encoder``, ``--task-encoder MODULE:CLASS``), and the encoder class or length function the state
names is imported only with ``trusted=True`` (``--trusted``): importing runs the module's code, and a
state is data from a file.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import numpy as np

from ..errors import DatareelError, OptionError, StateDamagedError, StateMismatchError
from ..loader import Loader
from ..plan.blocks import BlockShuffle
from ..plan.nodes import consumed
from ..plan.schedule import BatchSchedule
from ..reel.base import Descriptor
from ..reel.packed import Packing
from ..reel.windowed import WindowedStage
from ..state import check_state

LISTED_KEYS = 100_000
"""Keys listed by a verdict at most, over all ranks and global batches (then ``truncated``)."""

BUILT_FROM_SPEC = ("seed", "shuffle", "locality", "global_batch_size", "packing", "stage")


def _import(qualified: str, what: str) -> Any:
    """``module:Name`` or ``module.Name`` (nested names too; the current directory is searched) -> the object."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module, sep, name = qualified.partition(":")
    parts = [module, name] if sep else qualified.split(".")
    splits = [1] if sep else range(len(parts) - 1, 0, -1)  # longest importable module first
    problem: Exception | None = None
    for cut in splits:
        head, rest = (parts[0], parts[1].split(".")) if sep else (".".join(parts[:cut]), parts[cut:])
        try:
            obj: Any = importlib.import_module(head)
            for attribute in rest:
                obj = getattr(obj, attribute)
            return obj
        except (ImportError, AttributeError, ValueError) as exc:
            problem = exc
    hint = " (a function or class of the job's own script, __main__, cannot be imported: move it to a module)"
    raise OptionError(
        f"{what} {qualified!r} cannot be imported ({problem}); run from the job's directory"
        + (hint if qualified.startswith("__main__") else "")
    )


def loader_options(
    spec: dict[str, Any], *, task_encoder: Any = None, trusted: bool = False, stage_given: bool = False
) -> dict[str, Any]:
    """``Loader`` keyword arguments rebuilt from a state's spec. ``task_encoder``: the job's encoder (an object,
    or ``module:Class`` / ``module:factory`` to import); ``trusted``: import the encoder class or the length
    function the state names (:class:`DatareelError` naming them and the consent otherwise)."""
    options: dict[str, Any] = {k: spec[k] for k in ("seed", "shuffle") if k in spec}
    if isinstance(spec.get("locality"), dict):  # the block shuffle, with the period the state recorded
        options["shuffle"] = BlockShuffle.from_json(spec["locality"])
    if "global_batch_size" in spec:  # an int, or a schedule (with where a change anchored it)
        options["global_batch_size"] = BatchSchedule.from_spec(spec["global_batch_size"])
    packing = spec.get("packing")
    if isinstance(packing, dict):
        length = packing["length"]
        if isinstance(length, dict):
            named = f"{length.get('module')}:{length.get('function')}"
            if not trusted:
                raise OptionError(
                    f"the state's packing lengths come from the function {named}; rebuilding the loader means "
                    f"importing it, which runs code of module {length.get('module')!r}, and datareel imports "
                    f"nothing a state names unless told to. For a state you trust, pass --trusted "
                    f"(trusted=True); run from the job's directory"
                )
            length = _import(named, "the length function")
        options["packing"] = Packing.from_json(packing, length=None if isinstance(length, str) else length)
    stage = spec.get("stage")
    if isinstance(stage, dict) and stage_given:
        stage = None  # the caller's own stage object rebuilds it (a restore still compares its spec)
    elif isinstance(stage, dict) and "pack" not in stage:  # a user's stage: only its own code can rebuild it
        raise OptionError(
            f"the state was saved by a stage of the job's own (spec.stage={stage}); datareel cannot rebuild it "
            f"from the state: call datareel.cli.verify.verify_state(state, dataset, ..., stage=YourStage(...)) "
            f"from Python with the job's stage object"
        )
    elif isinstance(stage, dict):
        options["stage"] = WindowedStage.from_json(stage, background=False)
    named = (stage or {}).get("encoder")
    if task_encoder is not None and not isinstance(task_encoder, str):
        options["task_encoder"] = task_encoder  # the caller's own object
    elif task_encoder is not None or named:
        if task_encoder is None and not trusted:
            raise OptionError(
                f"the state's windowed stage ran the task encoder {named}; rebuilding the loader means importing "
                f"it, which runs code of its module, and datareel imports nothing a state names unless told to. "
                f"Name the job's encoder with --task-encoder MODULE:CLASS (task_encoder=...), or pass --trusted "
                f"(trusted=True) to import the one the state names; run from the job's directory"
            )
        qualified = task_encoder or named
        cls = _import(qualified, "the task encoder")
        try:
            options["task_encoder"] = cls() if isinstance(cls, type) else cls
        except TypeError as exc:
            raise OptionError(
                f"the task encoder {qualified} cannot be made without arguments ({exc}); give --task-encoder "
                f"module:factory, a function returning the job's encoder"
            ) from None
    elif isinstance(packing, dict):
        options["task_encoder"] = _KeysOnly()  # packing needs pack_selected_samples; verify never makes batches
    return options


class _KeysOnly:
    """Stands in for the job's encoder where the reel does not depend on it (length-planned packing)."""

    def pack_selected_samples(self, samples: list[Any]) -> list[Any]:
        return samples

    def truncate_sample(self, sample: Any, max_length: int) -> Any:  # Packing(over_length="truncate")
        return sample


def verify_state(
    state: dict[str, Any],
    dataset: Any,
    *,
    world_size: int,
    micro_batch_size: int,
    num_workers: int = 0,
    show: int = 2,
    repeat: bool = True,
    task_encoder: Any = None,
    trusted: bool = False,
    allow_batch_size_change: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """The verdict as plain data: ``ok``, and either ``next`` (``show`` global batches, ``0`` for none: per
    rank, the keys of its samples, or of each pack's samples, in the order it reads them; ``truncated`` when
    :data:`LISTED_KEYS` cut the list short) or ``error`` (type, message, and for a spec mismatch the
    differing ``fields``, saved and now).  ``allow_batch_size_change`` restores as the job would with
    ``load_state_dict(state, allow_batch_size_change=True)``; ``task_encoder`` and ``trusted``: see the
    module doc (nothing the state names is imported without ``trusted``)."""
    try:
        check_state(state)  # what load_state_dict checks first: a damaged state is refused before it is read
    except DatareelError as exc:
        return {"ok": False, "error": _error(exc)}
    try:
        options = loader_options(
            state["spec"], task_encoder=task_encoder, trusted=trusted, stage_given=overrides.get("stage") is not None
        )
    except (KeyError, TypeError) as exc:
        raise StateDamagedError(
            f"the state's spec is damaged: its packing or stage entry lacks or mistypes {exc}; it cannot be "
            f"rebuilt (inspect it with `datareel inspect`)"
        ) from None
    options.update({k: v for k, v in overrides.items() if v is not None})
    try:
        loader = Loader(
            dataset,
            world_size=world_size,
            rank=0,
            micro_batch_size=micro_batch_size,
            num_workers=num_workers,
            repeat=repeat,
            **options,
        )
        loader.load_state_dict(state, allow_batch_size_change=allow_batch_size_change)
    except DatareelError as exc:
        return {"ok": False, "error": _error(exc)}
    try:
        listed, truncated = _next_keys(loader, world_size, show)
        return {
            "ok": True,
            "cursor": loader.cursor,
            "accumulation_steps": loader.accumulation_steps,
            **_per_source(loader),
            "next": listed,
            "truncated": truncated,
        }
    finally:
        loader.close()


def _error(exc: DatareelError) -> dict[str, Any]:
    error: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, StateMismatchError):
        error["fields"] = {k: {"saved": a, "now": b} for k, (a, b) in exc.differences.items()}
    return error


def _per_source(loader: Loader) -> dict[str, Any]:
    """Each source's samples read before the cursor, as (epoch, offset) of its own passes. With packing (or
    a windowed stage) the cursor is a pack in input window ``w``: the inputs counted are those before it."""
    pack = loader.reel_cursor.pack
    inputs = loader.cursor if pack is None else pack[0] * loader.reel.window_size  # a WindowReel's cursor
    end = loader.reel.pass_length  # a repeat=False pass ends there (either reel kind)
    inputs = inputs if end is None else min(inputs, end)
    counts = consumed(loader.plan.root, inputs)
    sources = []
    for leaf, source in enumerate(loader.sources):
        n, size = counts.get(leaf, 0), len(source)
        sources.append({"name": source.name, "size": size, "read": n, "epoch": n // size, "offset": n % size})
    return {"inputs_read": inputs, "inputs_before_window": None if pack is None else pack[0], "sources": sources}


def _next_keys(loader: Loader, world_size: int, show: int) -> tuple[list[dict[str, Any]], bool]:
    """Per global batch, per rank: the keys each rank reads (its micro-batches in order, concatenated); and
    whether the list was cut short: each rank lists at most ``LISTED_KEYS / world_size`` keys (the global
    batch where a rank ran out is listed in part, the later ones not at all)."""
    schedule, first = loader.schedule, loader.global_batch
    budget = max(1, LISTED_KEYS // world_size)
    per_rank: list[list[list[Any]]] = []
    truncated = False
    for rank in range(world_size):
        steps = loader.reel.stream(loader.reel_cursor, loader.layout, rank)
        batches: list[list[Any]] = []
        listed = 0
        for b in range(first, first + show):
            keys: list[Any] = []
            for step in steps:  # this global batch's micro-steps: until the cursor reaches the next batch
                if step.descriptor is not None:
                    keys += _keys(loader, step.descriptor)
                    listed += len(step.descriptor.indices)
                if step.after.position >= schedule.start(b + 1):
                    break
                if listed >= budget:
                    truncated = True
                    break
            batches.append(keys)
            if listed >= budget and b + 1 < first + show:
                truncated = True
                break
        per_rank.append(batches)
    shown = min(map(len, per_rank), default=0)
    out = [{"global_batch": first + b, "ranks": [batches[b] for batches in per_rank]} for b in range(shown)]
    return out, truncated


def _keys(loader: Loader, descriptor: Descriptor) -> list[Any]:
    """The keys of a descriptor's units: a sample's key, or (when its units are packs) each pack's keys."""
    keys = [loader.sources[s].key(i) for s, i in zip(descriptor.source_ids.tolist(), descriptor.indices.tolist())]
    if not descriptor.packs.any():
        return keys
    starts = np.concatenate([[0], np.cumsum(descriptor.sizes)]).tolist()
    return [keys[a:b] for a, b in zip(starts, starts[1:])]


def format_sources(counts: dict[str, Any]) -> list[str]:
    """Lines for :func:`_per_source`'s numbers (``inputs_read``, ``inputs_before_window``, ``sources``)."""
    window = counts["inputs_before_window"]
    where = "before the cursor" if window is None else f"before input window {window:,} (the next pack's)"
    lines = [f"samples read {where}: {counts['inputs_read']:,}"]
    for source in counts["sources"]:
        lines.append(
            f"  {source['name']}: {source['read']:,} = epoch {source['epoch']:,}, sample {source['offset']:,} "
            f"of {source['size']:,}"
        )
    return lines


def format_verdict(verdict: dict[str, Any], world_size: int, micro_batch_size: int) -> str:
    """The text ``datareel verify`` prints."""
    if not verdict["ok"]:
        error = verdict["error"]
        return (
            f"REFUSED on world_size {world_size} × micro_batch_size {micro_batch_size}: {error['type']}: "
            + error["message"]
        )
    lines = [
        f"OK on world_size {world_size} × micro_batch_size {micro_batch_size} "
        f"({verdict['accumulation_steps']} accumulation steps): resumes at {verdict['cursor']:,}"
    ]
    lines += format_sources(verdict)
    for batch in verdict["next"]:
        lines.append(f"global batch {batch['global_batch']:,}:")
        for rank, keys in enumerate(batch["ranks"]):
            shown = ", ".join(map(str, keys[:8])) + (f", ... ({len(keys)} in all)" if len(keys) > 8 else "")
            lines.append(f"  rank {rank}: {shown}")
    if verdict.get("truncated"):
        lines.append(f"(the listing stops after {LISTED_KEYS:,} keys in all: the global batches are that large)")
    return "\n".join(lines)
