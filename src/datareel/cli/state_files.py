"""Finding the loader state in a file: a JSON file, a ``torch.save`` file, or a DCP directory.

A state is found in a JSON file (``loader.state_dict()`` dumped), a ``torch.save`` file holding it
anywhere in nested dicts and lists (``--key`` names it when there are several), or a
``torch.distributed.checkpoint`` directory (:mod:`.state_dcp`). Files are read with
``torch.load(weights_only=True)``: never an arbitrary unpickle, unless ``trusted`` (``--trusted``).  The
state found is checked (:func:`datareel.state.check_state`: size, depth, keys, types) before anything
in it is used.  A file that holds no datareel state (an Energon checkpoint, another file) is a
:class:`~datareel.errors.ForeignStateError`, one that cannot be parsed a
:class:`~datareel.errors.StateDamagedError`, a ``--key`` that names no state an
:class:`~datareel.errors.OptionError`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import DatareelError, ForeignStateError, OptionError, StateDamagedError, restated
from ..state import FORMAT, check_state, looks_like_energon
from .state_dcp import MAX_PATH_PARTS, read_dcp

MAX_JSON_BYTES = 256 << 20
"""A JSON file larger than this is not read (a loader state is a few hundred bytes)."""
SEARCH_DEPTH = MAX_PATH_PARTS
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
        raise ForeignStateError(
            f"{path} holds a Megatron-Energon loader state, not a datareel one: it records each worker's shuffle "
            f"buffers and shard positions, which do not determine a position in one global sample order. "
            f"Start the data from the beginning (or from a datareel checkpoint)"
        )
    if not found:
        keys = sorted(map(str, content))[:12] if isinstance(content, dict) else type(content).__name__
        raise ForeignStateError(
            f"{path} holds no datareel loader state (a dict with format={FORMAT!r}); top-level keys: {keys}. "
            f"Save loader.state_dict(), or a dict holding it"
        )
    for where, state in found:  # bounded and well typed before anything compares or reads it
        try:
            check_state(state, binding=False)
        except DatareelError as exc:  # the same kind of refusal, saying where
            raise restated(exc, f"{path}{f' (at {where})' if where else ''}: {exc}") from None
    if len(found) > 1 and all(state == found[0][1] for _, state in found):
        return found[0][1], found[0][0]  # copies of one state (Energon's facade saves one per rank)
    if len(found) > 1:
        raise OptionError(
            f"{path} holds {len(found)} datareel loader states, at {[k or '<root>' for k, _ in found]}; "
            f"choose one with --key"
        )
    return found[0][1], found[0][0]


def _read(path: Path, trusted: bool = False) -> Any:
    if path.is_dir():
        if not (path / ".metadata").is_file():
            raise ForeignStateError(
                f"{path} is a directory without .metadata: not a torch.distributed.checkpoint directory; give a "
                f"DCP checkpoint directory, a JSON file or a torch.save file"
            )
        return read_dcp(path, trusted)
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    if head.startswith((b"{", b"[")):
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise ForeignStateError(
                f"{path} is {size:,} bytes of JSON; a loader state is a few hundred bytes (at most "
                f"{MAX_JSON_BYTES:,} are read): save loader.state_dict() alone"
            )
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise StateDamagedError(f"{path} starts like JSON but is not JSON: {exc}") from None
        except RecursionError:
            raise StateDamagedError(
                f"{path} is JSON nested too deep to read; a loader state nests a few levels: the file is damaged "
                f"or not a loader state"
            ) from None
    return _torch_load(path, path, trusted)


def _torch_load(path: Path, shown: Path, trusted: bool = False) -> Any:
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=not trusted)
    except pickle.UnpicklingError as exc:
        raise ForeignStateError(
            f"{shown} holds objects other than tensors and plain containers, and datareel does not unpickle "
            f"arbitrary objects unless told to (torch.load weights_only=True): {str(exc).splitlines()[0]}. For a "
            f"checkpoint you trust (it runs code from the file), pass --trusted; or save the loader state "
            f"(loader.state_dict(), plain data) where it can be read alone"
        ) from None
    except Exception as exc:
        raise ForeignStateError(
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
        if looks_like_energon(node):
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
        elif isinstance(node, (list, tuple)) and part.isascii() and part.isdecimal() and int(part) < len(node):
            node = node[int(part)]
        else:
            there = sorted(map(str, node))[:12] if isinstance(node, dict) else type(node).__name__
            raise OptionError(f"{path}: --key {key!r}: no {part!r} there (found {there})")
    if not isinstance(node, dict) or node.get("format") != FORMAT:
        raise OptionError(f"{path}: --key {key!r} is not a datareel loader state (a dict with format={FORMAT!r})")
    return node
