"""Energon drop-in: Megatron-Energon's loader API on top of datareel.

Change ``from megatron.energon import ...`` to ``from datareel.energon import ...``
and a training script keeps its calls — ``WorkerConfig``, ``get_train_dataset``,
``get_val_dataset``, ``get_savable_loader``, ``get_loader`` and the loader's
``save_state_rank`` / ``restore_state_rank`` / ``save_state_global`` /
``restore_state_global`` — and gains elastic resumption: pass
``global_batch_size=`` to ``get_train_dataset`` and the saved state restores on
any world size and worker count.  See ``docs/migrating-from-energon.md``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as torch_dist

from .execute.encoder import DefaultTaskEncoder
from .errors import DatareelError, OptionError, StateMismatchError, check_int
from .loader import Loader
from .blend.open import open_dataset

log = logging.getLogger("datareel")

__all__ = ["DefaultTaskEncoder", "WorkerConfig", "get_loader", "get_savable_loader", "get_train_dataset",
           "get_val_dataset"]

_BUFFER_ARGS = ("shuffle_buffer_size", "max_samples_per_sequence", "parallel_shard_iters")
_LOADER_ARGS = ("checkpoint_every_sec", "checkpoint_every_min_n_samples", "n_checkpoints", "gc_collect_every_n_steps",
                "cache_pool", "watchdog_timeout_seconds", "watchdog_initial_timeout_seconds", "fail_on_timeout")
_explained: set[str] = set()


def _explain_once(name: str, message: str) -> None:
    if name not in _explained:
        _explained.add(name)
        log.info("datareel.energon: %s", message)


@dataclass
class WorkerConfig:
    """Where this process sits: ``rank`` / ``world_size`` of the data-parallel group, workers per rank.

    ``seed_offset`` is datareel's seed.  The debug fields are accepted and ignored.
    """

    rank: int
    world_size: int
    num_workers: int
    data_parallel_group: Any = None
    seed_offset: int = 0
    worker_debug_path: str | None = None
    worker_log_level: int = 0

    @staticmethod
    def default_worker_config(num_workers: int = 4, data_parallel_group: Any = None) -> WorkerConfig:
        """Rank and world size from torch.distributed when initialised, else a single rank."""
        if torch_dist.is_available() and torch_dist.is_initialized():
            return WorkerConfig(rank=torch_dist.get_rank(data_parallel_group),
                                world_size=torch_dist.get_world_size(data_parallel_group),
                                num_workers=num_workers, data_parallel_group=data_parallel_group)
        return WorkerConfig(rank=0, world_size=1, num_workers=num_workers, data_parallel_group=data_parallel_group)


@dataclass
class DatasetSpec:
    """What ``get_train_dataset`` / ``get_val_dataset`` return: the recipe, built by a loader call."""

    path: Any
    split_part: str
    worker_config: WorkerConfig
    batch_size: int | None
    global_batch_size: int | None
    task_encoder: Any
    repeat: bool
    shuffle: bool
    virtual_epoch_length: int = 0
    limit: int | None = None
    open_kwargs: dict[str, Any] = field(default_factory=dict)


def _check_common(kwargs: dict[str, Any], where: str) -> dict[str, Any]:
    for name in _BUFFER_ARGS:
        if name in kwargs:
            kwargs.pop(name)
            _explain_once(name, f"{name} is accepted and not needed: datareel shuffles the whole reel with a "
                                f"keyed permutation (no buffers), so order and restore do not depend on it")
    open_kwargs = {k: kwargs.pop(k) for k in ("split_config", "dataset_config") if k in kwargs}
    if "subflavors" in kwargs:
        open_kwargs["subflavors"] = kwargs.pop("subflavors")
    if kwargs:
        raise OptionError(
            f"{where}: datareel.energon cannot honour {sorted(kwargs)} (for example sample_type overrides, "
            f"auto_decode/image_decode, cache pools); drop them or use datareel's own API"
        )
    return open_kwargs


def _check_encoder(task_encoder: Any, packing_buffer_size: int | None, where: str) -> None:
    if packing_buffer_size is not None:
        raise OptionError(
            f"{where}: packing_buffer_size={packing_buffer_size} cannot be honoured: datareel does not pack from a "
            f"buffer with select_samples_to_pack; it plans packs from sample lengths. Use "
            f"datareel.Loader(..., packing=datareel.Packing(max_length=..., length=...)) with your "
            f"pack_selected_samples (docs/migrating-from-energon.md)"
        )


def get_train_dataset(
    path: Any, *, split_part: str = "train", worker_config: WorkerConfig, batch_size: int | None,
    batch_drop_last: bool = False, packing_buffer_size: int | None = None, shuffle_buffer_size: int | None = None,
    max_samples_per_sequence: int | None = None, virtual_epoch_length: int = 0,
    shuffle_over_epochs_multiplier: int | None = 1, task_encoder: Any = None, repeat: bool = True,
    global_batch_size: int | None = None, **kwargs: Any,
) -> DatasetSpec:
    """Energon's ``get_train_dataset``; ``batch_size`` is the per-rank micro-batch.

    New: ``global_batch_size`` (default ``batch_size × world_size``, i.e. no
    gradient accumulation).  With it, a checkpoint restores on any world size
    that divides it; without it, restoring on another world size is refused.
    """
    buffers = {"shuffle_buffer_size": shuffle_buffer_size, "max_samples_per_sequence": max_samples_per_sequence}
    open_kwargs = _check_common({**kwargs, **{k: v for k, v in buffers.items() if v is not None}}, "get_train_dataset")
    _check_encoder(task_encoder, packing_buffer_size, "get_train_dataset")
    if shuffle_over_epochs_multiplier not in (1, None):
        raise OptionError(
            f"get_train_dataset: shuffle_over_epochs_multiplier={shuffle_over_epochs_multiplier} cannot be honoured; "
            f"datareel shuffles each epoch with its own permutation (1) or not at all (None)"
        )
    if batch_drop_last and not repeat:
        raise OptionError("get_train_dataset: batch_drop_last=True with repeat=False is not supported; datareel "
                            "splits the last, partial global batch (docs/guarantees.md)")
    return DatasetSpec(path, split_part, worker_config, batch_size, global_batch_size, task_encoder, repeat,
                       shuffle=shuffle_over_epochs_multiplier is not None, virtual_epoch_length=virtual_epoch_length,
                       open_kwargs=open_kwargs)


def get_val_dataset(
    path: Any, *, split_part: str = "val", worker_config: WorkerConfig, batch_size: int,
    batch_drop_last: bool = False, packing_buffer_size: int | None = None, limit: int | None = None,
    task_encoder: Any = None, **kwargs: Any,
) -> DatasetSpec:
    """Energon's ``get_val_dataset``: one pass, in order, every sample once over all ranks."""
    open_kwargs = _check_common(dict(kwargs), "get_val_dataset")
    _check_encoder(task_encoder, packing_buffer_size, "get_val_dataset")
    if batch_drop_last:
        raise OptionError("get_val_dataset: batch_drop_last=True is not supported; datareel splits the last, "
                            "partial global batch over the ranks (docs/guarantees.md)")
    return DatasetSpec(path, split_part, worker_config, batch_size, None, task_encoder, repeat=False, shuffle=False,
                       limit=limit, open_kwargs=open_kwargs)


def get_savable_loader(dataset: DatasetSpec, *, worker_config: WorkerConfig | None = None, prefetch_factor: int = 2,
                       **kwargs: Any) -> EnergonLoader:
    """Energon's ``get_savable_loader``: the loader, with Energon's save/restore methods."""
    for name in list(kwargs):
        if name in _LOADER_ARGS:
            kwargs.pop(name)
            _explain_once(name, f"{name} is accepted and not needed: a datareel state is a cursor, computed "
                                f"on demand, never a replay of checkpoints kept in workers")
    if kwargs:
        raise OptionError(f"get_savable_loader: datareel.energon cannot honour {sorted(kwargs)}")
    if not isinstance(dataset, DatasetSpec):
        raise OptionError(
            f"get_savable_loader takes what datareel.energon.get_train_dataset / get_val_dataset return, got "
            f"{type(dataset).__name__} (a dataset built by megatron.energon cannot be loaded here)"
        )
    return EnergonLoader(dataset, worker_config or dataset.worker_config, prefetch_factor)


def get_loader(dataset: DatasetSpec, *, worker_config: WorkerConfig | None = None, prefetch_factor: int = 2,
               **kwargs: Any) -> EnergonLoader:
    """Energon's ``get_loader`` (datareel's loaders can always save)."""
    return get_savable_loader(dataset, worker_config=worker_config, prefetch_factor=prefetch_factor, **kwargs)


class _Unbatched:
    """batch_size=None: hand samples out one by one (Energon's meaning), skipping batch/encode_batch."""

    def __init__(self, encoder: Any):
        self.encode_sample = getattr(encoder, "encode_sample", lambda sample: sample)

    def batch(self, samples: list[Any]) -> Any:
        return samples[0]


class EnergonLoader:
    """A datareel Loader with Energon's loader methods and iteration conventions."""

    def __init__(self, spec: DatasetSpec, config: WorkerConfig, prefetch_factor: int):
        if spec.batch_size is not None:
            check_int(spec.batch_size, "batch_size", minimum=1)
        micro = spec.batch_size or 1
        self.explicit_global = spec.global_batch_size is not None
        G = spec.global_batch_size if self.explicit_global else micro * config.world_size
        encoder = _Unbatched(spec.task_encoder) if spec.batch_size is None else spec.task_encoder
        if getattr(spec.task_encoder, "decoder", "absent") is None:
            spec.open_kwargs.setdefault("decode", False)
        dataset = open_dataset(spec.path, split=spec.split_part, **spec.open_kwargs)
        self.spec, self.worker_config = spec, config
        self.loader = Loader(
            dataset, global_batch_size=G, micro_batch_size=micro, seed=config.seed_offset, shuffle=spec.shuffle,
            rank=config.rank, world_size=config.world_size, num_workers=config.num_workers,
            task_encoder=encoder, repeat=spec.repeat, data_parallel_group=config.data_parallel_group,
            prefetch_factor=prefetch_factor if config.num_workers else None,
            persistent_workers=bool(config.num_workers),
        )
        self._iterator: Any = None
        self._epoch_left: int | None = None

    # -- iteration: Energon's virtual epochs (virtual_epoch_length batches per for-loop) -------------
    def __iter__(self) -> Any:
        limit = self.spec.limit if self.spec.limit is not None else (self.spec.virtual_epoch_length or None)
        if self._iterator is None:
            self._iterator = iter(self.loader)
        count = 0
        while limit is None or count < limit:
            try:
                batch = next(self._iterator)
            except StopIteration:
                self._iterator = None
                return
            count += 1
            yield batch
        if self.spec.limit is not None:
            self._iterator = None

    def __len__(self) -> int:
        """Batches this rank yields per epoch (Energon's ``len``): the virtual epoch, or one pass."""
        if self.spec.virtual_epoch_length:
            return self.spec.virtual_epoch_length
        length = self.loader.length if self.loader.length is not None else self.loader.plan.epoch_length
        if length is None:
            raise TypeError("a weighted blend is endless: set virtual_epoch_length to give the loader a length")
        layout = self.loader.layout
        spans = (layout.rank_span(s, self.loader.rank, length) for s in range(-(-length // layout.step_size)))
        batches = sum(1 for a, b in spans if a < b)
        return batches if self.spec.limit is None else min(self.spec.limit, batches)

    # -- state, Energon's calling conventions --------------------------------------------------------
    def save_state_rank(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def restore_state_rank(self, state: Any) -> None:
        self._restore(lambda: self.loader.load_state_dict(_one_state(state)))

    def save_state_global(self, global_dst_rank: int = 0) -> list[dict[str, Any]] | None:
        """Gathers (and checks) every rank's state; on ``global_dst_rank`` a list with one state per rank."""
        group = self.worker_config.data_parallel_group
        dst = global_dst_rank
        if torch_dist.is_available() and torch_dist.is_initialized() and group is not None:
            dst = torch_dist.get_group_rank(group, global_dst_rank)
        state = self.loader.save_state_global(dst_rank=dst)
        return None if state is None else [state] * self.loader.world_size

    def restore_state_global(self, state: Any, src_rank: int | None = None) -> None:
        """``src_rank=None``: every rank passes the global state; else only ``src_rank`` does."""
        self._restore(lambda: self.loader.restore_state_global(
            None if state is None else _one_state(state), src_rank=src_rank))

    def _restore(self, restore: Any) -> None:
        self._iterator = None
        try:
            restore()
        except StateMismatchError as exc:
            if "global_batch_size" in exc.differences and not self.explicit_global:
                saved, now = exc.differences["global_batch_size"]
                raise StateMismatchError(
                    f"the checkpoint's global batch is {saved} samples, this job's would be {now} (batch_size × "
                    f"world_size, since get_train_dataset got no global_batch_size): restoring would change the "
                    f"global batches. Pass global_batch_size={saved} to get_train_dataset (datareel then uses "
                    f"gradient accumulation: batch_size × world_size must divide it) to resume on this world "
                    f"size with the same global batches.\n{exc}",
                    exc.differences,
                ) from None
            raise

    def __getattr__(self, name: str) -> Any:  # cursor, accumulation_steps, close, ...
        return getattr(self.loader, name)


def _one_state(state: Any) -> Any:
    """A datareel state from a per-rank dict or an Energon-style list of per-rank states."""
    if isinstance(state, (list, tuple)):
        states = [s for s in state if s is not None]
        if not states:
            raise DatareelError("restore: the global state holds no rank's state")
        if any(s != states[0] for s in states[1:]):
            raise DatareelError("restore: the global state holds different states per rank; it was not written by "
                                "datareel's save_state_global")
        return states[0]
    return state
