"""An :class:`~.energon_loader.EnergonLoader`'s state methods, Energon's calling conventions: ``save_state_rank`` /
``restore_state_rank`` (a datareel state, a megatron.energon state to adopt, or a val loader's position),
``save_state_global`` / ``restore_state_global``, and the agreement of restored states across the data-parallel
group (see :mod:`.energon_loader`).  A mixin: the loader holds what these read (``loader``, ``spec``,
``worker_config``, ``_val``, ``_passes``, ...)."""

from __future__ import annotations

import logging
from typing import Any

import torch.distributed as torch_dist

from .. import dist
from ..blend.adopted import Adopted, adopted_from_state
from ..errors import ForeignStateError, OptionError, StateMismatchError
from ..loader import Loader
from .adopt.facade import energon_ranks, energon_states, setup_of
from .adopt.remainder import adopt
from .states import batch_size_mismatch, gather_restored, one_state, state_to_adopt
from .val_state import restore_val, this_rank_val, val_state, val_states

log = logging.getLogger("datareel")


class StateMethods:
    """Saving and restoring an Energon loader (see the module docstring)."""

    loader: Loader | None
    _restored: dict[str, Any] | None
    _agreed: bool

    # -- state, Energon's calling conventions --------------------------------------------------------
    def save_state_rank(self) -> dict[str, Any]:
        if self._val is not None:  # Energon's val order: this rank's pass position, same topology (.val_state)
            return val_state(self._val, self._passes, self.worker_config.rank, self.worker_config.world_size)
        self._agree()
        return self._datareel("save_state_rank").state_dict()

    def restore_state_rank(self, state: Any) -> None:
        if state is None:  # Energon's "no state saved yet": the loader starts afresh
            return
        if self._val is not None:
            self._live = None
            restore_val(self._val, self._passes, state, self.worker_config.rank, self.worker_config.world_size)
            return
        self._datareel("restore_state_rank")
        old = energon_states(state)
        if old is not None:  # megatron.energon's own state: adopt the rest of its epoch (datareel.energon.adopt)
            if not isinstance(state, (list, tuple)) and self._in_group():  # gathered at the first iteration
                self._restored, self._agreed = state, False
                return
            if not isinstance(state, (list, tuple)) and self.worker_config.world_size != 1:
                raise ForeignStateError(
                    "restore_state_rank: this is one rank's megatron.energon state; adopting needs every old rank's "
                    "(each held different samples). Pass the list to restore_state_global on every rank: "
                    "loader.restore_state_global(datareel.energon.read_energon_checkpoint(checkpoint_dir))"
                )
            self._restore(lambda: self._adopt_energon(old))
            self._restored, self._agreed = None, True
            return
        state = one_state(state)
        self._restore(lambda: self._load(state))
        self._restored, self._agreed = state, False

    def _in_group(self) -> bool:
        """Whether restored states are agreed across a torch.distributed data-parallel group (see :meth:`_agree`)."""
        loader = self._datareel("restore_state_rank")
        return self.agree_restored_state and dist.initialised() and loader.world_size > 1

    def _adopt_energon(self, states: list[Any]) -> None:
        """Serve the rest of the epoch the megatron.energon job that saved ``states`` had not handed out, then
        datareel's own order from the next epoch (:mod:`.adopt`)."""
        adoption = adopt(states, setup_of(self.spec), shuffle=bool(self.spec.shuffle))
        log.info(
            "adopting a megatron.energon checkpoint of %d ranks x %d workers: %d samples of its epoch %d left",
            adoption.old_world_size,
            adoption.old_workers,
            len(adoption.remainder),
            adoption.epoch,
        )
        self._adopt(Adopted(self._base, adoption.remainder))

    def _load(self, state: Any) -> None:
        """Load a datareel state, over the adopted dataset it records if it records one."""
        adopted = adopted_from_state(self._base, state)
        if adopted is not None and adopted.fingerprint() != self._datareel("restore").dataset.fingerprint():
            self._adopt(adopted)
        elif adopted is None and isinstance(self._datareel("restore").dataset, Adopted):
            self._adopt(self._base)  # a state from before an adoption: the plain dataset again
        self._datareel("restore").load_state_dict(state, allow_batch_size_change=self._allow_change)

    def _datareel(self, what: str) -> Loader:
        if self.loader is None:
            raise OptionError(
                f"{what}: a val loader in Energon's order (get_val_dataset) keeps no datareel position (it has no "
                f"global batches, and nothing to save or restore); Megatron does not checkpoint val loaders (every "
                f"evaluation reads them afresh): save and restore the train loader"
            )
        return self.loader

    def _agree(self) -> None:
        """Collective, once after construction or a per-rank restore, at the first call that iterates,
        saves or reads the position (every rank makes one): ranks that restored nothing adopt the state
        the others restored; ranks that restored different states raise (:func:`.states.state_to_adopt`)."""
        if self._agreed or self.loader is None:
            return
        self._agreed = True
        loader = self.loader
        everyone = gather_restored(self._restored, loader) if self.agree_restored_state else None
        if everyone is None and self._restored is not None and energon_states(self._restored) is not None:
            raise ForeignStateError(
                "restore_state_rank: the other ranks' megatron.energon states could not be gathered (the data-"
                "parallel group is not the whole torch.distributed world of this loader); pass every old rank's "
                "state to restore_state_global: loader.restore_state_global(read_energon_checkpoint(dir))"
            )
        old = None if everyone is None else energon_ranks(everyone)
        if old is not None:  # megatron.energon's per-rank states, one per old rank (Megatron's files)
            self._restore(lambda: self._adopt_energon(old))
            self._restored = None
            return
        adopt = state_to_adopt(self._restored, loader, everyone) if everyone is not None else None
        if adopt is not None:
            self._restore(lambda: self._load(adopt))
            self._restored = adopt

    def save_state_global(self, global_dst_rank: int = 0) -> list[dict[str, Any]] | None:
        """Gathers (and checks) every rank's state; on ``global_dst_rank`` a list with one state per rank."""
        if self._val is not None:  # each rank's own val position (.val_state), gathered as they are
            return val_states(self.save_state_rank(), self.worker_config, global_dst_rank)
        loader = self._datareel("save_state_global")
        self._agree()
        group = self.worker_config.data_parallel_group
        dst = global_dst_rank
        if torch_dist.is_available() and torch_dist.is_initialized() and group is not None:
            dst = torch_dist.get_group_rank(group, global_dst_rank)
        state = loader.save_state_global(dst_rank=dst)
        return None if state is None else [state] * loader.world_size

    def restore_state_global(self, state: Any, src_rank: int | None = None) -> None:
        """``src_rank=None``: every rank passes the global state; else only ``src_rank`` does."""
        if self._val is not None:
            self.restore_state_rank(this_rank_val(state, self.worker_config, src_rank))
            return
        self._datareel("restore_state_global")
        old = None if state is None else energon_states(state)
        if old is not None:  # every old rank's megatron.energon state: adopt the rest of its epoch
            self._restore(lambda: self._adopt_energon(old))
            self._agreed = True
            return
        one = None if state is None else one_state(state, "restore_state_global")
        if one is not None:
            adopted = adopted_from_state(self._base, one)
            if adopted is not None:
                self._adopt(adopted)
        self._restore(
            lambda: self._datareel("restore_state_global").restore_state_global(
                one, src_rank=src_rank, allow_batch_size_change=self._allow_change
            )
        )
        self._agreed = True  # a collective restore leaves every rank at the same state

    @property
    def _allow_change(self) -> bool:
        return self.spec.allow_batch_size_change

    def _restore(self, restore: Any) -> None:
        self._live = None  # a pass left early is not resumed from another position
        if self._stream is not None:
            self._stream.iterator = None
        self._passes.rewind()  # limits and virtual epochs count afresh from the restored position
        try:
            restore()
        except StateMismatchError as exc:
            explained = batch_size_mismatch(exc, self.explicit_global)
            if explained is not None:
                raise explained from None
            raise
