"""``EnergonLoader``: a datareel Loader with Energon's loader methods and iteration conventions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.distributed as torch_dist

from ..blend.open import open_dataset
from ..errors import DatareelError, StateMismatchError, check_int
from ..loader import Loader

if TYPE_CHECKING:
    from .datasets import DatasetSpec, WorkerConfig


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
        batches = self.loader.layout.rank_steps(self.loader.rank, length)
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
        self._restore(
            lambda: self.loader.restore_state_global(None if state is None else _one_state(state), src_rank=src_rank)
        )

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
            raise DatareelError(
                "restore: the global state holds different states per rank; it was not written by "
                "datareel's save_state_global"
            )
        return states[0]
    return state
