"""The Loader (layer 5): feeds this rank's micro-batch descriptors to a torch DataLoader.

The loader owns one integer, the *cursor* ``P``: how many reel positions all
ranks together have consumed.  It advances only when its iterator hands a batch
to the caller, so prefetched batches never count; after a restore they are
simply made again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from . import dist
from .encoder import ResolvedEncoder, positions_tensor
from .errors import DatareelError, TopologyError
from .execute import ON_ERROR, BatchMaker, ExecOptions, passthrough
from .packing import Packing, PackedReel
from .sampler import DescriptorSampler
from .plan.layout import Layout
from .blend import Blend, build_plan
from .sources.base import Source
from .sources.sequence import from_sequence
from .state import make_state, read_state


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """How batches are computed; free to change between save and restore."""

    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    multiprocessing_context: Any = None
    timeout: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"num_workers={self.num_workers!r} must be an integer >= 0")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            raise ValueError(
                f"prefetch_factor={self.prefetch_factor!r} and persistent_workers="
                f"{self.persistent_workers!r} need worker processes; set num_workers >= 1 or drop them"
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


class Loader:
    """Iterates this rank's micro-batches of a deterministic, topology-free reel.

    Global batch ``b`` is always reel positions ``[b G, (b + 1) G)``; rank ``r``
    reads ``m`` of them per micro-step (see :mod:`datareel.plan.layout`).  The
    state saved by :meth:`state_dict` restores on any world size, worker count
    and micro-batch size whose product ``m W`` divides the rest of the current
    global batch.

    Arguments: ``dataset`` is a :class:`~datareel.Source` (any other sequence is
    wrapped with :func:`~datareel.from_sequence`); ``rank``/``world_size`` default
    to ``data_parallel_group``'s (or the default process group's) when
    torch.distributed is initialised, else ``0``/``1``; ``repeat=False`` reads one
    pass; ``num_workers``, ``prefetch_factor``, ``pin_memory``,
    ``persistent_workers``, ``multiprocessing_context`` and ``timeout`` go to the
    ``torch.utils.data.DataLoader`` and may change freely between save and restore.

    Example::

        loader = datareel.Loader(datareel.from_sequence(data), global_batch_size=32,
                                 micro_batch_size=4, seed=1, num_workers=2)
        it = iter(loader)
        for step in range(100):
            batch = next(it)
        torch.save(loader.state_dict(), "loader.pt")      # or json.dump
        ...
        loader.load_state_dict(torch.load("loader.pt"))  # any world size / workers
    """

    def __init__(
        self,
        dataset: Source | Blend | Any,
        *,
        global_batch_size: int,
        micro_batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int = 0,
        task_encoder: Any = None,
        repeat: bool = True,
        prefetch_factor: int | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        multiprocessing_context: Any = None,
        timeout: float = 0.0,
        data_parallel_group: Any = None,
        packing: Packing | None = None,
        reseed_global_rng: bool = False,
        on_error: str = "raise",
    ):
        if not isinstance(dataset, (Source, Blend)):
            dataset = from_sequence(dataset)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed={seed!r} must be a non-negative integer")
        self.dataset = dataset
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.repeat = bool(repeat)
        self.group = data_parallel_group
        self.rank, world_size = dist.rank_and_world(rank, world_size, data_parallel_group)
        self.layout = Layout(
            global_batch_size=global_batch_size, micro_batch_size=micro_batch_size, world_size=world_size
        )
        self.workers = WorkerOptions(
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            multiprocessing_context=multiprocessing_context,
            timeout=timeout,
        )
        self.plan, self.sources = build_plan(dataset, seed=self.seed, shuffle=self.shuffle)
        if not self.repeat and self.plan.epoch_length is None:
            raise ValueError(
                f"repeat=False reads one pass, but {dataset.name} is an endless weighted mix; use "
                f"datareel.mix_epochized (a finite meta-epoch) or repeat=True"
            )
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error={on_error!r} must be one of {list(ON_ERROR)}")
        if packing is not None and not isinstance(packing, Packing):
            raise ValueError(f"packing={packing!r} must be a datareel.Packing(max_length=..., ...)")
        self.packing = packing
        input_length = None if self.repeat else self.plan.epoch_length
        self.packed = PackedReel(self.plan, self.sources, packing, input_length) if packing else None
        self.pack_at: tuple[int, int] = (0, 0)  # (window, offset) of the cursor in the packed reel
        self.marks: dict[int, tuple[int, tuple[int, int]]] = {}  # step -> (cursor, pack_at) after it
        self._encoder = ResolvedEncoder(task_encoder, packing=packing is not None)
        if packing is not None and packing.over_length == "truncate" and not hasattr(task_encoder, "truncate_sample"):
            raise ValueError("Packing(over_length='truncate') needs task_encoder.truncate_sample(sample, max_length)")
        self._exec = ExecOptions(seed=self.seed, reseed_global=bool(reseed_global_rng), on_error=on_error,
                                 max_length=packing.max_length if packing else None)
        self._cursor = 0
        self._generation = 0
        self._dataloader: DataLoader | None = None

    # -- topology ---------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def global_batch_size(self) -> int:
        return self.layout.global_batch_size

    @property
    def micro_batch_size(self) -> int:
        return self.layout.micro_batch_size

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per rank per global batch: ``G / (m W)``."""
        return self.layout.accumulation_steps

    @property
    def length(self) -> int | None:
        """Positions (packs, with packing) in one pass of a ``repeat=False`` loader; ``None`` if endless."""
        if self.repeat:
            return None
        if self.packed is None:
            return self.plan.epoch_length
        return self.packed.length()

    @property
    def dropped(self) -> int:
        """Samples the packing's over-length policy dropped so far (in windows planned by this process)."""
        return self.packed.dropped if self.packed is not None else 0

    @property
    def cursor(self) -> int:
        """Reel positions consumed by all ranks together (a prefix ``[0, cursor)``)."""
        return self._cursor

    # -- iteration ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        self._generation += 1
        self.marks.clear()
        return _LoaderIterator(self, self._generation)

    def __len__(self) -> int:
        """Micro-batches this rank still yields (``repeat=False`` only)."""
        if self.length is None:
            raise TypeError("a Loader with repeat=True is infinite and has no len()")
        S = self.layout.step_size
        steps = range(-(-self._cursor // S), -(-self.length // S))  # the cursor is a step boundary or the end
        spans = (self.layout.rank_span(s, self.rank, self.length) for s in steps)
        return sum(1 for start, stop in spans if start < stop)

    def _get_dataloader(self) -> DataLoader:
        if self._dataloader is None:
            self._dataloader = DataLoader(
                BatchMaker(self.sources, self._encoder, self._exec),
                batch_size=None,
                sampler=DescriptorSampler(self),
                collate_fn=passthrough,
                # its own generator: DataLoader draws a worker base seed per iterator, which would otherwise
                # advance the training loop's global torch generator (datareel needs no worker seeds)
                generator=torch.Generator().manual_seed(self.seed),
                **self.workers.dataloader_kwargs(),
            )
        return self._dataloader

    def close(self) -> None:
        """Stop worker processes (also done when the loader is garbage-collected)."""
        self._generation += 1
        self._dataloader = None

    # -- state -------------------------------------------------------------------------------
    def _spec(self) -> dict[str, Any]:
        spec = {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "global_batch_size": self.global_batch_size,
            "dataset": self.dataset.fingerprint(),
        }
        if self.packing is not None:
            spec["packing"] = self.packing.fingerprint()
        return spec

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint: JSON-serialisable, identical on every rank, < 1 KB."""
        state = make_state(self._cursor, self._spec())
        if self.packed is not None:
            state["pack"] = list(self.pack_at)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved state, on this loader's topology.

        Raises :class:`~datareel.StateMismatchError` if the state belongs to
        another spec and :class:`~datareel.errors.TopologyError` (a
        ``ValueError``) if ``m W`` cannot split the rest of the current global
        batch.  Iterators made before the call stop working; call ``iter()`` again.
        """
        cursor = read_state(state, self._spec())
        self.layout.check_cursor(cursor)
        pack_at = (0, 0)
        if self.packed is not None:
            pack_at = state.get("pack")
            if not (isinstance(pack_at, list) and len(pack_at) == 2 and all(isinstance(v, int) and v >= 0 for v in pack_at)):
                raise DatareelError(f"state pack={pack_at!r} must be [window, offset]; the state is damaged")
        if self.length is not None and cursor > self.length:
            raise TopologyError(
                f"state cursor={cursor} lies beyond the end of this repeat=False reel "
                f"(length {self.length}); restore it into a loader with repeat=True"
            )
        self._generation += 1
        self._cursor = cursor
        self.pack_at = tuple(pack_at)

    def save_state_global(self, dst_rank: int = 0) -> dict[str, Any] | None:
        """Gather every rank's state, check they agree, return it on ``dst_rank`` (else ``None``).

        Collective over the data-parallel group: every rank must call it.  Ranks
        whose cursors differ (one consumed a micro-batch more than the others)
        make every rank raise :class:`~datareel.DatareelError` naming them.
        Without torch.distributed (one process) it returns :meth:`state_dict`.
        ``dst_rank`` is a rank within the data-parallel group.
        """
        if isinstance(dst_rank, bool) or not isinstance(dst_rank, int) or not 0 <= dst_rank < self.world_size:
            raise TopologyError(f"dst_rank={dst_rank!r} is not a rank of this loader (0 <= rank < {self.world_size})")
        state = self.state_dict()
        dist.check_group(self.group, self.world_size)
        if dist.initialised():
            dist.check_agreement(dist.gather_to_all(state, self.group), "save_state_global")
        return state if self.rank == dst_rank else None

    def restore_state_global(self, state: dict[str, Any] | None, src_rank: int | None = 0) -> None:
        """Restore one state on every rank of the data-parallel group (collective).

        ``src_rank=r``: only rank ``r``'s ``state`` matters and is broadcast;
        the others may pass ``None``.  ``src_rank=None``: every rank passes the
        state itself, and all must pass the same one.
        """
        dist.check_group(self.group, self.world_size)
        if not dist.initialised():
            if state is None:
                raise DatareelError("restore_state_global(None): pass the state returned by save_state_global")
            self.load_state_dict(state)
            return
        if src_rank is None:
            dist.check_agreement(dist.gather_to_all(state, self.group), "restore_state_global(src_rank=None)")
        else:
            state = dist.broadcast(state if self.rank == src_rank else None, src_rank, self.group)
            if state is None:
                raise DatareelError(
                    f"restore_state_global: src_rank={src_rank} passed None; pass the saved state "
                    f"on that rank (or src_rank=None to pass it on every rank)"
                )
        self.load_state_dict(state)

    # Energon's names.
    def save_state_rank(self) -> dict[str, Any]:
        """Alias of :meth:`state_dict` (Energon's name)."""
        return self.state_dict()

    def restore_state_rank(self, state: dict[str, Any]) -> None:
        """Alias of :meth:`load_state_dict` (Energon's name)."""
        self.load_state_dict(state)


class _LoaderIterator:
    """One pass over the loader from the cursor at its creation; advances the cursor on hand-out."""

    def __init__(self, loader: Loader, generation: int):
        self.loader = loader
        self.generation = generation
        self.step = loader.cursor // loader.layout.step_size
        self.inner = iter(loader._get_dataloader())

    def __iter__(self) -> _LoaderIterator:
        return self

    def __next__(self) -> Any:
        loader = self.loader
        if loader._generation != self.generation:
            raise DatareelError(
                "this iterator was made before load_state_dict(), close() or a newer iter(loader); "
                "call iter(loader) again to continue from the loader's cursor"
            )
        try:
            batch = next(self.inner)
        except StopIteration:
            if loader.length is not None and loader._generation == self.generation:
                loader._cursor = loader.length  # every rank ends at the same cursor
                if loader.packed is not None:
                    loader.pack_at = (loader.packed.windows(), 0)
            raise
        if isinstance(batch, dict) and isinstance(batch.get("__positions__"), np.ndarray):
            batch["__positions__"] = positions_tensor(batch["__positions__"])
        if loader.packed is not None:
            loader._cursor, loader.pack_at = loader.marks.pop(self.step)
            self.step += 1
            return batch
        self.step += 1
        consumed = self.step * loader.layout.step_size
        loader._cursor = consumed if loader.length is None else min(consumed, loader.length)
        return batch
