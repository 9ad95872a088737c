"""The loader of a batch-granular blend (Energon's ``BlendDataset`` / ``MixBatchDataset``), elastic.

One facade loader per child (:class:`~.loader.EnergonLoader`: its own reel, task encoder, batch size, global
batch size and workers).  The blend counts *units*: a unit is one global batch of one child, and unit ``u``
comes from child :func:`~datareel.plan.batch_blend.choice` ``(seed, weights, u)`` -- on every rank the same --
so every child is read in lockstep on all ranks and its state stays rank-independent.  A child without
gradient accumulation (``global_batch_size`` left out, or ``batch_size × world_size``) gives one batch per rank
per unit, as Energon draws one batch per draw; with accumulation a unit is its ``accumulation_steps`` batches
in a row.  ``BlendDataset`` hands out each child batch; ``MixBatchDataset`` fills ``batch_size`` slots with
them and hands out ``batch_mix_fn(slots)``.

State (:mod:`.batch_blend_state`): the unit index and every child's own state; a restore restores each child
(on any topology it accepts by its own rules, e.g. the same global batch size) and the unit.  Restored states
are agreed across the data-parallel group at the first call that iterates or saves, as the facade's loaders do
(ranks without a state file adopt the others'; ranks that restored different states raise).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import torch.distributed as torch_dist

from .. import dist
from ..errors import BatchError, DatareelError, OptionError, SkipSample, TopologyError, restated
from ..plan.batch_blend import block_size, choice
from .batch_blend_spec import BatchBlendSpec
from .batch_blend_state import check_agreement, check_positions, read_state, write_state
from .energon_loader import EnergonLoader
from .foreign import as_worker_config
from .loader_args import LoaderOptions
from .states import gather_restored, one_state, state_to_adopt
from .wrappers.watchdog_dataset import watched

__all__ = ["BatchBlendLoader", "blend_loader"]


def blend_loader(
    blend: BatchBlendSpec, config: Any, prefetch: int | None, agree: bool, options: Any, cache_pool: Any, where: str
) -> BatchBlendLoader:
    """What ``get_loader`` / ``get_savable_loader`` make of a blend; a ``worker_config`` other than the blend's
    is refused (Energon's ``get_loader`` asserts the same)."""
    given = as_worker_config(config, where)
    if given is not None and not given == blend.worker_config:
        raise OptionError(
            f"{where}: worker_config (rank={given.rank}, world_size={given.world_size}, num_workers="
            f"{given.num_workers}) is not the {blend.kind}'s (rank={blend.worker_config.rank}, world_size="
            f"{blend.worker_config.world_size}, num_workers={blend.worker_config.num_workers}); leave it out"
        )
    return BatchBlendLoader(blend, prefetch, agree, options, cache_pool)


class _Mark(NamedTuple):
    """Where a mixed batch that is not handed out yet began: the unit and each child's run (frozen values)."""

    unit: int
    runs: tuple[Any, ...]


class BatchBlendLoader:
    """Iterates a :class:`~.batch_blend_spec.BatchBlendSpec` with Energon's loader methods (see the module)."""

    def __init__(
        self,
        blend: BatchBlendSpec,
        prefetch_factor: int | None,
        agree_restored_state: bool = True,
        options: LoaderOptions | None = None,
        cache_pool: Any = None,
    ):
        self.blend, self.worker_config = blend, blend.worker_config
        self.options = options if options is not None else LoaderOptions()
        quiet = LoaderOptions(watchdog_timeout_seconds=None)  # the watchdog and gc run at the blend's level
        self.children: list[EnergonLoader] = []
        try:
            for spec in blend.datasets:
                spec = spec if cache_pool is None else replace(spec, cache_pool=cache_pool)
                self.children.append(
                    EnergonLoader(spec, spec.worker_config, prefetch_factor, agree_restored_state, quiet)
                )
        except BaseException:
            self.close()
            raise
        self.agree_restored_state = bool(agree_restored_state)
        self._block_size = block_size(blend.weights)
        self._block: tuple[int, np.ndarray | None] = (-1, None)  # (block, int64[K]: the child of each unit in it)
        self._unit = 0  # units begun (a unit: one global batch of one child)
        self._iters: list[Any] = [None] * len(self.children)
        self._pending: list[Any] = []  # MixBatchDataset: the slots of a mixed batch not handed out yet
        self._mark: _Mark | None = None  # and where it began
        self._token = object()  # iterators made before a restore stop
        self._restored: dict[str, Any] | None = None
        self._agreed = False

    # -- iteration ---------------------------------------------------------------------------------------
    def __iter__(self) -> Any:
        self._agree()
        token = self._token
        items = self._batches(token) if self.blend.batch_size is None else self._mixed(token)
        return watched(items, self.options, self.blend)

    def _batches(self, token: object) -> Any:
        while True:
            self._check(token)
            yield self._draw()

    def _mixed(self, token: object) -> Any:
        size, mix = self.blend.batch_size, self.blend.batch_mix_fn
        while True:
            self._check(token)
            if self._mark is None:
                self._mark = _Mark(self._unit, tuple(child.loader.run for child in self.children))
            while len(self._pending) < size:  # a next() that failed leaves the slots drawn: the next continues
                self._pending.append(self._draw())
            slots, self._pending, self._mark = self._pending, [], None  # handed to batch_mix_fn: consumed
            try:
                mixed = mix(slots)
            except SkipSample:
                continue
            except Exception as exc:  # Energon's rule: the worker config's handler is told; if it returns, skip
                handler = getattr(self.worker_config, "global_error_handler", None)
                if handler is None:
                    raise BatchError(f"{self.blend.kind}: batch_mix_fn failed on a mixed batch: {exc!r}") from exc
                handler(exc, slots, None)
                continue
            yield mixed

    def _check(self, token: object) -> None:
        if token is not self._token:
            raise DatareelError(
                f"this iterator of the {self.blend.kind}'s loader was made before restore_state_rank / "
                f"restore_state_global or a newer iter(loader); call iter(loader) again"
            )

    def _child_of(self, unit: int) -> int:
        block, slot = divmod(unit, self._block_size)
        if self._block[0] != block:
            start = block * self._block_size
            units = np.arange(start, start + self._block_size, dtype=np.int64)  # (K,)
            self._block = (block, choice(self.blend.seed, self.blend.weights, units))
        return int(self._block[1][slot])  # type: ignore[index]

    def _draw(self) -> Any:
        """One batch of the child the current unit comes from; the unit ends with that child's global batch."""
        c = self._child_of(self._unit)
        child = self.children[c]
        if self._iters[c] is None:
            self._iters[c] = iter(child)
        try:
            batch = next(self._iters[c])
        except StopIteration:
            self._iters[c] = None
            raise DatareelError(f"{self.blend.kind}: dataset {c} ended; a blend's datasets are endless") from None
        except BatchError:  # counted as consumed by the child: so by the blend
            self._iters[c] = None
            self._advance(child)
            raise
        except BaseException:  # not handed out: the next draw makes it again
            self._iters[c] = None
            raise
        self._advance(child)
        return batch

    def _advance(self, child: EnergonLoader) -> None:
        if child.loader.at_global_batch_boundary:
            self._unit += 1

    def __len__(self) -> int:
        """Energon's ``len``: from the children's lengths (:meth:`.BatchBlendSpec.length`)."""
        return self.blend.length([len(child) for child in self.children])

    def can_restore_sample(self) -> bool:
        """``False``: a blend's batch is not made again from its key (its children's loaders can)."""
        return False

    def restore_sample(self, restore_key: Any) -> Any:
        raise OptionError(
            f"restore_sample({restore_key!r}): a {self.blend.kind}'s loader does not make batches again from their "
            f"keys (can_restore_sample() is False); each child dataset's own loader (get_loader(dataset)) can"
        )

    def close(self) -> None:
        """Stop the children's worker processes (also done when they are garbage-collected)."""
        for child in self.children:
            child.close()

    # -- state ---------------------------------------------------------------------------------------------
    def save_state_rank(self) -> dict[str, Any]:
        """The blend's state (the same dict on every rank; :mod:`.batch_blend_state`)."""
        self._agree()
        children = [child.save_state_rank() for child in self.children]  # each child agrees its own first
        if self._mark is not None:  # a mixed batch begun and not handed out: the state before it
            return write_state(self.blend, self._mark.unit, [run.state_dict() for run in self._mark.runs])
        return write_state(self.blend, self._unit, children)

    def restore_state_rank(self, state: Any) -> None:
        """Continue from ``state`` (a dict from :meth:`save_state_rank`, or a list from :meth:`save_state_global`);
        ``None`` (Energon's "no state saved yet") leaves the loader at its start."""
        if state is None:
            return
        one = one_state(state, "restore_state_rank")
        self._load(one, "restore_state_rank")
        self._restored, self._agreed = one, False

    def save_state_global(self, global_dst_rank: int = 0) -> list[dict[str, Any]] | None:
        """Collective: every rank's state, checked to agree; on ``global_dst_rank`` one per rank, else ``None``."""
        loader = self._group_loader()
        group, world = loader.group, loader.world_size
        dst = global_dst_rank
        if dist.initialised() and group is not None and isinstance(dst, int):
            dst = torch_dist.get_group_rank(group, global_dst_rank)
        if isinstance(dst, bool) or not isinstance(dst, int) or not 0 <= dst < world:
            raise TopologyError(f"global_dst_rank={global_dst_rank!r} is not a rank of this loader's group")
        dist.check_group(group, world)
        state = self.save_state_rank()
        if dist.initialised():
            check_agreement(dist.gather_to_all(state, group), "save_state_global")
        return [state] * world if loader.rank == dst else None

    def restore_state_global(self, state: Any, src_rank: int | None = None) -> None:
        """Collective: ``src_rank=None``, every rank passes the global state; else only ``src_rank`` does."""
        loader = self._group_loader()
        dist.check_group(loader.group, loader.world_size)
        if dist.initialised():
            if src_rank is None:
                check_agreement(dist.gather_to_all(state, loader.group), "restore_state_global(src_rank=None)")
            else:
                state = dist.broadcast(state if loader.rank == src_rank else None, src_rank, loader.group)
        self._load(one_state(state, "restore_state_global"), "restore_state_global")
        self._restored, self._agreed = None, True

    def _group_loader(self) -> Any:
        """The first child's datareel Loader: its rank, world size and data-parallel group are the blend's."""
        loader = self.children[0].loader
        if loader is None:  # children are train datasets (BatchBlendSpec checks): never
            raise DatareelError(f"{self.blend.kind}: dataset 0 has no datareel loader")
        return loader

    def _load(self, state: Any, where: str) -> None:
        """Restore every child and the unit; a refused state leaves the loader where it was."""
        unit, states = read_state(state, self.blend, where)
        before = [child.loader.run.state_dict() for child in self.children]  # type: ignore[union-attr]
        try:
            for c, (child, child_state) in enumerate(zip(self.children, states)):
                try:
                    child.restore_state_rank(child_state)
                except DatareelError as exc:
                    raise restated(exc, f"{where}: dataset {c} of the {self.blend.kind}: {exc}") from None
            begun = [child.loader.global_batch for child in self.children]  # type: ignore[union-attr]
            check_positions(self.blend, unit, begun, where)
        except BaseException:
            for child, child_state in zip(self.children, before):
                child.restore_state_rank(child_state)
            raise
        self._unit, self._iters = unit, [None] * len(self.children)
        self._pending, self._mark, self._token = [], None, object()

    def _agree(self) -> None:
        """Collective, once after construction or a per-rank restore: ranks that restored nothing adopt the
        state the others restored; ranks that restored different states raise (:func:`.states.state_to_adopt`)."""
        if self._agreed:
            return
        self._agreed = True
        if not self.agree_restored_state:
            return
        loader = self._group_loader()
        everyone = gather_restored(self._restored, loader)
        adopt = state_to_adopt(self._restored, loader, everyone) if everyone is not None else None
        if adopt is not None:
            self._load(adopt, "restore_state_rank")
            self._restored = adopt
