"""Worker processes of iterators that can no longer hand out a batch stop at once, not at some garbage collection.

An iterator made before ``load_state_dict()`` or a newer ``iter(loader)`` refuses to go on; its workers used to
live on until the collector found it.  Found inside a reference cycle (an ``exec`` scope, a frame kept by a
traceback), the collector finalized torch's queues before torch's iterator could tell its workers to stop, and
each worker cost torch's 5-s join: 10 s with 2 workers, 20 s with 4, at whatever line the collection ran.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from torch.utils.data import SequentialSampler

import datareel
from datareel.execute.workers import WorkerOptions, start_iterator, stop_iterator
from hangs import must_return

pytestmark = pytest.mark.workers


@pytest.fixture(autouse=True)
def _bounded():
    """Worker processes started and stopped here: a hang in stopping them fails the test instead."""
    with must_return(60):
        yield


def _loader(persistent: bool = False) -> datareel.Loader:
    return datareel.Loader(
        datareel.from_sequence(list(range(40)), name="n"), global_batch_size=4, micro_batch_size=4, world_size=1,
        rank=0, shuffle=False, num_workers=2, persistent_workers=persistent,
    )  # fmt: skip


@pytest.mark.parametrize("how", ["iter", "load_state_dict"])
def test_an_iterator_that_refuses_has_no_workers_left(how):
    loader = _loader()
    old = iter(loader)
    assert next(old).tolist() == [0, 1, 2, 3]
    workers = list(old.inner._workers)
    state = loader.state_dict()
    if how == "iter":
        new = iter(loader)
    else:
        loader.load_state_dict(state)
        new = iter(loader)
    assert [w.is_alive() for w in workers] == [False, False]  # `old` is still referenced here
    assert next(new).tolist() == [4, 5, 6, 7]
    with pytest.raises(datareel.DatareelError, match="made before"):
        next(old)
    loader.close()


def test_persistent_workers_serve_the_next_iteration():
    loader = _loader(persistent=True)
    old = iter(loader)
    next(old)
    workers = list(old.inner._workers)
    new = iter(loader)
    assert next(new).tolist() == [4, 5, 6, 7]
    assert list(new.inner._workers) == workers and all(w.is_alive() for w in workers)
    loader.close()
    assert not any(w.is_alive() for w in workers)


def test_an_iterator_dropped_in_a_reference_cycle_stops_its_workers_through_its_finalizer():
    loader = _loader()
    it = iter(loader)
    next(it)
    workers, finalizer = list(it.inner._workers), it._finalizer
    assert finalizer is not None and finalizer.alive
    it.cycle = it
    del it
    gc.collect()
    assert not finalizer.alive  # it ran: torch's iterator was stopped while its queues still worked
    assert [w.is_alive() for w in workers] == [False, False]
    assert next(iter(loader)).tolist() == [4, 5, 6, 7]
    loader.close()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # the guard's raise, in a __del__
@pytest.mark.parametrize("layer", ["Loader", "DataLoader"])
def test_persistent_workers_of_a_loader_dropped_in_a_reference_cycle_are_told_to_stop(layer):
    """A DataLoader keeps its persistent workers' iterator: dropped in a cycle (a Loader that is never closed, the
    Energon facade's val loader), the collector finalized torch's queues first, the workers never heard the stop,
    and torch's ``__del__`` waited its 5-s join for each (10 s at whatever line the collection ran)."""
    if layer == "Loader":
        loader = _loader(persistent=True)
        it = iter(loader)
        assert next(it).tolist() == [0, 1, 2, 3]
        workers = list(it.inner._workers)
        loader.cycle, it.cycle = loader, it
        del loader, it
    else:
        dataloader = WorkerOptions(num_workers=2, persistent_workers=True).dataloader(
            list(range(8)), SequentialSampler(range(8)), seed=0
        )
        assert list(start_iterator(dataloader)) == list(range(8))
        workers = list(dataloader._iterator._workers)
        dataloader.cycle = dataloader
        del dataloader
    with must_return(4.5):  # less than one of torch's 5-s joins: the workers were told to stop, not waited out
        gc.collect()
    assert [w.is_alive() for w in workers] == [False, False]


class _PointsBack:
    """A task encoder that refers back to its loader, as a trainer's bound method would."""

    loader = None

    def encode_sample(self, sample):
        return sample


def test_a_loader_its_encoder_points_back_at_is_collected_with_its_persistent_workers():
    """The finalizer that stops the kept workers holds none of the loader's objects: holding the iterator (its
    dataset, the encoder, the loader) kept the whole cycle alive for ever."""
    encoder = _PointsBack()
    loader = datareel.Loader(
        datareel.from_sequence(list(range(40)), name="n"), global_batch_size=4, micro_batch_size=4, world_size=1,
        rank=0, shuffle=False, num_workers=2, persistent_workers=True, task_encoder=encoder,
    )  # fmt: skip
    encoder.loader = loader
    it = iter(loader)
    next(it)
    workers, collected = list(it.inner._workers), weakref.ref(loader)
    del it, loader, encoder
    gc.collect()
    assert collected() is None
    assert [w.is_alive() for w in workers] == [False, False]


def test_an_iterator_of_a_dataloader_nobody_holds_goes_on():
    """The kept workers stop when the DataLoader goes only if its iterator goes too: one still iterated works."""
    inner = start_iterator(
        WorkerOptions(num_workers=2, persistent_workers=True).dataloader(
            list(range(8)), SequentialSampler(range(8)), seed=0
        )
    )
    assert list(inner) == list(range(8))
    stop_iterator(inner)
