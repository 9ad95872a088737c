"""Worker loss over the family (issue 36 item 2): persistent workers or not, 1 to 4 workers, several
prefetch factors, a worker that dies at any micro-batch (the first, one that starts a global batch, one that
starts an epoch, one in the middle) or is killed by pid while the training step runs.  After each failure the
saved cursor counts exactly the micro-batches handed out, and both a fresh ``iter(loader)`` and a new Loader
restored from ``state_dict()`` (another worker count) continue with the uninterrupted run's next batches.

DESIGN.md: the cursor advances only when a batch is handed to the training loop; a batch never handed out is
made again after a restore or by a fresh iterator.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import SequentialSampler

import datareel
from datareel.execute.randomness import _current
from datareel.execute.workers import WorkerOptions, start_iterator
from hangs import must_return
from procs import die, wait_until_ended
from profiles import examples

pytestmark = pytest.mark.workers

N = 20  # samples: the reel's epoch 1 starts at position 20 (micro-batch 5)
M, G = 4, 8  # micro-batch and global batch: a global batch is two micro-batches (boundaries at 0, 16, 24, ...)
KW = dict(global_batch_size=G, micro_batch_size=M, world_size=1, rank=0, seed=7, shuffle=False)
STEPS = 12  # micro-batches each run hands out
FIRST, GLOBAL_BOUNDARY, EPOCH_BOUNDARY, MIDDLE = 0, 16, 20, 30  # positions whose making kills a worker


class DiesAt:
    """Ends the worker process that makes any of ``positions`` (reel positions), once each: the marker file
    ``<dir>/<position>`` says it went (``how``: ``tests.procs.die``)."""

    def __init__(self, directory: Path, positions: tuple[int, ...], how: str = "SIGKILL"):
        self.directory, self.positions, self.how, self.parent = str(directory), positions, how, os.getpid()

    def encode_sample(self, sample):
        position = _current().position
        if position in self.positions and os.getpid() != self.parent:
            marker = os.path.join(self.directory, str(position))
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:  # it died here once already
                return sample
            die(self.how)
        return sample


def data():
    return datareel.from_sequence(list(range(N)), name="numbers")


def uninterrupted() -> list[list[int]]:
    loader = datareel.Loader(data(), **KW)
    return [b.tolist() for _, b in zip(range(STEPS), loader)]


def loader_with(workers: int, persistent: bool, prefetch: int | None, encoder=None) -> datareel.Loader:
    return datareel.Loader(
        data(), num_workers=workers, persistent_workers=persistent, prefetch_factor=prefetch, task_encoder=encoder, **KW
    )


def train(loader, *, kill_by_pid_at: tuple[int, ...] = (), restore_workers: int | None = None):
    """A training loop over ``loader`` that goes on after each worker loss.  After micro-batch ``k`` in
    ``kill_by_pid_at`` the step kills a live worker by pid and waits until it has ended.  After a failure it
    checks the saved cursor and continues with a fresh ``iter(loader)``, or, with ``restore_workers``, with a
    new Loader (that many workers, in process for 0) restored from the state.  Returns the batches trained and
    how many failures there were."""
    trained: list[list[int]] = []
    failures = 0
    killed: set[int] = set()
    while len(trained) < STEPS and failures < 8:
        it = iter(loader)
        while len(trained) < STEPS:
            try:
                batch = next(it)
            except Exception as exc:  # the loader's report of the lost worker: one name, however torch saw it
                assert isinstance(exc, RuntimeError) and "DataLoader worker" in str(exc), repr(exc)
                failures += 1
                state = loader.state_dict()
                assert state["cursor"] == M * len(trained), (state["cursor"], len(trained))  # handed out only
                assert loader.cursor == M * len(trained)
                if restore_workers is not None:
                    loader.close()
                    loader = loader_with(restore_workers, restore_workers > 0, None)
                    loader.load_state_dict(state)
                break
            trained.append(batch.tolist())
            assert loader.state_dict()["cursor"] == M * len(trained)
            if len(trained) in kill_by_pid_at and len(trained) not in killed:  # the step runs while it dies
                killed.add(len(trained))
                victim = it.inner._workers[len(trained) % len(it.inner._workers)].pid
                os.kill(victim, signal.SIGKILL)
                wait_until_ended(victim)
        del it
    loader.close()
    gc.collect()  # the broken iterators' workers stop here, not in a later test
    return trained, failures


CASES = [  # (workers, persistent, prefetch_factor): every worker count both ways, the prefetch factors spread
    (1, False, None),
    (1, True, 1),
    (2, False, 2),
    (2, True, None),
    (3, False, 1),
    (3, True, 3),
    (4, False, 3),
    (4, True, 1),
]


@pytest.mark.parametrize(("workers", "persistent", "prefetch"), CASES)
def test_a_worker_dying_at_the_first_a_boundary_or_a_middle_batch_costs_no_batch(
    tmp_path, workers, persistent, prefetch
):
    positions = (FIRST, GLOBAL_BOUNDARY, EPOCH_BOUNDARY, MIDDLE)
    loader = loader_with(workers, persistent, prefetch, DiesAt(tmp_path, positions))
    with must_return(60):
        trained, failures = train(loader)
    assert trained == uninterrupted()  # nothing skipped, nothing repeated
    assert sorted(os.listdir(tmp_path)) == sorted(map(str, positions))  # each of them killed a worker
    assert 1 <= failures <= len(positions)  # two workers dying at once end one iterator


@pytest.mark.parametrize(("workers", "persistent", "prefetch"), CASES[::3])
def test_a_worker_killed_by_pid_during_steps_costs_no_batch_and_restores_elsewhere(workers, persistent, prefetch):
    loader = loader_with(workers, persistent, prefetch)
    with must_return(60):
        trained, failures = train(loader, kill_by_pid_at=(1, 4, 5), restore_workers=(workers % 3))
    assert trained == uninterrupted()
    assert failures >= 1


@settings(max_examples=examples(0.1))
@given(
    workers=st.integers(1, 4),
    persistent=st.booleans(),
    prefetch=st.sampled_from([None, 1, 2, 4]),
    positions=st.sets(st.integers(0, M * STEPS - 1), min_size=1, max_size=3),
    how=st.sampled_from(["SIGKILL", "os._exit", "segfault"]),
    restore=st.sampled_from([None, 0, 1, 3]),
)
def test_a_worker_dying_anywhere_costs_no_batch(
    tmp_path_factory, workers, persistent, prefetch, positions, how, restore
):
    directory = tmp_path_factory.mktemp("deaths")
    loader = loader_with(workers, persistent, prefetch, DiesAt(directory, tuple(sorted(positions)), how))
    with must_return(60):
        trained, failures = train(loader, restore_workers=restore)
    assert trained == uninterrupted()
    assert 1 <= failures <= len(positions)


def slow_start(monkeypatch, seconds: float = 0.5) -> None:
    """The sampler takes ``seconds`` over the second descriptor: torch asks for it while it starts the
    DataLoader (``iter(loader)`` primes every worker), so the first worker's death falls inside ``iter()``."""
    from datareel.reel import sampler

    plain = sampler.feed

    def feed(*args, **kwargs):
        for i, descriptor in enumerate(plain(*args, **kwargs)):
            if i == 1:
                time.sleep(seconds)
            yield descriptor

    monkeypatch.setattr(sampler, "feed", feed)


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_dying_while_iter_starts_the_workers_is_reported_by_next(tmp_path, monkeypatch, workers, persistent):
    """torch's handler raised the death from ``iter(loader)`` (the new iterator was not datareel's yet), leaving
    the half-started DataLoader's workers running; the training loop's ``for`` failed outside ``next()``."""
    slow_start(monkeypatch)
    loader = loader_with(workers, persistent, None, DiesAt(tmp_path, (FIRST, GLOBAL_BOUNDARY), "os._exit"))
    trained: list[list[int]] = []
    with must_return(60):
        while len(trained) < STEPS:
            it = iter(loader)  # never raises for a worker's death
            while len(trained) < STEPS:
                try:
                    batch = next(it)
                except RuntimeError as exc:
                    assert "DataLoader worker" in str(exc), exc
                    assert loader.state_dict()["cursor"] == M * len(trained)
                    break
                trained.append(batch.tolist())
            del it
    loader.close()
    gc.collect()
    assert trained == uninterrupted()
    assert sorted(os.listdir(tmp_path)) == [str(FIRST), str(GLOBAL_BOUNDARY)]


KILLS_A_WORKER = """
import faulthandler, os, signal, sys, time
faulthandler.dump_traceback_later(100, exit=True)  # a hang: every thread's stack in the report, before the timeout
import datareel
loader = datareel.Loader(datareel.from_sequence(list(range(40)), name="n"), global_batch_size=4, micro_batch_size=4,
                         world_size=1, rank=0, shuffle=False, num_workers=2)
it = iter(loader)
got = [next(it).tolist() for _ in range(3)]
victim = it.inner._workers[0].pid
os.kill(victim, signal.SIGKILL)
try:
    while len(got) < 8:
        got.append(next(it).tolist())
except RuntimeError:
    it = iter(loader)
    while len(got) < 8:
        got.append(next(it).tolist())
assert got == [list(range(4 * i, 4 * i + 4)) for i in range(8)], got
loader.close()
"""


@pytest.mark.slow  # a fresh interpreter: its first workers are the ones that die
def test_a_killed_worker_leaves_no_directory_in_the_temp_dir(tmp_path):
    """A worker makes multiprocessing's ``pymp-*`` directory when it first sends a tensor and removes it only
    when it exits normally: each killed worker left one in the system temp dir.  Workers share the training
    process's now, removed when it exits."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", KILLS_A_WORKER],
        env={**os.environ, "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert sorted(p.name for p in temp.iterdir()) == []


def test_a_persistent_worker_that_dies_between_passes_is_reported_by_next_not_by_iter():
    """torch resumes persistent workers inside ``iter()``, waiting for each one's answer: a worker dead by then
    was found there, and the report escaped from ``iter()`` (where the training loop does not expect it).  The
    iterator now starts, and its first ``next()`` reports the death; the next one starts fresh workers."""
    dataloader = WorkerOptions(num_workers=2, persistent_workers=True).dataloader(
        list(range(8)), SequentialSampler(range(8)), seed=0
    )
    with must_return(60):
        assert list(start_iterator(dataloader)) == list(range(8))
        kept = dataloader._iterator
        victim = kept._workers[0]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=30)
        inner = start_iterator(dataloader)  # never raises for a worker's death
        with pytest.raises(RuntimeError, match=rf"DataLoader worker process ended unexpectedly: pid {victim.pid} "):
            next(inner)
        assert all(not w.is_alive() for w in kept._workers)  # the others were stopped
        assert dataloader._iterator is None  # the next iter() starts fresh workers
        assert list(start_iterator(dataloader)) == list(range(8))
