"""Energon's ``megatron.energon.worker``: ``WorkerConfig``, where this process sits (rank, world size,
workers per rank) and what happens to a failing sample (``global_error_handler``,
``restore_error_handler``, Energon's ``(exception, sample, sources)`` handlers)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch.distributed as torch_dist
import torch.utils.data

from ..errors import OptionError
from .task_encoder.base import log_exception, reraise_exception

__all__ = ["ErrorHandler", "FailedSample", "WorkerConfig", "Activation", "datareel_error_handler"]

log = logging.getLogger("datareel")
_explained: set[str] = set()

ErrorHandler = Callable[[Exception, Any, Any], None]
"""Energon's error handler: ``handler(exception, sample, sources)``; returning skips the sample, raising stops."""


@dataclass
class WorkerConfig:
    """Where this process sits: ``rank`` / ``world_size`` of the data-parallel group, workers per rank.

    ``seed_offset`` is datareel's seed.  ``global_error_handler`` is told of every sample that fails
    while iterating (Energon's default logs it and goes on: :func:`log_exception`), ``restore_error_handler``
    of one that fails while ``restore_sample`` makes it again (default: :func:`reraise_exception`).  The
    debug fields are accepted; a ``worker_debug_path`` is answered by one log line (datareel writes no
    worker debug logs)."""

    rank: int
    world_size: int
    num_workers: int
    data_parallel_group: Any = None
    seed_offset: int = 0
    worker_debug_path: str | None = None
    worker_log_level: int = 0
    global_error_handler: ErrorHandler = log_exception
    restore_error_handler: ErrorHandler = reraise_exception

    #: the config of the loader whose hooks run in this process (Energon's): set when a facade loader is made,
    #: and in its worker processes when they receive its task encoder (:class:`Activation`)
    active_worker_config: ClassVar[WorkerConfig | None] = None
    worker_id_offset: ClassVar[int] = 0

    def __post_init__(self) -> None:
        if self.worker_debug_path is not None and "worker_debug_path" not in _explained:
            _explained.add("worker_debug_path")
            log.info(
                "datareel.energon: WorkerConfig(worker_debug_path=%r) is accepted and nothing is written there: "
                "datareel writes no worker debug logs; the samples of every step follow from the position (list "
                "them with `datareel verify STATE --show N`)",
                self.worker_debug_path,
            )

    @staticmethod
    def default_worker_config(num_workers: int = 4, data_parallel_group: Any = None) -> WorkerConfig:
        """Rank and world size from torch.distributed when initialised, else a single rank."""
        if torch_dist.is_available() and torch_dist.is_initialized():
            return WorkerConfig(
                rank=torch_dist.get_rank(data_parallel_group),
                world_size=torch_dist.get_world_size(data_parallel_group),
                num_workers=num_workers,
                data_parallel_group=data_parallel_group,
            )
        return WorkerConfig(rank=0, world_size=1, num_workers=num_workers, data_parallel_group=data_parallel_group)

    def global_rank(self) -> int:
        """This rank as a rank of the default group (``rank`` when there is no data-parallel group)."""
        if self.data_parallel_group is None:
            return self.rank
        return torch_dist.get_global_rank(self.data_parallel_group, self.rank)

    def config(self) -> dict[str, Any]:
        """Where this config sits, as Energon describes it (the group by its size)."""
        group = self.data_parallel_group
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "num_workers": self.num_workers,
            "data_parallel_group": group.size() if group is not None else None,
        }

    def __eq__(self, other: object) -> bool:
        """Energon compares where a config sits only (rank, world size, workers): also with megatron.energon's."""
        if not all(hasattr(other, name) for name in ("rank", "world_size", "num_workers")):
            return NotImplemented
        return (self.rank, self.world_size, self.num_workers) == (other.rank, other.world_size, other.num_workers)

    __hash__ = None  # type: ignore[assignment]

    # -- Energon's runtime API, for task encoders that read it ------------------------------------------
    def worker_activate(self, sample_index: int = 0, override_global_rank: Any = None, cache_pool: Any = None) -> None:
        """Make this the active config of the process (datareel keys randomness by position: no index kept)."""
        WorkerConfig.active_worker_config = self

    def worker_deactivate(self) -> None:
        if WorkerConfig.active_worker_config is self:
            WorkerConfig.active_worker_config = None

    def worker_push_sample_index(self, sample_index: int) -> None:
        """Accepted (Energon's per-worker sample counter; datareel's indices follow from the reel position)."""

    def worker_pop_sample_index(self) -> None:
        """Accepted (see :meth:`worker_push_sample_index`)."""

    def rank_worker_id(self) -> int:
        """This DataLoader worker's id in its rank (0 in the training process)."""
        info = torch.utils.data.get_worker_info()
        return 0 if info is None else int(info.id)

    def assert_worker(self) -> None:
        """Energon's check that the process is one of this config's workers (datareel starts them itself)."""
        info = torch.utils.data.get_worker_info()
        if self.num_workers > 1 and (info is None or info.num_workers != self.num_workers):
            raise OptionError(
                f"WorkerConfig(num_workers={self.num_workers}).assert_worker(): this process is not one of that "
                f"many DataLoader workers; call it from a task encoder's hook"
            )

    def global_worker_id(self, override_local_worker_id: int | None = None) -> int:
        """``rank × num_workers + the worker's id`` (Energon's numbering)."""
        local = self.rank_worker_id() if override_local_worker_id is None else override_local_worker_id
        return self.rank * self.num_workers + local

    def worker_seed(self, override_local_worker_id: int | None = None) -> int:
        """Energon's per-worker seed (a digest of the global worker id, or the rank without workers, and
        ``seed_offset``).  It depends on the worker count, as Energon's does; randomness that must follow the
        sample on any topology comes from :func:`datareel.sample_rng`."""
        worker = self.rank if self.num_workers == 0 else self.global_worker_id(override_local_worker_id)
        digest = hashlib.sha1(f"{worker},{self.seed_offset}".encode()).digest()
        return int.from_bytes(digest, byteorder="big", signed=False) & 0xFFFFFFFF

    def should_log(self, level: int) -> bool:
        return level <= self.worker_log_level

    def worker_log(self, data: dict[str, Any]) -> None:
        """Accepted: datareel writes no worker debug logs (see ``worker_debug_path``)."""


class Activation:
    """Makes ``config`` the active config where it is unpickled (a spawned worker receiving the encoder), as
    it is where it is made."""

    def __init__(self, config: WorkerConfig):
        self.config = config
        config.worker_activate()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self.config.worker_activate()


class FailedSample:
    """What an Energon handler is given as the sample when datareel's loader reports a failure by key: an
    object with the sample's ``__key__`` and ``__sources__`` (its ``SourceInfo`` records; ``None`` where the
    source keeps none)."""

    __slots__ = ("__key__", "__sources__")

    def __init__(self, key: str, sources: Any = None):
        self.__key__ = key
        self.__sources__ = sources

    def __repr__(self) -> str:
        return f"FailedSample(__key__={self.__key__!r})"


class _Adapted:
    """An Energon handler called the way datareel's loader calls its ``error_handler``: ``(exception, key)``."""

    def __init__(self, handler: ErrorHandler):
        self.handler = handler

    def __call__(self, exc: Exception, key: Any) -> None:
        sample = key if not isinstance(key, str) else FailedSample(key, getattr(exc, "__datareel_sources__", None))
        sources = getattr(sample, "__sources__", None)
        self.handler(exc, sample, list(sources) if sources is not None else None)


def datareel_error_handler(handler: ErrorHandler | None) -> Callable[[Exception, Any], None] | None:
    """``handler`` (Energon's ``(exception, sample, sources)``) as datareel's ``Loader(error_handler=)``."""
    if handler is None or isinstance(handler, _Adapted):
        return handler
    if not callable(handler):
        from ..errors import OptionError

        raise OptionError(f"error handler {handler!r} must be a function (exception, sample, sources) -> None")
    return _Adapted(handler)
