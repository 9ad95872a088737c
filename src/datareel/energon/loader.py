"""``EnergonLoader``: a datareel Loader with Energon's loader methods and iteration conventions.

Restored states are agreed across the data-parallel group at the first iteration after a
restore (or construction): Megatron saves ``save_state_rank()`` into one file per rank and
restores only where a file exists, so after the world grows the new ranks restored nothing.
One all-gather of the (~200-byte) restored states lets them adopt the others' state; ranks
that restored different states raise, naming the ranks.  ``get_savable_loader(...,
agree_restored_state=False)`` turns the collective off.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch.distributed as torch_dist

from .. import dist
from ..blend.open import open_dataset
from ..blend.tree import Blend
from ..errors import DatareelError, StateMismatchError, check_int
from ..loader import Loader
from ..plan.schedule import BatchSchedule
from ..reel import WindowedStage
from ..sources.base import Source

if TYPE_CHECKING:
    from .datasets import DatasetSpec, WorkerConfig

log = logging.getLogger("datareel")


class _Unbatched:
    """batch_size=None: hand samples out one by one (Energon's meaning), skipping batch/encode_batch."""

    def __init__(self, encoder: Any):
        self.encode_sample = getattr(encoder, "encode_sample", lambda sample: sample)

    def batch(self, samples: list[Any]) -> Any:
        return samples[0]


class EnergonLoader:
    """A datareel Loader with Energon's loader methods and iteration conventions."""

    def __init__(
        self,
        spec: DatasetSpec,
        config: WorkerConfig,
        prefetch_factor: int | None,
        agree_restored_state: bool = True,
    ):
        if spec.batch_size is not None:
            check_int(spec.batch_size, "batch_size", minimum=1)
        micro = spec.batch_size or 1
        self.explicit_global = spec.global_batch_size is not None
        G = spec.global_batch_size if self.explicit_global else micro * config.world_size
        encoder = _Unbatched(spec.task_encoder) if spec.batch_size is None else spec.task_encoder
        if getattr(spec.task_encoder, "decoder", "absent") is None:
            spec.open_kwargs.setdefault("decode", False)
        open_kwargs = dict(spec.open_kwargs)
        handler = spec.handler
        opened = isinstance(spec.path, (Source, Blend))  # get_val_datasets hands out opened sources
        dataset = spec.path if opened else open_dataset(spec.path, split=spec.split_part, **open_kwargs)
        self.spec, self.worker_config = spec, config
        self.loader = Loader(
            dataset,
            global_batch_size=G,
            micro_batch_size=micro,
            seed=config.seed_offset,
            shuffle=spec.shuffle,
            rank=config.rank,
            world_size=config.world_size,
            num_workers=config.num_workers,
            task_encoder=encoder,
            repeat=spec.repeat,
            data_parallel_group=config.data_parallel_group,
            prefetch_factor=prefetch_factor if config.num_workers else None,
            persistent_workers=bool(config.num_workers),
            # Energon skips a sample whose handler returns; datareel substitutes one (exactly-once order kept)
            on_error="substitute" if handler is not None else "raise",
            error_handler=handler,
            stage=_stage(spec),
        )
        self._iterator: Any = None
        self._start = self.loader.state_dict()  # where every new pass begins
        self.agree_restored_state = bool(agree_restored_state)
        self._restored: dict[str, Any] | None = None  # what restore_state_rank gave this rank, if anything
        self._agreed = False  # the restored states were agreed across the group since the last restore

    # -- iteration: Energon's virtual epochs (virtual_epoch_length batches per for-loop) -------------
    def __iter__(self) -> Any:
        limit = self.spec.limit if self.spec.limit is not None else (self.spec.virtual_epoch_length or None)
        if self._iterator is None:
            self._agree()
            self._iterator = iter(self.loader)
        count = 0
        while limit is None or count < limit:
            try:
                batch = next(self._iterator)
            except StopIteration:  # a finite pass ended: the next `for` starts it again (Energon's val loaders)
                self._iterator = None
                self.loader.load_state_dict(self._start)
                return
            count += 1
            yield batch
        if self.spec.limit is not None:
            self._iterator = None
            if self.spec.reset_after_epoch:  # LimitDataset(reset_after_epoch=True): the same batches each pass
                self.loader.load_state_dict(self._start)

    def __len__(self) -> int:
        """Batches this rank yields per epoch (Energon's ``len``): the virtual epoch, or one pass."""
        if self.spec.virtual_epoch_length:
            return self.spec.virtual_epoch_length
        if self.spec.repeat and self.spec.limit is not None:  # LimitDataset(RepeatDataset(...), length)
            return self.spec.limit
        length = self.loader.length if self.loader.length is not None else self.loader.plan.epoch_length
        if length is None:
            raise TypeError("a weighted blend is endless: set virtual_epoch_length to give the loader a length")
        batches = self.loader.layout.rank_steps(self.loader.rank, length)
        return batches if self.spec.limit is None else min(self.spec.limit, batches)

    # -- state, Energon's calling conventions --------------------------------------------------------
    def save_state_rank(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def restore_state_rank(self, state: Any) -> None:
        state = _one_state(state)
        self._restore(lambda: self.loader.load_state_dict(state, allow_batch_size_change=self._allow_change))
        self._restored, self._agreed = state, False

    def _agree(self) -> None:
        """Collective, once after construction or a per-rank restore: ranks that restored nothing adopt
        the state the others restored; ranks that restored different states raise."""
        if self._agreed:
            return
        self._agreed = True
        group, world = self.loader.group, self.loader.world_size
        if not (self.agree_restored_state and dist.initialised() and world > 1):
            return
        if torch_dist.get_world_size(group) != world:  # ranks simulated in one process: nothing to agree with
            return
        restored = {r: s for r, s in enumerate(dist.gather_to_all(self._restored, group)) if s is not None}
        if not restored:
            return
        first = min(restored)
        odd = sorted(r for r, s in restored.items() if s != restored[first])
        if odd:
            raise DatareelError(
                f"ranks restored different loader states: ranks {odd} differ from rank {first}'s (ranks that "
                f"restored a state: {sorted(restored)}); every rank must restore the same checkpoint step, or "
                f"none (a rank without a state file adopts the others')"
            )
        if self._restored is None:
            log.info(
                "rank %d restored no loader state; adopting the state restored by ranks %s",
                self.loader.rank,
                sorted(restored),
            )
            self._restore(
                lambda: self.loader.load_state_dict(restored[first], allow_batch_size_change=self._allow_change)
            )
            self._restored = restored[first]

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
        self._restore(
            lambda: self.loader.restore_state_global(
                None if state is None else _one_state(state),
                src_rank=src_rank,
                allow_batch_size_change=self._allow_change,
            )
        )
        self._agreed = True  # a collective restore leaves every rank at the same state

    @property
    def _allow_change(self) -> bool:
        return self.spec.allow_batch_size_change

    def _restore(self, restore: Any) -> None:
        self._iterator = None
        try:
            restore()
        except StateMismatchError as exc:
            if "global_batch_size" in exc.differences and not self.explicit_global:
                saved, now = (_describe(v) for v in exc.differences["global_batch_size"])
                raise StateMismatchError(
                    f"the checkpoint's global batch is {saved} samples, this job's would be {now} (batch_size × "
                    f"world_size, since get_train_dataset got no global_batch_size): restoring would change the "
                    f"global batches. Pass global_batch_size={saved} to get_train_dataset (datareel then uses "
                    f"gradient accumulation: batch_size × world_size must divide it) to resume on this world "
                    f"size with the same global batches; or pass allow_batch_size_change=True to get_train_dataset "
                    f"to continue the same samples in global batches of the new size, from a global-batch "
                    f"boundary.\n{exc}",
                    exc.differences,
                ) from None
            raise

    def __getattr__(self, name: str) -> Any:  # cursor, accumulation_steps, close, ...
        return getattr(self.loader, name)


def _describe(schedule: Any) -> Any:
    """A state's ``global_batch_size`` as get_train_dataset takes it: the int, or the schedule in words."""
    if isinstance(schedule, int):
        return schedule
    try:
        return BatchSchedule.from_spec(schedule).describe()
    except DatareelError:
        return schedule


def _stage(spec: DatasetSpec) -> WindowedStage | None:
    """Online packing for ``packing_buffer_size`` (windows of that many inputs); a generator encoder
    alone gets the default windowed stage from the Loader."""
    if spec.packing_buffer_size is None:
        return None
    return WindowedStage(window=spec.packing_buffer_size, pack=True)


def _one_state(state: Any) -> Any:
    """A datareel state from a per-rank dict or an Energon-style list of per-rank states."""
    if isinstance(state, (list, tuple)):
        states = [s for s in state if s is not None]
        if not states:
            raise DatareelError("restore: the global state holds no rank's state")
        if any(s != states[0] for s in states[1:]):
            raise DatareelError(
                "restore: the global state holds different states per rank; it was not written by "
                "datareel's save_state_global"
            )
        return states[0]
    return state
