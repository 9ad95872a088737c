"""What Energon's dataset factories return and take: ``WorkerConfig`` (where this process sits), the
``DatasetSpec`` recipe that ``get_train_dataset`` / ``get_val_dataset`` build, and the ``LimitDataset`` /
``RepeatDataset`` wrappers it carries (:class:`Limit`, :class:`Repeat`).

Plain values: :mod:`.datasets` makes them, :mod:`.loader` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .worker import WorkerConfig

__all__ = ["DatasetSpec", "Limit", "Repeat", "WorkerConfig"]


@dataclass(frozen=True)
class Limit:
    """``LimitDataset(..., length, reset_after_epoch)``: at most ``length`` batches per pass, then the
    wrapped dataset starts again (Energon 7.4.1 resets it whatever ``reset_after_epoch`` says)."""

    length: int
    reset_after_epoch: bool = False


@dataclass(frozen=True)
class Repeat:
    """``RepeatDataset(..., repeats, restart)``: the wrapped dataset again each time it ends,
    ``repeats`` times (``None``: endlessly)."""

    repeats: float | None = None
    restart: bool = True


@dataclass
class DatasetSpec:
    """What ``get_train_dataset`` / ``get_val_dataset`` return: the recipe, built by a loader call.

    ``dataset`` is the opened dataset (opened at once, so a wrong path fails where it is given);
    ``wrappers`` the ``LimitDataset`` / ``RepeatDataset`` around it, innermost first."""

    path: Any
    split_part: str
    worker_config: WorkerConfig
    batch_size: int | None
    global_batch_size: Any  # int, datareel.RampUp, [(from_global_batch, G), ...] or None
    task_encoder: Any
    repeat: bool
    shuffle: bool
    virtual_epoch_length: int = 0
    open_kwargs: dict[str, Any] = field(default_factory=dict)
    packing_buffer_size: int | None = None  # online packing: windows of this many input samples
    handler: Any = None  # Energon's error handler: told of every failing sample (see EnergonLoader)
    allow_batch_size_change: bool = False  # restores accept another global batch size at a batch boundary
    dataset: Any = None  # the opened Source or Blend
    wrappers: tuple[Limit | Repeat, ...] = ()
    val: bool = False  # from get_val_dataset(s): read in Energon's val order (datareel.energon.val)
    drop_last: bool = False  # get_val_dataset(batch_drop_last=True): each worker drops its partial batch
    cache_pool: Any = None  # get_(savable_)loader(cache_pool=): the task encoder's ``self.cache``
    # Energon's order options (shuffle_buffer_size, max_samples_per_sequence, parallel_shard_iters,
    # shuffle_over_epochs_multiplier): datareel's order needs none; adopting a megatron.energon state does
    energon_order: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # megatron.energon's WorkerConfig read by its fields (datareel.energon.foreign)
        from .foreign import as_worker_config

        self.worker_config = as_worker_config(self.worker_config, "worker_config")

    def __bool__(self) -> bool:  # a spec is a value, whatever its length
        return True
