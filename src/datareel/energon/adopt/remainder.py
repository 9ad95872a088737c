"""What a megatron.energon job had not handed to training when it saved: the rest of its current epoch.

For every old rank and worker: rebuild the worker's order from its recorded checkpoint (:mod:`.replay`: its
slices from :mod:`.slices`, its generators from the state), run it forward by the batches it yielded after
the checkpoint that training received (``offset`` × the batch size, as index math), and take what its
current pass has not yielded plus what sits in its shuffle buffer.  The union over all workers is the
remainder, each sample once; it is refused by name where the states do not fit the configuration given.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ForeignStateError, StateDamagedError, StateMismatchError
from ...plan.adopted import Remainder
from ...plan.rng import name_key
from ..val import WorkerSlice, worker_slices
from .records import rank_state
from .replay import Buffer, EpochBlend, Item, endless
from .setup import Setup
from .slices import slice_offsets
from .tree import chain_of, check_no_skips, item_of, source_of


@dataclass(frozen=True)
class Adoption:
    """The remainder and what it came from (for ``datareel inspect`` and the log)."""

    remainder: Remainder
    old_world_size: int
    old_workers: int
    handed_out: int | None
    epoch: int


def adopt(states: list[Any], setup: Setup, shuffle: bool = True) -> Adoption:
    """The rest of the current epoch of the job that saved ``states`` (one per old rank, in rank order)."""
    if not states:
        raise ForeignStateError("no megatron.energon rank state was given; pass every old rank's state, in rank order")
    # a rank whose workers had not started saved None: it handed out nothing
    ranks = [None if s is None else rank_state(s, r) for r, s in enumerate(states)]
    saved = [s for s in ranks if s is not None]
    if not saved:
        raise ForeignStateError("every old rank's state is None: that job handed out nothing; start afresh instead")
    workers = len(saved[0]["worker_states"])
    odd = [r for r, s in enumerate(ranks) if s is not None and len(s["worker_states"]) != workers]
    if odd:
        raise StateMismatchError(
            f"old ranks {odd} saved another number of workers than rank 0 ({workers}): the states are not of one "
            f"checkpoint; pass the per-rank states of one save",
            {"num_workers": (workers, None)},
        )
    found: list[list[np.ndarray]] = [[] for _ in setup.sizes]
    epoch = 0
    for r, state in enumerate(ranks):
        batch = None if state is None else state["micro_batch_size"]
        checkpoints = [None] * workers if state is None else state["worker_states"]
        shares = worker_slices(setup.sizes, len(ranks), r, workers)  # Energon's split, per local worker
        for w, checkpoint in enumerate(checkpoints):
            where = f"old rank {r}, worker {w}"
            g = r * workers + w
            offsets = _slices(shares[w], setup)
            try:
                pieces, worker_epoch = _worker(checkpoint, batch, g, offsets, setup, where)
            except (KeyError, TypeError, AttributeError, IndexError) as exc:  # a field missing or of another kind
                raise ForeignStateError(
                    f"{where}: its state does not have the layout of a megatron.energon 7.x savable-loader state "
                    f"({type(exc).__name__}: {exc}); it was written by another version, which datareel cannot adopt"
                ) from None
            epoch = max(epoch, worker_epoch)
            for k, piece in enumerate(pieces):
                found[k].append(piece)
    leaves, indices = [], []
    for k, parts in enumerate(found):
        got = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)  # (n_k,)
        if len(got) and (np.diff(got) == 0).any():
            raise StateDamagedError(
                "the old ranks' states name one sample as unread twice: they are not one checkpoint's (pass the "
                "per-rank states of one save) or not of this configuration"
            )
        leaves.append(np.full(len(got), k, dtype=np.int32))
        indices.append(got)
    leaf, index = np.concatenate(leaves), np.concatenate(indices)  # (L,) each, sorted by (leaf, index)
    digest = hashlib.blake2b(leaf.tobytes() + index.tobytes(), digest_size=8).hexdigest()
    remainder = Remainder(leaf, index, name_key(f"energon-adopt:{digest}"), (epoch + 1) * setup.epoch_length, shuffle)
    handed = setup.epoch_length - len(remainder) if epoch == 0 else None  # of its first epoch
    return Adoption(remainder, len(ranks), workers, handed, epoch)


def _slices(share: WorkerSlice, setup: Setup) -> list[list[int]]:
    """Per dataset, the slice boundaries of one old worker's share (``[0]`` alone: none of that dataset)."""
    ranges = {source: (first, first + count) for source, first, count, _ in share.segments}
    return [
        slice_offsets(counts, *ranges.get(k, (0, 0)), setup.max_samples_per_sequence)
        for k, counts in enumerate(setup.shard_counts)
    ]


def _worker(
    checkpoint: Any, batch: Any, g: int, offsets: list[list[int]], setup: Setup, where: str
) -> tuple[list[np.ndarray], int]:
    """One old worker's unread samples per dataset (``offsets``: its slices of each), and its epoch."""
    if checkpoint is None:  # a worker of a rank that had not started
        return [np.arange(o[0], o[-1], dtype=np.int64) for o in offsets], 0
    if isinstance(checkpoint, dict) and "offset" not in checkpoint and "datasets" in checkpoint:
        checkpoint = {"state": {"dataset_state": checkpoint}, "offset": 0}  # num_workers=0: the state as it is now
    if not isinstance(checkpoint, dict) or "offset" not in checkpoint:
        raise StateDamagedError(f"{where}: its worker state is a {type(checkpoint).__name__}, not a checkpoint")
    state, offset = checkpoint.get("state"), int(checkpoint["offset"])
    tree = None if state is None else state.get("dataset_state")
    if tree is None:
        # megatron.energon's first checkpoint of a worker records no state at batch -1: an offset of 1 from it
        # means no batch was handed out (a worker restored from no state would record offset 0)
        if offset > 1:
            raise StateDamagedError(
                f"{where}: no recorded state, yet {offset} batches handed out after it; cannot be replayed"
            )
        return [np.arange(o[0], o[-1], dtype=np.int64) for o in offsets], 0
    chain, base = chain_of(tree, where)
    repeats = [node for name, node in chain if name == "RepeatDataset"]
    passes = int(repeats[0]["_repetition"]) if repeats else 0
    source = source_of(base, offsets, setup, where, bool(repeats), passes, g)
    check_no_skips(chain, batch, where)
    if setup.blend != isinstance(source, EpochBlend):
        raise StateMismatchError(
            f"{where}: the old job read {'a blend' if isinstance(source, EpochBlend) else 'one dataset'}, this one "
            f"{'a blend' if setup.blend else 'one dataset'}: the dataset differs; open the same dataset or metadataset",
            {"dataset": (None, None)},
        )
    stream: Iterator[Item] = endless(source)
    buffers = [node for name, node in chain if name == "ShuffleBufferDataset"]
    if bool(buffers) != (setup.shuffle_buffer_size is not None):
        raise StateMismatchError(
            f"{where}: the old job ran {'with' if buffers else 'without'} a shuffle buffer, this one has "
            f"shuffle_buffer_size={setup.shuffle_buffer_size}; pass the shuffle_buffer_size the old job used",
            {"shuffle_buffer_size": (None, setup.shuffle_buffer_size)},
        )
    buffer = None
    if buffers:
        items = [item_of(key, where) for key in buffers[0]["_active_buffer"]["_restore_keys"]]
        size = int(setup.shuffle_buffer_size or 0)
        if len(items) not in (0, size - 1):  # an endless stream: after its first pop the buffer holds size - 1
            raise StateMismatchError(
                f"{where}: its shuffle buffer holds {len(items)} samples, so the old job's shuffle_buffer_size was "
                f"{len(items) + 1}, not {size}; pass shuffle_buffer_size={len(items) + 1}",
                {"shuffle_buffer_size": (len(items) + 1, size)},
            )
        buffer = Buffer(buffers[0], size, items)
        stream = buffer.run(stream)
    need = offset * int(batch or 1)
    got = sum(1 for _ in itertools.islice(stream, need))
    if got < need:
        raise StateMismatchError(
            f"{where}: its state says it yielded {need} samples after its checkpoint, its slices of this dataset "
            f"hold fewer: the dataset or configuration differs from the old job's",
            {"dataset": (None, None)},
        )
    pieces = source.unread() if isinstance(source, EpochBlend) else [source.unread()]
    for k, i in buffer.items if buffer else []:
        pieces[k] = np.append(pieces[k], i)
    # a sample still buffered from the worker's previous pass is also unread in its current one: served once
    return [np.unique(p) for p in pieces], source.epoch
