"""``datareel inspect STATE``: what a saved loader state says, and which topologies can resume it.

A state is found in a JSON file (``loader.state_dict()`` dumped), a ``torch.save`` file holding it
anywhere in nested dicts and lists (``--key`` names it when there are several), or a
``torch.distributed.checkpoint`` directory. Files are read with ``torch.load(weights_only=True)``:
never an arbitrary unpickle.

Which topologies resume it: ``(world_size W, micro_batch_size m)`` such that ``m·W`` divides the
global batch size ``G`` (every topology must) and the offset of the cursor into its global batch
(a state saved mid-batch continues in whole micro-steps), i.e. ``m·W`` divides
``gcd(G, cursor mod G)``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import DatareelError
from ..plan.schedule import BatchSchedule
from ..state import FORMAT, VERSION, _looks_like_energon, state_check

PAIRS_SHOWN = 12
"""World sizes listed in the text output (all are in ``--json``)."""


def load_state_file(
    path: str | os.PathLike[str], key: str | None = None, *, trusted: bool = False
) -> tuple[dict[str, Any], str]:
    """The loader state in ``path`` and where it was (a dotted key; ``""``: the whole file). ``trusted``: a
    ``torch.save`` file is fully unpickled (runs code from the file), for training checkpoints that hold
    objects (Megatron's ``args`` namespace, RNG states) beside the loader state."""
    path = Path(path)
    if not path.exists():
        raise DatareelError(f"{path}: no such file or directory")
    content = _read(path, trusted)
    if key is not None:
        return _at(content, key, path), key
    found = _find(content, "")
    if not found and _looks_like_energon_somewhere(content):
        raise DatareelError(
            f"{path} holds a Megatron-Energon loader state, not a datareel one: it records each worker's shuffle "
            f"buffers and shard positions, which do not determine a position in one global sample order. "
            f"Start the data from the beginning (or from a datareel checkpoint)"
        )
    if not found:
        keys = sorted(map(str, content))[:12] if isinstance(content, dict) else type(content).__name__
        raise DatareelError(
            f"{path} holds no datareel loader state (a dict with format={FORMAT!r}); top-level keys: {keys}. "
            f"Save loader.state_dict(), or a dict holding it"
        )
    if len(found) > 1 and all(state == found[0][1] for _, state in found):
        return found[0][1], found[0][0]  # copies of one state (Energon's facade saves one per rank)
    if len(found) > 1:
        raise DatareelError(
            f"{path} holds {len(found)} datareel loader states, at {[k or '<root>' for k, _ in found]}; "
            f"choose one with --key"
        )
    return found[0][1], found[0][0]


def _read(path: Path, trusted: bool = False) -> Any:
    if path.is_dir():
        if not (path / ".metadata").is_file():
            raise DatareelError(
                f"{path} is a directory without .metadata: not a torch.distributed.checkpoint directory; give a "
                f"DCP checkpoint directory, a JSON file or a torch.save file"
            )
        return _read_dcp(path)
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    if head.startswith((b"{", b"[")):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise DatareelError(f"{path} starts like JSON but is not JSON: {exc}") from None
    return _torch_load(path, path, trusted)


UNREADABLE = "<not read: not plain data (weights_only)>"
"""What a DCP entry that is not plain data (a pickled object) is replaced with: never unpickled."""


def _read_dcp(path: Path) -> Any:
    """The non-tensor entries of a DCP checkpoint, nested as saved, each loaded ``weights_only`` (an entry
    that is not plain data becomes :data:`UNREADABLE`); tensors are neither read nor allocated."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    class PlainEntries(_EmptyStateDictLoadPlanner):  # type: ignore[misc]
        """torch's own planner for state dicts rebuilt from metadata, but DCP's non-tensor entries are
        unpickled with ``weights_only=False`` there (code from the file): here they are not."""

        def load_bytes(self, read_item: Any, value: Any) -> None:
            try:
                loaded = torch.load(value, weights_only=True)
            except Exception:
                loaded = UNREADABLE
            from torch.distributed.checkpoint._nested_dict import set_element

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)

    try:
        reader = FileSystemReader(path)
        metadata = reader.read_metadata()
        plain = [k for k, v in metadata.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata)]
        content: dict[str, Any] = {}
        _load_state_dict(content, storage_reader=reader, planner=PlainEntries(keys=set(plain)), no_dist=True)
    except Exception as exc:
        raise DatareelError(f"{path}: the DCP checkpoint cannot be read: {type(exc).__name__}: {exc}") from None
    return content


def _torch_load(path: Path, shown: Path, trusted: bool = False) -> Any:
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=not trusted)
    except pickle.UnpicklingError as exc:
        raise DatareelError(
            f"{shown} holds objects other than tensors and plain containers, and datareel does not unpickle "
            f"arbitrary objects unless told to (torch.load weights_only=True): {str(exc).splitlines()[0]}. For a "
            f"checkpoint you trust (it runs code from the file), pass --trusted; or save the loader state "
            f"(loader.state_dict(), plain data) where it can be read alone"
        ) from None
    except Exception as exc:
        raise DatareelError(
            f"{shown} is neither JSON nor a torch.save file torch can read: {type(exc).__name__}: {exc}"
        ) from None


def _find(content: Any, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """Every datareel state in nested dicts and lists, with its dotted key."""
    if isinstance(content, dict):
        if content.get("format") == FORMAT:
            return [(prefix, content)]
        items = content.items()
    elif isinstance(content, (list, tuple)):
        items = enumerate(content)
    else:
        return []
    return [hit for k, v in items for hit in _find(v, f"{prefix}.{k}" if prefix else str(k))]


def _looks_like_energon_somewhere(content: Any) -> bool:
    if _looks_like_energon(content):
        return True
    values = content.values() if isinstance(content, dict) else content if isinstance(content, (list, tuple)) else []
    return any(_looks_like_energon_somewhere(v) for v in values)


def _at(content: Any, key: str, path: Path) -> dict[str, Any]:
    node = content
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            there = sorted(map(str, node))[:12] if isinstance(node, dict) else type(node).__name__
            raise DatareelError(f"{path}: --key {key!r}: no {part!r} there (found {there})")
    if not isinstance(node, dict) or node.get("format") != FORMAT:
        raise DatareelError(f"{path}: --key {key!r} is not a datareel loader state (a dict with format={FORMAT!r})")
    return node


def describe_state(state: dict[str, Any]) -> dict[str, Any]:
    """What ``state`` says, as plain data (``--json``)."""
    if state.get("version") != VERSION:
        raise DatareelError(
            f"state version {state.get('version')!r}: this datareel reads version {VERSION}; inspect it with the "
            f"datareel release that wrote it"
        )
    spec = state.get("spec")
    cursor = state.get("cursor")
    if not isinstance(spec, dict) or not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
        raise DatareelError(f"the state is damaged: cursor={cursor!r} and spec must be an int >= 0 and a dict")
    schedule = BatchSchedule.from_spec(spec.get("global_batch_size"))  # DatareelError naming it if damaged
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
    divisors = _divisors(fits)
    pairs = [[w, m] for w in divisors for m in divisors if fits % (w * m) == 0]
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
        "dataset": {k: dataset.get(k) for k in ("name", "size", "digest")},
        "sources": dataset.get("sources"),
        "packing": spec.get("packing"),
        "stage": stage,
        "resume": {"step_must_divide": fits, "pairs": pairs},
    }
    size = dataset.get("size")
    if not packed and not dataset.get("sources") and isinstance(size, int) and size > 0:
        out["epoch"], out["epoch_offset"] = divmod(cursor, size)  # one dataset: the reel is its passes
    return out


def _divisors(n: int) -> list[int]:
    """Divisors of ``n`` >= 1, ascending (trial division to sqrt(n))."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


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
    if "epoch" in d:
        lines.append(f"epoch       {d['epoch']:,}, sample {d['epoch_offset']:,} of {d['dataset']['size']:,} in it")
    lines.append(f"seed        {d['seed']}, shuffle {d['shuffle']}")
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
    lines.append(f"resumes on  micro_batch_size × world_size dividing {fits:,}:")
    by_world: dict[int, list[int]] = {}
    for w, m in d["resume"]["pairs"]:
        by_world.setdefault(w, []).append(m)
    for i, (w, ms) in enumerate(by_world.items()):
        if i == PAIRS_SHOWN:
            lines.append(f"            ... {len(by_world) - PAIRS_SHOWN} more world sizes (--json lists all)")
            break
        lines.append(f"            world_size {w:>5}: micro_batch_size {', '.join(map(str, ms))}")
    return "\n".join(lines)
