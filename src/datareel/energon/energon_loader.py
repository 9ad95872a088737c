"""``EnergonLoader``: a datareel Loader with Energon's loader methods and iteration conventions.

What each ``for`` yields follows Energon's pass structure (:mod:`.passes`, over the datareel loader as
:mod:`.stream` feeds it); a val loader reads in Energon's val order (:mod:`.val`); ``batch_size=None``
hands samples out one by one (:mod:`.unbatched`).

Restored states are agreed across the data-parallel group before anything can observe or save the
loader: Megatron saves ``save_state_rank()`` into one file per rank and restores only where a file
exists, so after the world grows the new ranks restored nothing.  At the first call after
construction or a restore that iterates, saves, or reads the position (``iter``,
``save_state_rank``, ``save_state_global``, ``global_batches``, ``cursor``, ``global_batch``,
``accumulation_steps``, ...), one all-gather of the (~200-byte) restored states lets them adopt the
others' state; ranks that restored different states raise, naming the ranks (:mod:`.states`).  It is a collective:
every rank must make such a call, and make its first one before any other collective that the
others make first (the first ``iter`` or save of a training loop is the common place).
``get_savable_loader(..., agree_restored_state=False)`` turns it off.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ..blend.tree import Concat
from ..errors import OptionError, check_int
from ..execute.encoder import ResolvedEncoder
from ..loader import Loader
from ..options import LoaderOptions as MakerOptions
from ..pipeline import batch_maker
from ..reel import WindowedStage
from ..sources.base import Source
from .batch_failures import drop_failed_batches
from .encoder_stamp import plain_batches, stamp
from .grouping import WINDOW, Grouped, groups_batches
from .loader_args import LoaderOptions
from .loader_restore import SampleRestorer
from .loader_state import StateMethods
from .passes import Epochize, Passes, local_share
from .passes import Limit as LimitStream
from .passes import Repeat as RepeatStream
from .spec import DatasetSpec, Repeat, WorkerConfig
from .stream import LoaderStream, one_pass
from .task_encoder.base import DefaultTaskEncoder
from .task_encoder.cooking import bind_cookers
from .unbatched import Group, Unbatched
from .val import ValPlan
from .worker import Activation

__all__ = ["EnergonLoader", "LoaderStream"]

log = logging.getLogger("datareel")


# Names read from the datareel Loader that hold no restored state: reading them agrees nothing.
_STATIC = frozenset(
    {"world_size", "rank", "micro_batch_size", "seed", "shuffle", "repeat", "dataset", "length", "group"}
)


class EnergonLoader(StateMethods):
    """A datareel Loader with Energon's loader methods and iteration conventions."""

    def __init__(
        self,
        spec: DatasetSpec,
        config: WorkerConfig,
        prefetch_factor: int | None,
        agree_restored_state: bool = True,
        options: LoaderOptions | None = None,
    ):
        if spec.batch_size is not None:
            check_int(spec.batch_size, "batch_size", minimum=1)
        # Energon's default task encoder: typed samples batched into their own type, as Energon gives them
        user = spec.task_encoder if spec.task_encoder is not None else DefaultTaskEncoder()
        grouped = groups_batches(user)  # batch_group_criterion: each unit of the reel is one grouped batch
        micro = 1 if grouped else spec.batch_size or 1
        self.explicit_global = spec.global_batch_size is not None
        if grouped and spec.packing_buffer_size is not None:
            raise OptionError(
                f"task encoder {type(user).__name__} groups batches (batch_group_criterion), which datareel does not "
                f"combine with online packing (packing_buffer_size); leave one out"
            )
        G = spec.global_batch_size if self.explicit_global else micro * config.world_size
        online = spec.packing_buffer_size is not None or grouped
        stamp(
            user, step_shape=(micro, micro * config.world_size), cache_pool=spec.cache_pool, active=Activation(config)
        )
        bind_cookers(user, spec.cache_pool)  # aux stores, primary and cache pool for @cooker(need_*=) cookers
        if grouped:
            encoder: Any = Grouped(user, spec.batch_size)
        else:
            encoder = Unbatched(user, online=online) if spec.batch_size is None else user
        plain_batches(encoder)  # Energon's batches are the encoder's own: no __source__ / __positions__
        if encoder is user and spec.handler is not None:  # a failing batch / encode_batch drops its batch
            drop_failed_batches(user, spec.handler)
        self._window = WINDOW if grouped else spec.packing_buffer_size
        dataset = spec.dataset if spec.dataset is not None else spec.path
        self.spec, self.worker_config = spec, config
        self.options = options if options is not None else LoaderOptions()
        self.loader: Loader | None = None
        self._val: ValPlan | None = None
        self._restorer: SampleRestorer | None = None
        self._stream: LoaderStream | None = None
        on_error = "substitute" if spec.handler is not None else "raise"
        resolved = ResolvedEncoder(encoder, online=online)
        sources = _val_sources(spec, dataset, resolved)
        if sources is not None:  # Energon's val order, exactly (datareel.energon.val)
            made = MakerOptions(  # the batch size is each worker's (its slice's batches: .val)
                global_batch_size=micro,
                micro_batch_size=micro,
                task_encoder=encoder,
                num_workers=config.num_workers,
                on_error=on_error,
                error_handler=spec.handler,
            )
            maker = batch_maker(sources, seed=config.seed_offset, options=made)  # as a Loader's is made
            self._val = ValPlan(
                maker,
                [len(s) for s in sources],
                world_size=config.world_size,
                rank=config.rank,
                num_workers=config.num_workers,
                batch_size=micro,
                drop_last=spec.drop_last,
                prefetch_factor=prefetch_factor,
                seed=config.seed_offset,
            )
            bases: list[Any] = list(self._val.bases)
        else:
            if spec.drop_last:
                raise OptionError(
                    "get_val_dataset: batch_drop_last=True is supported in Energon's val order only, which "
                    "online packing and generator encode_sample do not keep; drop batch_drop_last"
                )
            self._train_args = (G, micro, encoder, on_error, prefetch_factor, online)
            self._base = dataset  # the dataset as opened (an adopted remainder goes in front of it)
            self._make_train(dataset)
            bases = [self._stream]  # datareel's order is the rank's, whatever its workers
        self._passes = Passes([self._wrapped(base, w, len(bases)) for w, base in enumerate(bases)])
        # with worker processes Energon keeps a pass left early and resumes it at the next iter()
        self._keep = config.num_workers > 0
        self._live: Any = None  # a pass left early, resumed by the next iter() (with worker processes)
        self._live_token: object = None
        self.agree_restored_state = bool(agree_restored_state)
        self._restored: dict[str, Any] | None = None  # what restore_state_rank gave this rank, if anything
        self._agreed = False  # the restored states were agreed across the group since the last restore

    def _make_train(self, dataset: Any) -> None:
        """The datareel Loader (and its stream and sample restorer) over ``dataset``: at construction, and again
        over an adopted dataset (:mod:`.adopt`)."""
        spec, config = self.spec, self.worker_config
        G, micro, encoder, on_error, prefetch_factor, online = self._train_args
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
            on_error=on_error,
            error_handler=spec.handler,
            stage=None if self._window is None else WindowedStage(window=self._window, pack=True),
        )
        # passes start where it was built
        order = spec.energon_order
        self._stream = LoaderStream(
            self.loader, self.loader.state_dict(), config.num_workers, online, per_epoch=_len_rule(order)
        )
        self._restorer = SampleRestorer(self.loader)

    def _adopt(self, dataset: Any) -> None:
        """Rebuild the train loader over ``dataset`` (an adopted one), its passes afresh."""
        if self.loader is not None:
            self.loader.close()
        self._make_train(dataset)
        self._passes = Passes([self._wrapped(self._stream, 0, 1)])

    def _wrapped(self, base: Any, worker: int, workers: int) -> Any:
        """One worker's stream: virtual epochs, then the LimitDataset / RepeatDataset wrappers in order."""
        stream = base
        if self.spec.virtual_epoch_length:
            stream = Epochize(stream, local_share(self.spec.virtual_epoch_length, workers, worker))
        where = f"worker {worker} of rank {self.worker_config.rank}"
        for wrapper in self.spec.wrappers:
            if isinstance(wrapper, Repeat):
                stream = RepeatStream(stream, wrapper.repeats, wrapper.restart, where)
            else:
                stream = LimitStream(stream, local_share(wrapper.length, workers, worker))
        return stream

    # -- iteration: Energon's passes (datareel.energon.passes) ----------------------------------------
    def __iter__(self) -> Any:
        self._agree()
        if self._live is not None:
            return self._live
        token = object()
        from .wrappers.watchdog_dataset import watched  # the wrappers import the factories, which import this

        live = watched(one_pass(weakref.ref(self), self._val, self._passes, token), self.options, self.spec)
        self._live, self._live_token = (live if self._keep else None), token
        return live

    def config(self) -> dict[str, Any]:
        """What this loader is, for logs (Energon's ``config()``): its type, workers and the state's ``spec``
        (datareel's, which says everything a restore must find unchanged; Energon describes its own wrappers)."""
        config = self.worker_config
        return {
            "type": "SavableDataLoader",
            "num_workers": config.num_workers,
            "persistent_workers": bool(config.num_workers),
            "worker_config": config.config(),
            "spec": self.loader.state_dict()["spec"] if self.loader is not None else None,
        }

    def can_restore_sample(self) -> bool:
        """Whether :meth:`restore_sample` can make a batch again from its key (:mod:`.loader_restore`)."""
        return self._restorer is not None

    def restore_sample(self, restore_key: Any) -> Any:
        """The batch (a ``batch_size=None`` loader: the sample) whose ``__restore_key__`` is ``restore_key``,
        made again: the same samples, randomness and encoding (:mod:`.loader_restore`)."""
        if self._restorer is None:
            raise OptionError("restore_sample: a val loader in Energon's order keeps no reel positions to restore")
        return self._restorer.restore(restore_key)

    def global_batches(self) -> Any:
        """datareel's :meth:`~datareel.Loader.global_batches` (one group of micro-batches per optimizer step)
        from the loader's position, after the restored states are agreed."""
        loader = self._datareel("global_batches")
        self._agree()
        return (Group(group) for group in loader.global_batches())

    def __len__(self) -> int:
        """Batches this rank yields per pass (Energon's ``len``: its workers' shares summed)."""
        return len(self._passes)

    def close(self) -> None:
        """Stop worker processes (also done when the loader is garbage-collected)."""
        self._live = None
        if self.loader is not None:
            self.loader.close()
        if self._val is not None:
            self._val.close()

    def __getattr__(self, name: str) -> Any:
        """The datareel Loader's (``cursor``, ``accumulation_steps``, ``global_batches``, ``close``, ...); what
        reads the position first agrees the restored states (a collective: see :meth:`_agree`)."""
        loader = self.__dict__.get("loader")
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        if loader is None:
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r}: a val loader in Energon's order (get_val_dataset) "
                f"has no datareel position"
            )
        if name not in _STATIC:
            self._agree()
        return getattr(loader, name)


def _len_rule(order: dict[str, Any]) -> tuple[int, bool]:
    """How Energon's ``len()`` counts a train pass: over one epoch of a dataset shuffled over ``k`` (the
    ``shuffle_over_epochs_multiplier``; datareel's pass holds all ``k``), and whole batches with
    ``batch_drop_last``."""
    k = order.get("shuffle_over_epochs_multiplier", 1)
    return (k if isinstance(k, int) and k > 1 else 1), bool(order.get("batch_drop_last", False))


def _val_sources(spec: DatasetSpec, dataset: Any, encoder: ResolvedEncoder) -> list[Source] | None:
    """The datasets read in Energon's val order, when it can be kept: a val spec over one dataset or a
    concatenation of them, one output per sample (online packing and a generator encode_sample plan
    their outputs in datareel's windowed stage, in datareel's order)."""
    if not spec.val or spec.packing_buffer_size is not None or encoder.windowed:
        return None
    children = dataset.children if isinstance(dataset, Concat) else (dataset,)
    return list(children) if all(isinstance(c, Source) for c in children) else None
