"""``datareel inspect STATE``: what a saved loader state says, and which topologies can resume it.

A state is found in a JSON file (``loader.state_dict()`` dumped), a ``torch.save`` file holding it
anywhere in nested dicts and lists (``--key`` names it when there are several), or a
``torch.distributed.checkpoint`` directory. Files are read with ``torch.load(weights_only=True)``, and a
DCP directory's ``.metadata`` with an unpickler that admits only torch's DCP metadata classes
(:data:`DCP_METADATA_GLOBALS`): never an arbitrary unpickle, unless ``trusted`` (``--trusted``).  The
state found is checked (:func:`datareel.state.check_state`: size, depth, keys, types) before anything
in it is used, and what is listed from it is bounded (sizes up to :data:`LISTED_UP_TO`).

Which topologies resume it: ``(world_size W, micro_batch_size m)`` such that ``m·W`` divides the
global batch size ``G`` (every topology must) and the offset of the cursor into its global batch
(a state saved mid-batch continues in whole micro-steps), i.e. ``m·W`` divides
``gcd(G, cursor mod G)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import DatareelError
from ..plan.schedule import BatchSchedule
from ..state import FORMAT, _looks_like_energon, check_state, state_check

PAIRS_SHOWN = 12
"""World sizes listed in the text output (all listed are in ``--json``)."""
LISTED_UP_TO = 4096
"""World and micro-batch sizes listed go up to this (a state's global batch size may be huge)."""
MAX_PAIRS = 10_000
"""At most this many ``(world_size, micro_batch_size)`` pairs are listed."""
MAX_JSON_BYTES = 256 << 20
"""A JSON file larger than this is not read (a loader state is a few hundred bytes)."""
SEARCH_DEPTH = 64
"""Containers of a checkpoint searched for a state go this deep (a state nests a few levels)."""


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
    for where, state in found:  # bounded and well typed before anything compares or reads it
        try:
            check_state(state, binding=False)
        except DatareelError as exc:
            raise DatareelError(f"{path}{f' (at {where})' if where else ''}: {exc}") from None
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
        return _read_dcp(path, trusted)
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    if head.startswith((b"{", b"[")):
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise DatareelError(
                f"{path} is {size:,} bytes of JSON; a loader state is a few hundred bytes (at most "
                f"{MAX_JSON_BYTES:,} are read): save loader.state_dict() alone"
            )
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise DatareelError(f"{path} starts like JSON but is not JSON: {exc}") from None
        except RecursionError:
            raise DatareelError(
                f"{path} is JSON nested too deep to read; a loader state nests a few levels: the file is damaged "
                f"or not a loader state"
            ) from None
    return _torch_load(path, path, trusted)


UNREADABLE = "<not read: not plain data (weights_only)>"
"""What a DCP entry that is not plain data (a pickled object) is replaced with: never unpickled."""

DCP_METADATA_GLOBALS: dict[str, frozenset[str]] = {
    "torch.distributed.checkpoint.metadata": frozenset(
        {
            "Metadata",
            "StorageMeta",
            "MetadataIndex",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "_MEM_FORMAT_ENCODING",
        }
    ),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch": frozenset({"Size"}),  # and every torch dtype (torch.float32, ...)
    "torch.serialization": frozenset({"_get_layout"}),  # a layout by name (torch.strided)
    "pathlib": frozenset({"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"}),
    "builtins": frozenset({"set", "frozenset"}),
    "collections": frozenset({"OrderedDict"}),
}
"""The globals a DCP ``.metadata`` may name (derived by unpickling real checkpoints written by torch 2.13:
a model's and an optimizer's state dicts, tensors of every dtype, scalars, nested plain entries and a
datareel loader). Classes are built with their own constructors and ``__setstate__``; nothing else runs."""

MAX_LIST_INDEX = 1 << 20
"""The largest list index a DCP entry's path may hold (each index below it is allocated when rebuilt)."""


def _read_dcp_metadata(path: Path) -> Any:
    """``path/.metadata`` unpickled with :data:`DCP_METADATA_GLOBALS` only, then checked: every entry a
    tensor's or plain data's, every path a few keys and small list indices, every file one of the
    directory's own."""
    import pickle

    import torch
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, TensorStorageMetadata

    shown = path / ".metadata"

    class MetadataUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if name in DCP_METADATA_GLOBALS.get(module, ()):
                return super().find_class(module, name)
            if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
                return getattr(torch, name)
            raise pickle.UnpicklingError(f"{module}.{name}")

    try:
        with open(shown, "rb") as f:
            metadata = MetadataUnpickler(f).load()
    except pickle.UnpicklingError as exc:
        raise DatareelError(
            f"{shown} names {exc}, which is not one of torch's DCP metadata classes, and datareel does not unpickle "
            f"other objects (unpickling runs code from the file). For a checkpoint you trust, pass --trusted"
        ) from None
    except Exception as exc:  # a damaged pickle: any error of the unpickler or of a class rebuilt
        raise DatareelError(f"{shown} cannot be read as DCP metadata: {type(exc).__name__}: {exc}") from None

    def damaged(what: str) -> DatareelError:
        return DatareelError(f"{shown}: {what}; the DCP checkpoint is damaged (or crafted)")

    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        raise damaged(f"it holds a {type(metadata).__name__}, not torch's DCP Metadata")
    for key, entry in metadata.state_dict_metadata.items():
        if not isinstance(key, str) or not isinstance(entry, TensorStorageMetadata | BytesStorageMetadata):
            raise damaged(f"entry {key!r} is a {type(entry).__name__}, not a tensor's or plain data's metadata")
    planner_data = metadata.planner_data
    if planner_data is not None:
        if not isinstance(planner_data, dict):
            raise damaged(f"planner_data is a {type(planner_data).__name__}, not a dict")
        for key, where in planner_data.items():
            if not (
                isinstance(where, tuple | list)
                and 0 < len(where) <= SEARCH_DEPTH
                and all(type(part) is str or (type(part) is int and 0 <= part <= MAX_LIST_INDEX) for part in where)
            ):
                raise damaged(f"entry {key!r} has the path {str(where)[:200]} (keys and list indices up to 2^20)")
    storage = metadata.storage_data
    if not isinstance(storage, dict):
        raise damaged(f"storage_data is a {type(storage).__name__}, not a dict")
    for info in storage.values():
        file = getattr(info, "relative_path", None)
        offset, length = getattr(info, "offset", None), getattr(info, "length", None)
        if not (isinstance(file, str) and file not in ("", ".", "..") and "/" not in file and "\\" not in file):
            raise damaged(f"an entry lies in {file!r}, not in a file of the checkpoint's directory")
        if not all(type(v) is int and v >= 0 for v in (offset, length)):
            raise damaged(f"an entry of {file!r} has offset {offset!r} and length {length!r}")
    return metadata


def _read_dcp(path: Path, trusted: bool = False) -> Any:
    """The non-tensor entries of a DCP checkpoint, nested as saved, each loaded ``weights_only`` (an entry
    that is not plain data becomes :data:`UNREADABLE`); tensors are neither read nor allocated. The
    ``.metadata`` is read by :func:`_read_dcp_metadata` (by torch's own unpickler if ``trusted``)."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, StorageMeta
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    checked = None if trusted else _read_dcp_metadata(path)

    class CheckedReader(FileSystemReader):  # type: ignore[misc]
        """torch's reader, with the metadata already read (and checked) by datareel."""

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if checked is None:
                return super().read_metadata(*args, **kwargs)
            if getattr(checked, "storage_meta", None) is None:
                checked.storage_meta = StorageMeta()
            checked.storage_meta.load_id = self.load_id
            return checked

    class PlainEntries(_EmptyStateDictLoadPlanner):  # type: ignore[misc]
        """torch's own planner for state dicts rebuilt from metadata, but DCP's non-tensor entries are
        unpickled with ``weights_only=False`` there (code from the file): here they are not. Only the
        plain entries named are rebuilt (torch's also takes entries under a prefix of a name: tensors)."""

        def _should_include_key(self, key: str, metadata: Any) -> bool:
            return key in self.keys

        def load_bytes(self, read_item: Any, value: Any) -> None:
            try:
                loaded = torch.load(value, weights_only=True)
            except Exception:
                loaded = UNREADABLE
            from torch.distributed.checkpoint._nested_dict import set_element

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)

    try:
        reader = CheckedReader(path)
        metadata = reader.read_metadata()
        plain = [k for k, v in metadata.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata)]
        content: dict[str, Any] = {}
        _load_state_dict(content, storage_reader=reader, planner=PlainEntries(keys=set(plain)), no_dist=True)
    except (Exception, CheckpointException) as exc:  # torch's CheckpointException is a BaseException
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
    """Every datareel state in nested dicts and lists (down to :data:`SEARCH_DEPTH`), with its dotted key,
    in the order saved; iterative (a checkpoint may nest without bound)."""
    found: list[tuple[str, dict[str, Any]]] = []
    stack: list[tuple[Any, str, int]] = [(content, prefix, 0)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, dict) and node.get("format") == FORMAT:
            found.append((where, node))
            continue
        if depth >= SEARCH_DEPTH:
            continue
        if isinstance(node, dict):
            items: Any = node.items()
        elif isinstance(node, list | tuple):
            items = enumerate(node)
        else:
            continue
        children = [(v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in items]
        stack.extend(reversed(children))
    return found


def _looks_like_energon_somewhere(content: Any) -> bool:
    stack: list[tuple[Any, int]] = [(content, 0)]
    while stack:
        node, depth = stack.pop()
        if _looks_like_energon(node):
            return True
        if depth < SEARCH_DEPTH:
            values = node.values() if isinstance(node, dict) else node if isinstance(node, list | tuple) else []
            stack.extend((v, depth + 1) for v in values)
    return False


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
    """What ``state`` says, as plain data (``--json``); :class:`DatareelError` naming the field of a state
    that is not well formed (its ``check`` is reported, not required)."""
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
    if not packed and not dataset.get("sources") and isinstance(size, int) and size > 0:
        out["epoch"], out["epoch_offset"] = divmod(cursor, size)  # one dataset: the reel is its passes
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
    ``verify`` does, and no key is listed; :class:`DatareelError` when it does not belong to ``dataset``
    (``shown``: its name in the message). Nothing the state names is imported unless ``trusted``, or
    ``task_encoder`` names the encoder (see :mod:`.verify`)."""
    from .verify import verify_state

    fits = describe_state(state)["resume"]["step_must_divide"]
    verdict = verify_state(
        state, dataset, world_size=1, micro_batch_size=fits, show=0, trusted=trusted, task_encoder=task_encoder
    )
    if not verdict["ok"]:
        error = verdict["error"]
        raise DatareelError(f"the state does not belong to {shown}: {error['type']}: {error['message']}")
    return {k: verdict[k] for k in ("inputs_read", "inputs_before_window", "sources")}
