"""A lost DataLoader worker costs no micro-batch: the cursor counts only batches handed out, and a fresh
``iter(loader)`` makes the lost one again, however the worker went (SIGKILL, SIGTERM, ``os._exit``, a crash,
killed from outside by pid, torch's ``timeout``), with 1 or 2 workers, persistent or not.

torch reports a dead worker from a SIGCHLD handler that raises wherever the training process happens to
be: in the training step after the batch was handed out, the step then lost the batch the cursor had
counted (the next iterator skipped it), and a persistent DataLoader kept its dead worker, so every later
``iter(loader)`` failed.  Each test here runs a training loop whose step is busy when the worker dies.
"""

from __future__ import annotations

import gc
import os
import signal
import time
from pathlib import Path

import pytest

import datareel
from hangs import must_return
from procs import die, wait_until_ended

pytestmark = pytest.mark.workers

OPTIONS = dict(global_batch_size=4, micro_batch_size=4, world_size=1, rank=0, seed=5)
TOTAL = 10  # micro-batches each run hands out
DIES_AT = 13  # a sample of micro-batch 3 (positions 12..15, unshuffled)


class DiesOnce:
    """Ends its own worker process (``how``) at one sample, once, after the file ``go`` appears (the
    training loop has received this worker's previous batch); the file ``marker`` holds the pid."""

    def __init__(self, marker: Path, at: int, how: str):
        self.marker, self.at, self.how, self.parent = str(marker), at, how, os.getpid()
        self.go = str(marker) + ".go"

    def encode_sample(self, sample):
        if sample == self.at and os.getpid() != self.parent and not os.path.exists(self.marker):
            deadline = time.monotonic() + 30
            while not os.path.exists(self.go) and time.monotonic() < deadline:
                time.sleep(0.01)
            Path(self.marker).write_text(str(os.getpid()))
            die(self.how)
        return sample


class StallsOnce(DiesOnce):
    """Sleeps ``seconds`` at one sample, once: longer than the DataLoader's ``timeout``."""

    def __init__(self, marker: Path, at: int, seconds: float):
        super().__init__(marker, at, "")
        self.seconds = seconds

    def encode_sample(self, sample):
        if sample == self.at and os.getpid() != self.parent and not os.path.exists(self.marker):
            Path(self.marker).write_text(str(os.getpid()))
            time.sleep(self.seconds)
        return sample


def data():
    return datareel.from_sequence(list(range(200)), name="numbers")


def reference() -> list[list[int]]:
    loader = datareel.Loader(data(), shuffle=False, **OPTIONS)
    return [b.tolist() for _, b in zip(range(TOTAL), loader)]


def train(loader: datareel.Loader, step) -> tuple[list[list[int]], list[tuple[str, str]]]:
    """A training loop: ``next()``, then the step, then the batch counts as trained; after a failure a
    fresh ``iter(loader)``. Returns the batches trained and where each failure surfaced."""
    trained: list[list[int]] = []
    failures: list[tuple[str, str]] = []
    with must_return(60):
        while len(trained) < TOTAL and len(failures) < 3:
            it = iter(loader)
            while len(trained) < TOTAL:
                try:
                    batch = next(it)
                except Exception as exc:  # the loader's report: the next iter() continues
                    failures.append(("next", type(exc).__name__))
                    assert loader.cursor == 4 * len(trained), "the cursor counts only batches handed out"
                    break
                try:
                    step(len(trained), it)
                except Exception as exc:  # the step failed: this batch was not trained on
                    failures.append(("step", f"{type(exc).__name__}: {exc}"))
                    break
                trained.append(batch.tolist())
                assert loader.cursor == 4 * len(trained)
            del it
    loader.close()
    gc.collect()  # the broken iterators' workers stop here, not inside a later test
    return trained, failures


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "os._exit", "segfault"])
def test_a_worker_that_dies_making_a_batch_costs_no_batch(tmp_path, how, workers, persistent):
    marker = tmp_path / "died"

    def step(i, it):  # the training step that runs while the worker making micro-batch 3 dies
        if i == 3 - workers:  # the dying worker's previous batch is in: it may die now
            Path(str(marker) + ".go").touch()
            deadline = time.monotonic() + 30
            while not marker.exists() or not marker.read_text():
                assert time.monotonic() < deadline, "the worker never reached the sample"
                time.sleep(0.01)
            wait_until_ended(int(marker.read_text()))

    loader = datareel.Loader(
        data(),
        shuffle=False,
        num_workers=workers,
        persistent_workers=persistent,
        task_encoder=DiesOnce(marker, DIES_AT, how),
        **OPTIONS,
    )
    trained, failures = train(loader, step)
    assert [where for where, _ in failures] == ["next"], failures  # reported by next(), never in the step
    assert trained == reference()  # nothing skipped, nothing repeated


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_worker_killed_by_pid_during_a_step_costs_no_batch(sig, workers, persistent):
    def step(i, it):
        if i == 2:
            victim = it.inner._workers[-1].pid  # torch's worker processes
            os.kill(victim, sig)
            wait_until_ended(victim)

    loader = datareel.Loader(data(), shuffle=False, num_workers=workers, persistent_workers=persistent, **OPTIONS)
    trained, failures = train(loader, step)
    assert [where for where, _ in failures] == ["next"], failures
    assert trained == reference()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_persistent_worker_killed_between_iterators_is_replaced(workers):
    """A worker of a persistent DataLoader dies while no iterator runs (between evaluations, say): the next
    ``iter(loader)`` starts fresh workers instead of failing on the dead one."""
    loader = datareel.Loader(data(), shuffle=False, num_workers=workers, persistent_workers=True, **OPTIONS)
    got = []
    with must_return(60):
        it = iter(loader)
        got += [next(it).tolist() for _ in range(3)]
        victim = it.inner._workers[0].pid
        del it
        os.kill(victim, signal.SIGKILL)
        wait_until_ended(victim)
        it = iter(loader)
        while len(got) < TOTAL:
            got.append(next(it).tolist())
    del it
    loader.close()
    gc.collect()
    assert got == reference()


def stalling(tmp_path, *, persistent: bool, seconds: float) -> datareel.Loader:
    """One worker that stalls ``seconds`` once, at sample ``DIES_AT``, under a 1-s DataLoader timeout."""
    return datareel.Loader(
        data(),
        shuffle=False,
        num_workers=1,
        persistent_workers=persistent,
        timeout=1.0,
        task_encoder=StallsOnce(tmp_path / "stalled", DIES_AT, seconds=seconds),
        **OPTIONS,
    )


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
def test_a_timed_out_worker_costs_no_batch(tmp_path, persistent):
    loader = stalling(tmp_path, persistent=persistent, seconds=4)
    trained, failures = train(loader, lambda i, it: None)
    assert failures == [("next", "RuntimeError")], failures  # torch's "DataLoader timed out after 1.0 seconds"
    assert trained == reference()


def test_a_timed_out_persistent_worker_is_killed_not_waited_for(tmp_path):
    """A failed ``next()`` drops the persistent DataLoader, and then kills the iterator's workers with their work
    (exit status -SIGKILL); the DataLoader's finalizer must not stop them first the slow way (torch's stop
    waited 5 s for the busy worker, then terminated it: -SIGTERM)."""
    loader = stalling(tmp_path, persistent=True, seconds=30)
    it = iter(loader)
    workers = list(it.inner._workers)
    with must_return(60), pytest.raises(RuntimeError, match="timed out"):
        while True:
            next(it)
    assert [w.exitcode for w in workers] == [-signal.SIGKILL]
    assert loader.cursor == 12
    loader.close()


class InterruptedOnce(DiesOnce):
    """Raises ``KeyboardInterrupt`` (a ``BaseException``: not the sample's fault) at one sample, once."""

    def __init__(self, marker: Path, at: int):
        super().__init__(marker, at, "")
        self.parent = -1  # in the training process too (num_workers=0)

    def encode_sample(self, sample):
        if sample == self.at and not os.path.exists(self.marker):
            Path(self.marker).write_text("x")
            raise KeyboardInterrupt
        return sample


@pytest.mark.parametrize("workers", [0, 1])
def test_an_interrupt_while_making_a_batch_costs_no_batch(tmp_path, workers):
    """Ctrl-C (or a signal handler that raises) inside the making of a batch: the iterator that was
    interrupted refuses to go on (the DataLoader consumed a descriptor it never returned) and a fresh one
    makes the batch again."""
    loader = datareel.Loader(
        data(), shuffle=False, num_workers=workers, task_encoder=InterruptedOnce(tmp_path / "hit", DIES_AT), **OPTIONS
    )
    got = []
    it = iter(loader)
    with must_return(60):
        with pytest.raises(BaseException) as info:  # in a worker: the worker exits (torch's RuntimeError, ...)
            while True:
                got.append(next(it).tolist())
        assert not isinstance(info.value, datareel.BatchError), info.value
        del info  # its traceback holds the broken DataLoader iterator
        assert loader.cursor == 4 * len(got)
        with pytest.raises(datareel.DatareelError, match=r"call iter\(loader\) again"):
            next(it)
        it = iter(loader)
        while len(got) < TOTAL:
            got.append(next(it).tolist())
    del it
    loader.close()
    gc.collect()
    assert got == reference()


class UnpicklableBatch:
    """``batch`` returns something that cannot cross to the training process for micro-batch 2 only."""

    def batch(self, samples):
        return {"ids": samples, "extra": (lambda: 0) if samples[0] == 8 else None}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_batch_that_does_not_pickle_is_a_named_error_not_a_hang(workers):
    """torch's worker queue pickles a batch in a thread that printed the error and dropped the batch: the
    training process waited for it forever. Now next() raises a BatchError for that micro-batch (a property
    of the batch: it counts as consumed) and the iterator goes on."""
    loader = datareel.Loader(data(), shuffle=False, num_workers=workers, task_encoder=UnpicklableBatch(), **OPTIONS)
    got = []
    it = iter(loader)
    with must_return(60):
        while len(got) < 5:
            try:
                got.append(next(it)["ids"])
            except datareel.BatchError as exc:
                assert "reel positions 8..11" in str(exc) and "does not pickle" in str(exc), exc
                assert "no lambdas, generators" in str(exc)  # the fix
                assert loader.cursor == 12  # counted, as every deterministic failure of a batch
                got.append("failed")
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], "failed", [12, 13, 14, 15], [16, 17, 18, 19]]
    del it
    loader.close()
    gc.collect()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_persistent_worker_that_ends_idle_at_the_end_of_a_pass_costs_nothing(workers):
    """A worker of a persistent DataLoader dies after the last batch of a finite pass was handed out, with no
    work left in it: the pass ends as it would have (``StopIteration``, not a worker's death), and the next
    pass from the start starts fresh workers (Energon's val loaders ride this too)."""
    loader = datareel.Loader(
        datareel.from_sequence(list(range(40)), name="forty"),
        shuffle=False,
        repeat=False,
        num_workers=workers,
        persistent_workers=True,
        **OPTIONS,
    )
    start = loader.state_dict()
    with must_return(60):
        it = iter(loader)
        first = [next(it).tolist() for _ in range(10)]  # every batch of the pass
        while it.inner._rcvd_idx < it.inner._send_idx:  # wait for nothing: torch has every batch in
            time.sleep(0.01)
        victim = it.inner._workers[0].pid
        os.kill(victim, signal.SIGKILL)
        wait_until_ended(victim)
        with pytest.raises(StopIteration):
            next(it)
        del it
        assert list(loader) == []  # the pass has ended
        loader.load_state_dict(start)
        again = [b.tolist() for b in loader]
    loader.close()
    gc.collect()
    assert first == [list(range(4 * i, 4 * i + 4)) for i in range(10)]
    assert again == first  # the pass again, whole, from fresh workers
