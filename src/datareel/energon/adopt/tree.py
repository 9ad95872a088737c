"""A worker's recorded wrapper tree (megatron.energon 7.x): walked from the top down to the blend or the slice
reader, checked (known wrappers only, no skipped samples, generators seeded for this worker, read positions
inside its slices), and turned into the replay's readers (:mod:`.replay`)."""

from __future__ import annotations

import hashlib
from typing import Any

from ...errors import ForeignStateError, StateDamagedError, StateMismatchError
from .replay import EpochBlend, Item, SliceReader
from .setup import Setup

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


def chain_of(tree: Any, where: str) -> tuple[list[tuple[str, Any]], Any]:
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


def check_no_skips(chain: list[tuple[str, Any]], batch: Any, where: str) -> None:
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


def source_of(
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


def item_of(key: Any, where: str) -> Item:
    """(dataset, index) of a buffered sample from its restore key (``..., 'BlendDataset', k, ..., 'Webdataset', i``)."""
    parts = list(key) if isinstance(key, (list, tuple)) else []
    k = 0
    for name, value in zip(parts, parts[1:]):
        if name == "BlendDataset":
            k = int(value)
        if name == "Webdataset":
            return k, int(value)
    raise ForeignStateError(f"{where}: a buffered sample's restore key {key!r} names no webdataset sample")
