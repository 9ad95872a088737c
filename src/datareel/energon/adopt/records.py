"""megatron.energon's savable-loader states read as plain values, without importing megatron.energon.

A state reaches the facade as megatron.energon's own objects (a live job, or ``torch.load`` where
megatron.energon is installed), as plain dicts, or from the files Megatron-LM writes per data-parallel rank
(``train_dataloader_dprank000.pt``, ...), which :func:`read_energon_checkpoint` reads with torch's own
restricted unpickler (``weights_only=True``), given stand-ins for megatron.energon's state classes: nothing
in the file runs.

What a rank state holds (megatron.energon 7.x, ``SavableDataLoaderState``; docs/migrating-from-energon.md):

- ``worker_states``: one per worker (one for ``num_workers=0``), each a checkpoint of that worker's dataset
  taken a little earlier (``state``: ``rng`` (the global RNGs), ``dataset_state`` (the wrapper tree's
  fields) and ``sample_index`` (batches the worker had yielded then)) and ``offset``: batches it yielded
  after the checkpoint that training received.
- ``next_worker_id``: the worker whose batch training receives next; ``micro_batch_size``: the batch size.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any

from ...errors import ForeignStateError, StateDamagedError

STATE_FIELDS = ("worker_states", "next_worker_id", "micro_batch_size")
RANK_FILE = re.compile(r"^train_dataloader_dprank(\d+)\.pt$")


def plain(value: Any) -> Any:
    """``value`` with every dataclass or stand-in as a dict holding its fields and ``__type__`` (its class
    name), every dict as a plain dict and every tuple as a list; tensors, arrays, bytes and scalars as they are."""
    if isinstance(value, _Stand):
        return {"__type__": type(value).__name__, **{k: plain(v) for k, v in vars(value).items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__type__": type(value).__name__, **fields}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def is_energon_state(value: Any) -> bool:
    """Whether ``value`` is a megatron.energon savable-loader rank state (any of the forms above)."""
    if isinstance(value, _Stand) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        value = plain(value)
    return isinstance(value, dict) and all(name in value for name in STATE_FIELDS)


def rank_state(value: Any, rank: int) -> dict[str, Any]:
    """Old rank ``rank``'s state as a plain dict, checked for the fields adopting reads."""
    state = plain(value)
    if not (isinstance(state, dict) and all(name in state for name in STATE_FIELDS)):
        raise ForeignStateError(
            f"the state of old rank {rank} is a {type(value).__name__}, not megatron.energon's savable-loader state "
            f"(fields {list(STATE_FIELDS)}); pass each old rank's save_state_rank() (or its "
            f"train_dataloader_dprank*.pt file, read with datareel.energon.read_energon_checkpoint)"
        )
    workers = state["worker_states"]
    if not isinstance(workers, list) or not workers:
        raise StateDamagedError(f"the state of old rank {rank} holds no worker_states ({workers!r})")
    return state


class _Stand:
    """Stands for one of megatron.energon's classes in an unpickled file: its fields, by name."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        vars(self).update(state or {})


_STANDS: dict[str, type] = {}
ENERGON_CLASSES = (
    "megatron.energon.savable_loader.SavableDataLoaderState",
    "megatron.energon.savable_loader.SavableDatasetCheckpoint",
    "megatron.energon.savable_loader.SavableDatasetState",
    "megatron.energon.rng.SystemRngState",
    "megatron.energon.flavors.webdataset.sample_loader.SliceState",
)
"""The classes a megatron.energon 7.x loader state pickles (``FlexState``, a dict, reads as one)."""


def _stand(module: str, name: str) -> type:
    key = f"{module}.{name}"
    if key not in _STANDS:
        _STANDS[key] = type(name, (_Stand,), {"__module__": "datareel.energon.adopt.stand"})
    return _STANDS[key]


def _safe_globals() -> list[Any]:
    """What torch's own restricted unpickler (``weights_only=True``) may build beyond tensors: stand-ins for
    megatron.energon's state classes, and numpy's arrays (its RNG state).  Nothing in the file runs."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    out: list[Any] = [(_stand(*name.rsplit(".", 1)), name) for name in ENERGON_CLASSES]
    out.append((dict, "megatron.energon.state.FlexState"))
    out += [core.multiarray._reconstruct, np.ndarray, np.dtype]
    out += [type(np.dtype(t)) for t in (np.uint8, np.uint32, np.int64, np.float64, np.bool_)]
    return out


def read_energon_checkpoint(where: Any) -> list[dict[str, Any]]:
    """Every old rank's megatron.energon loader state, in rank order, from a checkpoint directory holding
    Megatron's ``train_dataloader_dprank*.pt`` files (or a list of such files, rank order taken from their
    names).  A rank whose file is missing is refused by name.  megatron.energon need not be installed."""
    import torch

    paths = _rank_files(where)
    states = []
    for rank, path in enumerate(paths):
        try:
            with torch.serialization.safe_globals(_safe_globals()):
                loaded = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
            named = found.group(1) if found else "an object"
            raise ForeignStateError(
                f"{path}: the file names {named}, which a megatron.energon 7.x loader "
                f"state does not hold; refusing to load it (pass the train_dataloader_dprank*.pt files Megatron "
                f"wrote; another megatron.energon version's states cannot be adopted)"
            ) from None
        except (OSError, EOFError, RuntimeError) as exc:
            raise StateDamagedError(f"{path}: cannot read old rank {rank}'s loader state ({exc})") from None
        states.append(rank_state(loaded, rank))
    return states


def _rank_files(where: Any) -> list[Path]:
    if isinstance(where, (str, Path)) and Path(where).is_dir():
        files = [p for p in Path(where).iterdir() if RANK_FILE.match(p.name)]
        if not files:
            raise ForeignStateError(
                f"{where}: no train_dataloader_dprank*.pt file (Megatron's per-rank loader states) in it; pass the "
                f"checkpoint iteration's directory that holds them"
            )
    else:
        files = [Path(p) for p in ([where] if isinstance(where, (str, Path)) else where)]
        for p in files:
            if not RANK_FILE.match(p.name):
                raise ForeignStateError(
                    f"{p}: not a file Megatron names train_dataloader_dprank<rank>.pt; its rank cannot be told"
                )
    by_rank = {int(RANK_FILE.match(p.name).group(1)): p for p in files}  # type: ignore[union-attr]
    missing = sorted(set(range(max(by_rank) + 1)) - set(by_rank))
    if missing:
        raise ForeignStateError(
            f"the checkpoint lacks the loader state of old data-parallel rank(s) {missing} "
            f"(train_dataloader_dprank{missing[0]:03d}.pt): adopting needs every old rank's state, since each "
            f"held different samples; copy the missing file(s) next to the others"
        )
    for p in by_rank.values():
        if not p.is_file():
            raise ForeignStateError(f"{p}: no such file (old rank state)")
    return [by_rank[r] for r in sorted(by_rank)]
