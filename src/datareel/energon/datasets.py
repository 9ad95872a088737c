"""Energon's dataset and loader factories: ``get_train_dataset``, ``get_val_dataset(s)``, ``get_savable_loader``,
``get_loader``, ``LimitDataset``, ``RepeatDataset`` (arguments checked; unhonourable ones refused by name).

The values they make and take (``WorkerConfig``, ``DatasetSpec``) live in :mod:`.spec` and are importable
from here as before.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from ..blend.open import open_dataset
from ..blend.tree import Blend, Concat
from ..errors import INT64_LIMIT, OptionError, check_int
from ..sources.base import Source
from .batch_blend_spec import BatchBlendSpec
from .decoding import decoding_options
from .energon_loader import EnergonLoader
from .foreign import as_worker_config
from .loader_args import LoaderOptions, check_sample_type, default_handler
from .multiplier import energon_multiplier
from .spec import DatasetSpec, Limit, Repeat, WorkerConfig
from .task_encoder.tolerance import check_failure_tolerance
from .wrappers.repeat_limit import LimitDataset, RepeatDataset

__all__ = [
    "DatasetSpec",
    "Limit",
    "LimitDataset",
    "Repeat",
    "RepeatDataset",
    "WorkerConfig",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
    "get_val_datasets",
]

log = logging.getLogger("datareel")

_BUFFER_ARGS = ("shuffle_buffer_size", "max_samples_per_sequence", "parallel_shard_iters")
_explained: set[str] = set()


class EnergonDataset(DatasetSpec):
    """What ``get_train_dataset`` / ``get_val_dataset`` return: the :class:`~.spec.DatasetSpec`, with Energon's
    ``len(dataset)``: the batches (samples, unbatched) one rank's loader yields per pass, its workers' shares
    summed; a weighted blend has none (give ``virtual_epoch_length``)."""

    def __len__(self) -> int:
        loader = EnergonLoader(self, self.worker_config, None, agree_restored_state=False)
        try:
            return len(loader)
        finally:
            loader.close()


def _explain_once(name: str, message: str) -> None:
    if name not in _explained:
        _explained.add(name)
        log.info("datareel.energon: %s", message)


def _open(path: Any, split_part: str, open_kwargs: dict[str, Any], task_encoder: Any, where: str = "") -> Any:
    """The dataset a spec reads, opened now: a wrong path raises here, as ``open_dataset`` would; a
    ``sample_type`` it does not yield is refused (Energon's check)."""
    check_failure_tolerance(task_encoder, where or "get_train_dataset")  # up front: no hook's argument dropped
    sample_type = open_kwargs.pop("sample_type", None)
    if isinstance(path, (Source, Blend)):  # get_val_datasets hands out opened sources
        dataset = path
    else:
        dataset = open_dataset(path, split=split_part, **decoding_options(open_kwargs, task_encoder, where))
    check_sample_type(dataset, sample_type, where or "get_train_dataset")
    return dataset


def _check_common(kwargs: dict[str, Any], where: str) -> dict[str, Any]:
    for name in _BUFFER_ARGS:
        if name in kwargs:
            kwargs.pop(name)
            _explain_once(
                name,
                f"{name} is accepted and not needed: datareel shuffles the whole reel with a "
                f"keyed permutation (no buffers), so order and restore do not depend on it",
            )
    names = ("split_config", "dataset_config", "image_decode", "trust_dataset_code")
    open_kwargs = {k: kwargs.pop(k) for k in names if k in kwargs}
    if "handler" in kwargs:  # not an argument of open_dataset: get_*_dataset moves it to DatasetSpec.handler
        open_kwargs["handler"] = kwargs.pop("handler")
    if "subflavors" in kwargs:
        open_kwargs["subflavors"] = kwargs.pop("subflavors")
    if "sample_type" in kwargs:  # checked against the opened dataset (loader_args.check_sample_type)
        open_kwargs["sample_type"] = kwargs.pop("sample_type")
    if kwargs:
        raise OptionError(
            f"{where}: datareel.energon cannot honour {sorted(kwargs)} (for example auto_decode/av_decode); "
            f"drop them or use datareel's own API"
        )
    return open_kwargs


def _check_buffer(packing_buffer_size: int | None, where: str) -> int | None:
    if packing_buffer_size is None:
        return None
    return check_int(packing_buffer_size, "packing_buffer_size", minimum=1, where=where)


def get_train_dataset(
    path: Any,
    *,
    split_part: str = "train",
    worker_config: WorkerConfig,
    batch_size: int | None,
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    shuffle_buffer_size: int | None = None,
    max_samples_per_sequence: int | None = None,
    virtual_epoch_length: int = 0,
    shuffle_over_epochs_multiplier: int | None = 1,
    task_encoder: Any = None,
    repeat: bool = True,
    global_batch_size: Any = None,
    allow_batch_size_change: bool = False,
    **kwargs: Any,
) -> DatasetSpec:
    """Energon's ``get_train_dataset``; ``batch_size`` is the per-rank micro-batch.

    New: ``global_batch_size`` (default ``batch_size × world_size``, i.e. no
    gradient accumulation).  With it, a checkpoint restores on any world size
    that divides it; without it, restoring on another world size is refused.
    It may be a schedule: ``datareel.RampUp(*args.rampup_batch_size, args.global_batch_size)``
    for Megatron's ``--rampup-batch-size``, or ``[(from_global_batch, G), ...]``.
    ``allow_batch_size_change=True`` lets ``restore_state_rank`` / ``restore_state_global`` accept
    a checkpoint saved with another global batch size, at a global-batch boundary (the same samples
    follow, cut into the new sizes; docs/guarantees.md).
    """
    buffers = {"shuffle_buffer_size": shuffle_buffer_size, "max_samples_per_sequence": max_samples_per_sequence}
    order = {**buffers, "parallel_shard_iters": kwargs.get("parallel_shard_iters")}
    open_kwargs = _check_common({**kwargs, **{k: v for k, v in buffers.items() if v is not None}}, "get_train_dataset")
    packing_buffer_size = _check_buffer(packing_buffer_size, "get_train_dataset")
    shuffle_over_epochs_multiplier = energon_multiplier(shuffle_over_epochs_multiplier, "get_train_dataset: ")
    if shuffle_over_epochs_multiplier not in (1, None):  # one permutation over k epochs; -1: endless (open_dataset's)
        open_kwargs["shuffle_over_epochs_multiplier"] = shuffle_over_epochs_multiplier
    if batch_drop_last and not repeat:
        raise OptionError(
            "get_train_dataset: batch_drop_last=True with repeat=False is not supported; datareel "
            "splits the last, partial global batch (docs/guarantees.md)"
        )
    handler = default_handler(open_kwargs.pop("handler", None), worker_config)
    return EnergonDataset(
        path,
        split_part,
        worker_config,
        batch_size,
        global_batch_size,
        task_encoder,
        repeat,
        shuffle=shuffle_over_epochs_multiplier is not None,
        virtual_epoch_length=virtual_epoch_length,
        open_kwargs=open_kwargs,
        packing_buffer_size=packing_buffer_size,
        handler=handler,
        allow_batch_size_change=bool(allow_batch_size_change),
        dataset=_open(path, split_part, open_kwargs, task_encoder, "get_train_dataset"),
        energon_order={
            **order,
            "shuffle_over_epochs_multiplier": shuffle_over_epochs_multiplier,
            "batch_drop_last": bool(batch_drop_last),  # Energon's len() of a train pass counts whole batches
        },
    )


def get_val_dataset(
    path: Any,
    *,
    split_part: str = "val",
    worker_config: WorkerConfig,
    batch_size: int,
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    limit: int | None = None,
    task_encoder: Any = None,
    **kwargs: Any,
) -> DatasetSpec:
    """Energon's ``get_val_dataset``: one pass, in order, every sample once over all ranks.

    The batches, their order and what every later ``for`` over the loader yields are Energon's
    (each rank's workers read contiguous slices; see :mod:`datareel.energon.val`); ``limit``
    (``None`` or ``<= 0``: none) caps each pass at that many batches, the same ones every pass."""
    open_kwargs = _check_common(dict(kwargs), "get_val_dataset")
    packing_buffer_size = _check_buffer(packing_buffer_size, "get_val_dataset")
    if limit is not None:
        check_int(limit, "limit", minimum=-INT64_LIMIT, where="get_val_dataset")
    handler = default_handler(open_kwargs.pop("handler", None), worker_config)
    return EnergonDataset(
        path,
        split_part,
        worker_config,
        batch_size,
        None,
        task_encoder,
        repeat=False,
        shuffle=False,
        open_kwargs=open_kwargs,
        packing_buffer_size=packing_buffer_size,
        handler=handler,
        dataset=_open(path, split_part, open_kwargs, task_encoder, "get_val_dataset"),
        wrappers=(Limit(int(limit), reset_after_epoch=True),) if limit is not None and limit > 0 else (),
        val=True,
        drop_last=bool(batch_drop_last),
    )


def get_savable_loader(
    dataset: Any,
    *,
    worker_config: WorkerConfig | None = None,
    prefetch_factor: int | None = 2,
    agree_restored_state: bool = True,
    **kwargs: Any,
) -> EnergonLoader:
    """Energon's ``get_savable_loader``: the loader, with Energon's save/restore methods.

    ``cache_pool`` is the task encoder's ``self.cache``; ``watchdog_timeout_seconds`` (default 60;
    ``None``: off), ``watchdog_initial_timeout_seconds`` and ``fail_on_timeout`` time each batch's
    ``next()`` (:mod:`.watchdog`); ``gc_collect_every_n_steps`` runs ``gc.collect()`` every n batches.
    ``agree_restored_state`` (datareel's): at the first iteration after a ``restore_state_rank``
    (or none), every rank of the data-parallel group shares what it restored (one all-gather of
    ~200 bytes), so ranks without a state file adopt the others' state when the world grew, and
    ranks that restored different states raise.  Every rank must iterate the loader; pass
    ``False`` to skip the collective."""
    return _loader(dataset, worker_config, prefetch_factor, agree_restored_state, kwargs, "get_savable_loader", 0)


def get_loader(
    dataset: Any, *, worker_config: WorkerConfig | None = None, prefetch_factor: int = 2, **kwargs: Any
) -> EnergonLoader:
    """Energon's ``get_loader`` (datareel's loaders can always save); its ``gc_collect_every_n_steps``
    defaults to Energon's 10."""
    return _loader(dataset, worker_config, prefetch_factor, True, kwargs, "get_loader", 10)


def _loader(
    dataset: Any, config: Any, prefetch: Any, agree: bool, kwargs: dict[str, Any], where: str, gc_every: int
) -> Any:
    from .wrappers.base import as_spec  # the dataset-level API's values become specs

    options, cache_pool = LoaderOptions.of(dict(kwargs), where, gc_every)
    if prefetch is not None:
        check_int(prefetch, "prefetch_factor", minimum=1, where=where)
    dataset, options = as_spec(dataset, options, where)
    if isinstance(dataset, BatchBlendSpec):  # BlendDataset / MixBatchDataset: a loader per child (.batch_blend)
        from .batch_blend import blend_loader

        return blend_loader(dataset, config, prefetch, agree, options, cache_pool, where)
    if cache_pool is not None:
        dataset = replace(dataset, cache_pool=cache_pool)
    config = as_worker_config(config, where) or dataset.worker_config
    return EnergonLoader(dataset, config, prefetch, agree, options)


def get_val_datasets(path: Any, **kwargs: Any) -> list[tuple[DatasetSpec, Any]]:
    """Energon's ``get_val_datasets``: one ``(dataset, source)`` per validation dataset.

    A metadataset whose val split holds several datasets gives one pair per dataset (each read
    in its own pass, as Energon does); a single dataset gives one pair.  ``kwargs`` are
    :func:`get_val_dataset`'s.  ``source`` is the opened datareel source (it has ``.name``).
    """
    spec = get_val_dataset(path, **kwargs)
    children = spec.dataset.children if isinstance(spec.dataset, Concat) else (spec.dataset,)
    return [(replace(spec, path=child, dataset=child), child) for child in children]
