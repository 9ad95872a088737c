"""One rank's datareel micro-batches as a facade loader's passes: :class:`LoaderStream` (the datareel Loader as
one worker's stream of :mod:`.passes`) and :func:`one_pass` (what one ``for`` over the facade loader yields)."""

from __future__ import annotations

from typing import Any

from ..blend.tree import Blend
from ..errors import BatchError
from ..loader import Loader
from .batch_failures import is_dropped
from .loader_restore import stamp_key, val_key
from .passes import Passes
from .unbatched import unwrap
from .val import ValPlan, worker_slices


class LoaderStream:
    """This rank's micro-batches of the datareel loader, as one worker's stream (:mod:`.passes`): a pass
    left early continues; a finite pass that ended starts again from ``start`` (where the loader was
    built); each typed batch gets its restore key (:mod:`.loader_restore`).  A ``next()`` that failed (a
    worker that died, ...) ended the datareel iterator, whose cursor counts only batches handed out: the
    next pass makes a fresh one from that cursor (after a :class:`~datareel.BatchError`, which counts as
    consumed, the iterator goes on)."""

    def __init__(
        self,
        loader: Loader,
        start: dict[str, Any],
        num_workers: int = 0,
        packing: bool = False,
        per_epoch: tuple[int, bool] = (1, False),
    ):
        self.loader, self.start, self.num_workers, self.packing = loader, start, num_workers, packing
        self.epochs, self.drop_last = per_epoch  # how Energon's len() counts (EnergonLoader's _len_rule)
        self.iterator: Any = None

    def run(self) -> Any:
        while True:
            if self.iterator is None:
                self.iterator = iter(self.loader)
            try:
                address = self.loader.next_address()  # where the batch that comes next lies
                batch = next(self.iterator)
            except StopIteration:  # a finite pass ended: the next `for` starts it again (Energon's val loaders)
                self.reset()
                return
            except BatchError:  # this batch failed in the making (counted by the cursor); the iterator goes on
                raise
            except BaseException:  # the iterator ended: the next pass continues from the loader's cursor
                self.iterator = None
                raise
            if is_dropped(batch):  # its batch / encode_batch failed and the handler let it go (Energon drops it)
                continue
            stamp_key(batch, address)  # restore_sample makes it again from it
            yield batch

    def reset(self) -> None:
        self.iterator = None
        self.loader.load_state_dict(self.start)

    def length(self) -> int:
        """Energon's ``len_worker``: the batches of a pass; with online packing, or of an endless weighted
        blend, Energon's estimate (:func:`energon_length`)."""
        loader = self.loader
        length = loader.length if loader.length is not None else loader.plan.epoch_length
        if length is None or self.packing:
            return energon_length(loader, self.num_workers)
        length = -(-length // self.epochs)  # one epoch of a pass over k
        if self.drop_last:  # whole micro-steps only
            return length // loader.layout.step_size
        return loader.layout.rank_steps(loader.rank, length)


def energon_length(loader: Loader, num_workers: int) -> int:
    """Energon's ``len`` where it counts input samples: each of the rank's workers' share of every dataset
    read (:func:`.val.worker_slices`, Energon's split; a weighted blend's weights aside, online packing's packs
    not planned), cut into batches, summed over the workers.  A number to report, as Energon's is: an
    endless blend goes on, and a packed pass yields what its packs make."""
    dataset = loader.dataset
    leaves = dataset.leaves() if isinstance(dataset, Blend) else [dataset]
    slices = worker_slices([len(leaf) for leaf in leaves], loader.world_size, loader.rank, num_workers)
    micro = loader.micro_batch_size
    return sum(-(-piece.size // micro) for piece in slices)


def one_pass(owner: Any, val: ValPlan | None, passes: Passes, token: object) -> Any:
    """One pass of a facade loader (``owner``: a weak reference; the loader may keep this generator).
    A pass that ended, or failed, is not kept: after a failure the next ``for`` continues it from the
    streams' positions, which count only batches handed out (:mod:`.passes`)."""
    try:
        if val is not None:
            for batch in val.iterate(passes):
                if not is_dropped(batch):
                    yield unwrap(val_key(batch))
        else:
            for _worker, batch in passes:
                yield unwrap(batch)
    finally:
        loader = owner()
        if loader is not None and loader._live_token is token:
            loader._live = None
