"""What Energon's batch-granular blends (``BlendDataset``, ``MixBatchDataset``) are in the facade: a recipe of
child datasets and weights, checked where it is made; :mod:`.batch_blend` builds the loader that runs it.

Each child is what ``get_train_dataset`` returns (its own task encoder, batch size, global batch size and
workers), endless, unwrapped; all children and the blend sit at the same place (the same rank, world size and
workers per rank).  The weights are finite numbers > 0, in any scale (Energon's are relative too).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np

from ..errors import OptionError, check_int
from ..plan.batch_blend import choice
from .foreign import as_worker_config
from .passes import local_share
from .spec import DatasetSpec
from .wrapper_config import check_wrapper_config

__all__ = ["BatchBlendSpec"]


class BatchBlendSpec:
    """A batch-granular blend of ``datasets`` by ``weights``: ``batch_size=None`` draws each batch from one child
    (``BlendDataset``); a ``batch_size`` fills that many slots of each batch, each from one child, and mixes them
    with ``batch_mix_fn`` (``MixBatchDataset``).  Values, read by :class:`~.batch_blend.BatchBlendLoader`."""

    kind = "BatchBlend"

    def __init__(
        self,
        dataset_weights: tuple[Any, ...],
        worker_config: Any,
        batch_size: int | None = None,
        batch_mix_fn: Any = None,
    ):
        where = type(self).__name__
        if not dataset_weights:
            raise OptionError(f"{where}() got no datasets: pass ({where}((dataset, weight), ...)) with at least one")
        pairs = [_pair(item, i, where) for i, item in enumerate(dataset_weights)]
        self.datasets: tuple[DatasetSpec, ...] = tuple(_child(d, i, where) for i, (d, _) in enumerate(pairs))
        self.weights: tuple[float, ...] = tuple(_weight(w, i, where) for i, (_, w) in enumerate(pairs))
        self.dataset_weights = tuple(zip(self.datasets, self.weights))
        first = self.datasets[0]
        for i, child in enumerate(self.datasets[1:], 1):
            if not child.worker_config == first.worker_config:
                raise OptionError(
                    f"{where}: dataset {i} was made with {_place(child.worker_config)}, dataset 0 with "
                    f"{_place(first.worker_config)}; a blend's datasets are read in lockstep by one rank: give "
                    f"every get_train_dataset the same worker_config"
                )
        config = as_worker_config(worker_config, where)
        check_wrapper_config(first, config, where)
        self.worker_config = config if config is not None else first.worker_config
        self.batch_size = None if batch_size is None else check_int(batch_size, "batch_size", minimum=1, where=where)
        if batch_mix_fn is not None and not callable(batch_mix_fn):
            raise OptionError(f"{where}: batch_mix_fn={batch_mix_fn!r} is not callable; give a function of a list")
        if inspect.isgeneratorfunction(batch_mix_fn):
            raise OptionError(
                f"{where}: batch_mix_fn={getattr(batch_mix_fn, '__name__', batch_mix_fn)!r} is a generator (several "
                f"batches per mixed batch), which would need a position inside its output to save; return one batch"
            )
        self.batch_mix_fn = batch_mix_fn if batch_mix_fn is not None else _as_list
        try:  # the seed and the weights, checked up front (too unequal weights are refused here)
            choice(self.seed, self.weights, [0])
        except OptionError as exc:
            raise OptionError(f"{where}: {exc}") from None

    @property
    def seed(self) -> int:
        """The blend's seed: its ``WorkerConfig.seed_offset`` (each child keeps its own for its own order)."""
        return self.worker_config.seed_offset

    def __len__(self) -> int:
        """Energon's ``len`` (its ``len_rank``): the batches one rank's loader yields per pass of its datasets
        (:meth:`length`)."""
        return self.length([len(dataset) for dataset in self.datasets])

    def length(self, lengths: list[int]) -> int:
        """Energon's ``len`` from each dataset's (one rank's batches per pass): ``BlendDataset``, their sum;
        ``MixBatchDataset``, per worker the slots of every dataset in batches of ``batch_size`` (the last one
        partial), summed over the rank's workers."""
        if self.batch_size is None:
            return sum(lengths)
        workers, size = self.worker_config.num_workers, self.batch_size
        shares = (sum(local_share(n, workers, w) for n in lengths) for w in range(max(workers, 1)))
        return sum(-(-share // size) for share in shares)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        shown = ", ".join(f"({d.path!s}, {w!r})" for d, w in self.dataset_weights)
        extra = "" if self.batch_size is None else f", batch_size={self.batch_size}"
        return f"{type(self).__name__}({shown}{extra})"


def _place(config: Any) -> str:
    return f"WorkerConfig(rank={config.rank}, world_size={config.world_size}, num_workers={config.num_workers})"


def _as_list(batches: list[Any]) -> list[Any]:
    """Energon's default ``batch_mix_fn``: the list of the slots' batches, as they are."""
    return batches


def _pair(item: Any, i: int, where: str) -> tuple[Any, Any]:
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise OptionError(
            f"{where}: argument {i} is {type(item).__name__} {item!r:.80}, not a (dataset, weight) pair; pass "
            f"{where}((get_train_dataset(...), weight), ...)"
        )
    return item[0], item[1]


def _child(dataset: Any, i: int, where: str) -> DatasetSpec:
    if isinstance(dataset, BatchBlendSpec):
        raise OptionError(
            f"{where}: dataset {i} is a {type(dataset).__name__}; batch-granular blends do not nest. Put its "
            f"datasets into this one with their weights multiplied, or blend samples in a metadataset"
        )
    build = getattr(dataset, "build", None)
    if not isinstance(dataset, DatasetSpec) and callable(build) and hasattr(dataset, "__datareel_factory__"):
        dataset = build()
    if not isinstance(dataset, DatasetSpec):
        raise OptionError(
            f"{where}: dataset {i} is a {type(dataset).__name__}, not what datareel.energon.get_train_dataset "
            f"returns (a dataset built by megatron.energon cannot be loaded here); pass get_train_dataset(...)"
        )
    refused = []
    if dataset.val:
        refused.append("it is a val dataset (get_val_dataset): pass get_train_dataset(...)")
    if not dataset.repeat:
        refused.append("it reads one pass (repeat=False): a blend's children are endless, drop repeat=False")
    if dataset.wrappers:
        names = sorted({type(w).__name__ + "Dataset" for w in dataset.wrappers})
        refused.append(f"it is wrapped in {', '.join(names)}: wrap the blend's loader's iteration instead")
    if dataset.virtual_epoch_length:
        refused.append(
            f"it has virtual_epoch_length={dataset.virtual_epoch_length}: a blend's children are endless, drop it"
        )
    if refused:
        raise OptionError(f"{where}: dataset {i} cannot be blended: {'; '.join(refused)}")
    return dataset


def _weight(weight: Any, i: int, where: str) -> float:
    ok = not isinstance(weight, bool) and isinstance(weight, (int, float, np.integer, np.floating))
    if not ok or not math.isfinite(weight) or weight <= 0:
        raise OptionError(
            f"{where}: dataset {i} has weight {weight!r}; each weight must be a finite number > 0 (weights are "
            f"relative: 2 and 8 draw 20% and 80%); leave a dataset out rather than give it weight 0"
        )
    return float(weight)
