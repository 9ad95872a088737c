"""How batches are computed: the DataLoader's worker options (free to change between save and restore)."""

from __future__ import annotations

import contextlib
import fcntl
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import OptionError, check_int


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """``num_workers``, ``prefetch_factor``, ``pin_memory``, ``persistent_workers``,
    ``multiprocessing_context`` and ``timeout``, passed to ``torch.utils.data.DataLoader``."""

    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    multiprocessing_context: Any = None
    timeout: float = 0.0

    def __post_init__(self) -> None:
        check_int(self.num_workers, "num_workers")
        if self.prefetch_factor is not None:
            check_int(self.prefetch_factor, "prefetch_factor", minimum=1)
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise OptionError(f"timeout={timeout!r} must be a number of seconds >= 0 (0: wait forever)")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            raise OptionError(
                f"prefetch_factor={self.prefetch_factor!r} and persistent_workers="
                f"{self.persistent_workers!r} need worker processes; set num_workers >= 1 or drop them"
            )

    def dataloader(self, dataset: Dataset, sampler: Sampler, *, seed: int) -> DataLoader:
        """The DataLoader that executes descriptors: one batch per descriptor, made in the worker."""
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=sampler,
            collate_fn=passthrough,
            # its own generator: DataLoader draws a worker base seed per iterator, which would otherwise
            # advance the training loop's global torch generator (datareel needs no worker seeds)
            generator=torch.Generator().manual_seed(seed),
            **self.dataloader_kwargs(),
        )

    def dataloader_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "timeout": self.timeout,
        }
        if self.num_workers:
            kwargs["persistent_workers"] = self.persistent_workers
            kwargs["multiprocessing_context"] = self.multiprocessing_context
            if self.prefetch_factor is not None:
                kwargs["prefetch_factor"] = self.prefetch_factor
        return kwargs


def passthrough(batch: Any) -> Any:
    """DataLoader collate_fn: batches are already made in the worker."""
    return batch


RESULT_PIPE_BYTES = 1 << 20
"""Bytes the workers' result pipe holds (Linux: 64 KiB by default; 1 MiB is the default ceiling for
unprivileged processes, ``/proc/sys/fs/pipe-max-size``)."""


def widen_result_pipe(iterator: Any) -> None:
    """Let a worker write a batch of up to ~1 MiB into the DataLoader's result pipe in one go: with the
    default 64 KiB, a 330 KiB batch crossed in 6 writes and reads, each a wait and a context switch for
    the training process (docs/performance.md). Best effort: a torch
    without the attribute, a platform without ``F_SETPIPE_SZ`` or a refusal (the per-user pipe budget)
    leaves the pipe as it is."""
    reader = getattr(getattr(iterator, "_worker_result_queue", None), "_reader", None)
    resize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if reader is None or resize is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fcntl.fcntl(reader.fileno(), resize, RESULT_PIPE_BYTES)
