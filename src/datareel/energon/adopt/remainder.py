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
from .records import rank_state
from .replay import Buffer, EpochBlend, Item, SliceReader, endless
from .slices import slice_offsets, worker_range

PASS_THROUGH = {
    "GcDataset",
    "WatchdogDataset",
    "MapDataset",
    "BatchDataset",
    "LogSampleDataset",
    "SimpleSavableDatasetWrapper",
}
REFUSED = {
    "PackingDataset": "packing (packing_buffer_size) plans packs from the data",
    "GroupBatchDataset": "batch grouping (batch_group_criterion) batches by the data",
    "EpochizeDataset": "virtual_epoch_length cuts Energon's passes per worker",
    "LimitDataset": "a limit wrapper ends its worker's stream early",
    "FilterDataset": "a filter drops samples by their data",
    "MixBatchDataset": "a batch-level mix draws whole batches",
    "ConcatDataset": "a concatenation of datasets",
    "IterMapDataset": "an iterable map may change the number of samples",
}


@dataclass(frozen=True, kw_only=True)
class Setup:
    """The configuration the old job ran with, as the new job's options give it."""

    sizes: tuple[int, ...]
    shard_counts: tuple[np.ndarray, ...]
    blend: bool
    shuffle_buffer_size: int | None
    max_samples_per_sequence: int | None
    parallel_shard_iters: int | None
    over_epochs: tuple[int | None, ...]
    """Per dataset: 1 (each epoch its own shuffle) or ``None`` (read in order)."""
    epoch_length: int
    seed_offset: int | None = None
    """The old job's ``WorkerConfig.seed_offset`` (its workers' generators are seeded with it), if known."""


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
        for w, checkpoint in enumerate(checkpoints):
            where = f"old rank {r}, worker {w}"
            g = r * workers + w
            try:
                pieces, worker_epoch = _worker(checkpoint, batch, g, len(ranks), workers, setup, where)
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


def _worker(
    checkpoint: Any, batch: Any, g: int, world: int, workers: int, setup: Setup, where: str
) -> tuple[list[np.ndarray], int]:
    """One old worker's unread samples per dataset, and its epoch."""
    offsets = []
    for k, (size, counts) in enumerate(zip(setup.sizes, setup.shard_counts)):
        rotation = sum(setup.sizes[:k]) % (max(workers, 1) * world)
        start, stop = worker_range(size, world, workers, g, rotation)
        offsets.append(slice_offsets(counts, start, stop, setup.max_samples_per_sequence))
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
    chain, base = _chain(tree, where)
    repeats = [node for name, node in chain if name == "RepeatDataset"]
    passes = int(repeats[0]["_repetition"]) if repeats else 0
    source = _source(base, offsets, setup, where, bool(repeats), passes, g)
    _check_no_skips(chain, batch, where)
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
        items = [_item(key, where) for key in buffers[0]["_active_buffer"]["_restore_keys"]]
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


def _chain(tree: Any, where: str) -> tuple[list[tuple[str, Any]], Any]:
    """The wrappers from the top down to the blend or the slice reader, and that node."""
    chain: list[tuple[str, Any]] = []
    node = tree
    while True:
        name = node.get("__class__") if isinstance(node, dict) else None
        if name in ("WebdatasetSampleLoaderDataset", "BlendDataset"):
            return chain, node
        if name in REFUSED:
            raise ForeignStateError(
                f"{where}: the old job's pipeline holds {name}: {REFUSED[name]}, so which samples it handed out "
                f"cannot be told from its state; such a job cannot be adopted (start the datareel.energon loader "
                f"fresh, or finish the epoch on megatron.energon)"
            )
        if name not in PASS_THROUGH | {"ShuffleBufferDataset", "RepeatDataset"}:
            raise ForeignStateError(
                f"{where}: its state holds a {name!r} wrapper, which datareel does not know how to replay; this is "
                f"not a megatron.energon 7.x training pipeline datareel can adopt (version or wrapper unsupported)"
            )
        if name == "MapDataset" and node.get("_generator_sample_key") is not None:
            raise ForeignStateError(
                f"{where}: it saved inside a generator encode_sample's outputs; the number of samples it took "
                f"cannot be told from its state, so it cannot be adopted"
            )
        chain.append((name, node))
        subs = node.get("datasets")
        if not isinstance(subs, list) or len(subs) != 1:
            raise StateDamagedError(f"{where}: its {name} state holds {subs!r} where one inner state belongs")
        node = subs[0]


def _check_seed(seed: int, g: int, setup: Setup, where: str) -> None:
    """Each worker's generators were seeded with sha1("{global worker},{seed_offset}") (Energon's worker seed):
    a state read as another worker's (ranks out of order, one missing before the last, another worker count) or
    saved with another ``seed_offset`` is refused here."""
    if setup.seed_offset is None:
        return
    wanted = int.from_bytes(hashlib.sha1(f"{g},{setup.seed_offset}".encode()).digest(), "big") & 0xFFFFFFFF
    if seed != wanted:
        raise StateMismatchError(
            f"{where}: its generators were not seeded for global worker {g} with seed_offset={setup.seed_offset}: the "
            f"states are not in old-rank order, an old rank's state is missing, the old worker count differs, or the "
            f"old job's WorkerConfig seed_offset differs; pass every old rank's state in rank order "
            f"(read_energon_checkpoint(dir)) and the old job's seed_offset",
            {"seed_offset": (None, setup.seed_offset)},
        )


def _check_no_skips(chain: list[tuple[str, Any]], batch: Any, where: str) -> None:
    """Before its checkpoint the worker's encode_sample took one sample per output: a task encoder that skipped
    samples (``SkipSample``) makes the handed-out samples depend on the data, and is refused."""
    names = [name for name, _ in chain]
    if "BatchDataset" not in names or names.index("BatchDataset") + 1 >= len(chain) or not batch:
        return
    batches, below = chain[names.index("BatchDataset")][1], chain[names.index("BatchDataset") + 1]
    if below[0] != "MapDataset":
        return
    taken, made = int(below[1].get("_sample_index", 0)), int(batches.get("_sample_index", 0)) * int(batch)
    if taken != made:
        raise ForeignStateError(
            f"{where}: its encode_sample took {taken} samples for {made} batched ones: it skipped samples "
            f"(SkipSample), so which samples the old job handed out cannot be told from its state; such a job "
            f"cannot be adopted mid-epoch (adopt at an epoch's end, or start the datareel.energon loader fresh)"
        )


def _source(
    base: Any, offsets: list[list[int]], setup: Setup, where: str, repeats: bool, passes: int, g: int
) -> SliceReader | EpochBlend:
    if base["__class__"] == "WebdatasetSampleLoaderDataset":
        return _reader(base, offsets[0], 0, setup, where, g)
    if not repeats:
        raise ForeignStateError(
            f"{where}: the old job reads a weighted blend (a metadataset's 'blend:'), which draws its datasets with "
            f"replacement in each worker: it has no epoch whose rest could be served exactly once, so it cannot be "
            f"adopted. Adopt at the end of training on it, or start the datareel.energon loader fresh"
        )
    children = base.get("datasets") or []
    if len(children) != len(setup.sizes):
        raise StateMismatchError(
            f"{where}: the old job blends {len(children)} datasets, this one {len(setup.sizes)}; open the same "
            f"metadataset",
            {"dataset": (len(children), len(setup.sizes))},
        )
    readers = []
    for k, child in enumerate(children):
        node = child
        while isinstance(node, dict) and node.get("__class__") == "MapDataset":
            node = (node.get("datasets") or [None])[0]
        name = node.get("__class__") if isinstance(node, dict) else None
        if name != "WebdatasetSampleLoaderDataset":
            raise ForeignStateError(
                f"{where}: dataset {k} of the old job's blend_epochized is read through {name!r}: only repetitions: 1 "
                f"(each dataset once per epoch) can be adopted; finish the epoch on megatron.energon"
            )
        readers.append(_reader(node, offsets[k], k, setup, where, g))
    return EpochBlend(base, readers, [float(s) for s in setup.sizes], passes)


def _reader(state: dict[str, Any], offsets: list[int], k: int, setup: Setup, where: str, g: int) -> SliceReader:
    parallel = setup.parallel_shard_iters or 16
    active = state.get("_active_slice_state") or []
    if len(active) != parallel:
        raise StateMismatchError(
            f"{where}: it read {len(active)} slices at once, this job would read {parallel}; pass "
            f"parallel_shard_iters={len(active)} as the old job did",
            {"parallel_shard_iters": (len(active), parallel)},
        )
    reader = SliceReader(state, offsets, setup.over_epochs[k], k)
    _check_seed(reader.seed, g, setup, where)
    slices = reader.slices
    bad = [s for s in reader.active if s is not None and not (0 <= s[0] < slices and _inside(s, offsets))]
    bad += [i for i in reader.pending or [] if not 0 <= i < slices]
    if bad:
        raise StateMismatchError(
            f"{where}: its read positions {bad[:3]} do not lie in its slices of this dataset ({slices} slices of "
            f"samples [{offsets[0]}, {offsets[-1]})): the dataset, the old world size (every old rank's state must "
            f"be passed), the worker count or max_samples_per_sequence differ from the old job's",
            {"dataset": (None, None), "max_samples_per_sequence": (None, setup.max_samples_per_sequence)},
        )
    listed = None  # slices its pass ordered: those opened so far and those still pending
    if reader.pending_offset is not None and reader.pending is not None:
        listed = reader.pending_offset + len(reader.pending)
    over = setup.over_epochs[k]
    if listed is not None and over not in (None, -1) and listed != slices * over:
        raise StateMismatchError(
            f"{where}: it ordered {listed} slices, its share of this dataset holds {slices * over}: the "
            f"old world size (every old rank's state must be passed, in rank order), the worker count, the dataset "
            f"or max_samples_per_sequence differ from the old job's",
            {"dataset": (None, None), "max_samples_per_sequence": (None, setup.max_samples_per_sequence)},
        )
    if reader.started() and reader.pending is None:
        raise ForeignStateError(f"{where}: its slice order is not recorded (an unfinished reshuffle); cannot adopt")
    return reader


def _inside(s: list[int], offsets: list[int]) -> bool:
    return offsets[s[0]] <= s[1] <= offsets[s[0] + 1]


def _item(key: Any, where: str) -> Item:
    """(dataset, index) of a buffered sample from its restore key (``..., 'BlendDataset', k, ..., 'Webdataset', i``)."""
    parts = list(key) if isinstance(key, (list, tuple)) else []
    k = 0
    for name, value in zip(parts, parts[1:]):
        if name == "BlendDataset":
            k = int(value)
        if name == "Webdataset":
            return k, int(value)
    raise ForeignStateError(f"{where}: a buffered sample's restore key {key!r} names no webdataset sample")
