"""The facade's side of adopting: a megatron.energon state recognised among what ``restore_state_*`` gets, and
the old job's configuration read from the new job's ``get_train_dataset`` arguments (:class:`.remainder.Setup`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...blend.tree import Blend, EpochizedMix, Mix
from ...errors import ForeignStateError, OptionError
from ...sources.base import Source
from ...sources.view import SourceView
from .records import is_energon_state
from .setup import Setup


def energon_states(state: Any) -> list[Any] | None:
    """``state`` as a list of old rank states when it is one megatron.energon state or a list of them; ``None``
    when it holds none (a datareel state); a list mixing both is refused."""
    items = list(state) if isinstance(state, (list, tuple)) else [state]
    found = [is_energon_state(s) for s in items]
    if not any(found):
        return None
    if not all(f or s is None for f, s in zip(found, items)):  # None: a rank whose workers had not started
        odd = [i for i, (f, s) in enumerate(zip(found, items)) if not f and s is not None]
        raise ForeignStateError(
            f"the global state mixes megatron.energon rank states with other objects (items {odd}); pass the "
            f"list of every old rank's megatron.energon state (datareel.energon.read_energon_checkpoint(dir) reads "
            f"Megatron's per-rank files)"
        )
    return items


def setup_of(spec: Any) -> Setup:
    """The order configuration of the job a ``get_train_dataset`` spec describes (it must be the old job's)."""
    dataset = spec.dataset
    order = dict(getattr(spec, "energon_order", {}) or {})
    if spec.packing_buffer_size is not None or spec.virtual_epoch_length:
        what = "packing_buffer_size" if spec.packing_buffer_size is not None else "virtual_epoch_length"
        raise ForeignStateError(
            f"adopting a megatron.energon state: this job sets {what}, with which Energon's handed-out samples "
            f"depend on the data; adopt into a loader without it"
        )
    leaves = _leaves(dataset)
    multiplier = order.get("shuffle_over_epochs_multiplier", 1)
    buffer = order.get("shuffle_buffer_size")
    return Setup(
        sizes=tuple(len(leaf) for leaf in leaves),
        shard_counts=tuple(_shard_counts(leaf) for leaf in leaves),
        blend=len(leaves) > 1,  # Energon builds no blend around a single dataset
        # Energon builds a shuffle buffer only for a size above 1
        shuffle_buffer_size=buffer if buffer is not None and buffer > 1 else None,
        max_samples_per_sequence=order.get("max_samples_per_sequence"),
        parallel_shard_iters=order.get("parallel_shard_iters"),
        over_epochs=tuple(_over_epochs(leaf, multiplier) for leaf in leaves),
        epoch_length=sum(len(leaf) for leaf in leaves),  # each dataset once (the reel's epoch, or its mix's)
        seed_offset=spec.worker_config.seed_offset,
    )


def _leaves(dataset: Any) -> list[Any]:
    """The datasets Energon blends per sample, in its order: one dataset, or a ``blend_epochized`` (nested ones
    flattened, as Energon does) whose repetitions are all 1; a weighted ``blend:`` of one dataset is that dataset."""
    if isinstance(dataset, Mix) and len(dataset.children) == 1:
        return _leaves(dataset.children[0])
    if isinstance(dataset, Mix):
        raise ForeignStateError(
            "adopting a megatron.energon state: the dataset is a weighted blend (a metadataset's 'blend:'), which "
            "each Energon worker draws from with replacement: it has no epoch whose rest could be served exactly "
            "once. Start the datareel.energon loader fresh (or keep the job on megatron.energon)"
        )
    if isinstance(dataset, EpochizedMix):
        if any(r != 1 for r in dataset.repetitions):
            raise ForeignStateError(
                f"adopting a megatron.energon state: blend_epochized repetitions {list(dataset.repetitions)}; only "
                f"repetitions of 1 (each dataset once per epoch) can be adopted (finish the epoch on megatron.energon)"
            )
        return [leaf for child in dataset.children for leaf in _leaves(child)]
    if isinstance(dataset, Blend):
        raise ForeignStateError(
            f"adopting a megatron.energon state: the dataset is a {dataset.kind} blend; a plain dataset or a "
            f"blend_epochized metadataset (repetitions 1) can be adopted"
        )
    return [dataset]


def _over_epochs(leaf: Any, multiplier: Any) -> int | None:
    """Energon's ``shuffle_over_epochs`` of one dataset: 1, or ``None`` (in order); others are refused."""
    own = getattr(leaf, "over_epochs", 1)
    if getattr(leaf, "shuffle", None) is False or multiplier is None:
        return None
    if own != 1 or multiplier != 1:
        value = own if own != 1 else multiplier
        raise ForeignStateError(
            f"adopting a megatron.energon state: {leaf.name} is shuffled with shuffle_over_epochs_multiplier={value}"
            f" ({'slices drawn with replacement: no epoch' if value == -1 else 'several epochs shuffled as one'}), "
            f"so the rest of one epoch is not one set; only 1 (the default) or None can be adopted"
        )
    return 1


def _shard_counts(leaf: Any) -> np.ndarray:
    source = leaf
    while isinstance(source, SourceView):
        if source.start != 0 or source.stop != len(source.base):
            raise ForeignStateError(
                f"adopting a megatron.energon state: {leaf.name} is a subset [{source.start}, {source.stop}) of its "
                f"split; Energon splits a subset over its workers differently, so it cannot be adopted"
            )
        source = source.base
    if getattr(getattr(source, "split", None), "excluded_samples", None):
        raise ForeignStateError(
            f"adopting a megatron.energon state: {leaf.name}'s split.yaml excludes samples, which Energon keeps in "
            f"its index (and skips when reading) and datareel leaves out of its own: their numbers differ, so such "
            f"a dataset cannot be adopted"
        )
    counts = getattr(source, "counts", None)
    if not isinstance(source, Source) or counts is None:
        raise OptionError(
            f"adopting a megatron.energon state: {leaf.name} is not a prepared WebDataset split (its per-shard "
            f"sample counts are needed to find each old worker's samples)"
        )
    return np.asarray(counts, dtype=np.int64)


def energon_ranks(everyone: list[Any]) -> list[Any] | None:
    """The old ranks' megatron.energon states from what each rank of the group restored with
    ``restore_state_rank`` (``None`` where it found no file), or ``None`` if none restored one.  Megatron has new
    rank ``r`` restore old rank ``r``'s file, so after a grow the ranks past the old world restored nothing; a rank
    below one that restored a file but without one itself means that file is missing (refused, naming it)."""
    found = [is_energon_state(s) for s in everyone]
    if not any(found):
        return None
    other = [r for r, (f, s) in enumerate(zip(found, everyone)) if not f and s is not None]
    if other:
        raise ForeignStateError(
            f"ranks {other} restored a datareel state while others restored megatron.energon states: every rank "
            f"must restore the same checkpoint step"
        )
    last = max(r for r, f in enumerate(found) if f)
    missing = [r for r in range(last) if not found[r]]
    if missing:
        raise ForeignStateError(
            f"ranks {missing} restored no megatron.energon state while rank {last} did: the checkpoint lacks "
            f"train_dataloader_dprank{missing[0]:03d}.pt; adopting needs every old rank's state (copy the file back)"
        )
    return everyone[: last + 1]
