"""A worker that dies holding a lock it shares with the training process neither hangs the loader nor costs a
batch.

A ``multiprocessing`` lock is a bare semaphore: one a killed worker held is never released.  Each torch worker
takes the stop event's lock for every index it receives, and torch's handling of a death took it twice more in
the training process (its check marks the dead worker unavailable, its shutdown sets the event): a worker
SIGKILLed at the wrong instruction hung the training process for ever (CI: 60 s, a worker killed by pid during
a training step).  Here a worker takes each lock it shares, then kills itself: the stop event's, the result
queue's write lock (the other worker's batches wait on it) and its index queue's read lock; or it dies
halfway through writing a batch into the result pipe.
"""

from __future__ import annotations

import fcntl
import gc
import multiprocessing.queues
import os
import signal
import struct
import sys
import termios
from pathlib import Path

import pytest

import datareel
from hangs import must_return

pytestmark = pytest.mark.workers

OPTIONS = dict(global_batch_size=4, micro_batch_size=4, world_size=1, rank=0, seed=5, shuffle=False)
TOTAL = 10  # micro-batches each run hands out
DIES_AT = 13  # a sample of micro-batch 3


def half_a_batch(q) -> None:
    """Write the first bytes of a 100,000-byte message into the result pipe, as a worker killed halfway
    through sending a large batch leaves it: the training process's read waits for the rest for ever."""
    q._wlock.acquire()
    q._writer._send(struct.pack("!i", 100_000) + b"x" * (HALF - 4))


HALF = 14  # bytes of the half-written batch: its length, then the first bytes
QUEUES = multiprocessing.queues.__file__


LOCKS = {  # torch's worker loop's local -> what the worker does to it before it dies
    "stop-event": ("done_event", lambda event: event._cond.acquire()),
    "result-queue-write": ("data_queue", lambda q: q._wlock.acquire()),
    "index-queue-read": ("index_queue", lambda q: q._rlock.acquire()),
    "half-written-batch": ("data_queue", half_a_batch),
}


class DiesHolding:
    """At sample ``at``, once (the file ``marker``), its worker takes ``lock`` and kills itself."""

    def __init__(self, marker: Path, at: int, lock: str):
        self.marker, self.at, self.lock, self.parent = str(marker), at, lock, os.getpid()

    def encode_sample(self, sample):
        if sample == self.at and os.getpid() != self.parent and not os.path.exists(self.marker):
            Path(self.marker).write_text(str(os.getpid()))
            local, part = LOCKS[self.lock]
            frame = sys._getframe()
            while frame.f_code.co_name != "_worker_loop":  # torch's worker loop, which holds the shared objects
                frame = frame.f_back
            part(frame.f_locals[local])
            os.kill(os.getpid(), signal.SIGKILL)
        return sample


def reference() -> list[list[int]]:
    return [list(range(4 * i, 4 * i + 4)) for i in range(TOTAL)]


@pytest.mark.parametrize("lock", sorted(LOCKS))
@pytest.mark.parametrize(
    ("workers", "persistent", "pin_memory"),
    [(1, False, False), (2, False, False), (2, True, True)],
    ids=["1-fresh", "2-fresh", "2-persistent-pinned"],
)
def test_a_worker_that_dies_holding_a_shared_lock_costs_no_batch(tmp_path, lock, workers, persistent, pin_memory):
    loader = datareel.Loader(
        datareel.from_sequence(list(range(200)), name="numbers"),
        num_workers=workers,
        persistent_workers=persistent,
        pin_memory=pin_memory,
        task_encoder=DiesHolding(tmp_path / "died", DIES_AT, lock),
        **OPTIONS,
    )
    trained, failures = [], []
    with must_return(30):
        while len(trained) < TOTAL and len(failures) < 3:
            it = iter(loader)
            try:
                while len(trained) < TOTAL:
                    trained.append(next(it).tolist())
            except RuntimeError as exc:  # the loader's report: a new iter() goes on
                failures.append(str(exc).split("\n")[0])
                assert loader.cursor == 4 * len(trained), "the cursor counts only batches handed out"
            del it
        loader.close()
        gc.collect()
    assert (tmp_path / "died").exists(), "the worker never reached the sample"
    assert len(failures) == 1 and "DataLoader worker" in failures[0], failures
    assert trained == reference()  # nothing skipped, nothing repeated


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # a report dropped in a callback
def test_a_death_handled_in_a_gc_callback_during_the_read_of_a_half_written_batch_still_ends_the_read(tmp_path):
    """Python runs a signal's handler at whatever bytecode the main thread is at, a gc callback's too (hypothesis
    installs one), where a raised exception is printed and dropped: a full run's warnings showed the handler's
    report of a dead worker dropped so (where nothing else ends that read, it waits for the rest of a half-written
    batch for ever).  Here the death's own signal is swallowed, and its handler is called from a gc callback while
    the main thread is inside the queue's read of the half batch (the batches before it read): nothing is raised
    there, and the read still ends with the report."""
    from datareel.execute.deaths import WORKER_DEATHS

    loader = datareel.Loader(
        datareel.from_sequence(list(range(200)), name="numbers"),
        num_workers=1,
        task_encoder=DiesHolding(tmp_path / "died", DIES_AT, "half-written-batch"),
        **OPTIONS,
    )
    trained, failures, delivered = [], [], []
    it = iter(loader)
    trained.append(next(it).tolist())
    handler = signal.getsignal(signal.SIGCHLD)  # datareel's (around torch's), installed by iter()
    assert callable(handler), handler
    victim = it.inner._workers[0].pid
    pipe = it.inner._worker_result_queue._reader.fileno()

    def unread() -> int:  # bytes in the result pipe
        return struct.unpack("i", fcntl.ioctl(pipe, termios.FIONREAD, b"\0\0\0\0"))[0]

    def swallow_the_first(signum, frame):  # the death's own signal; any later one reaches the handler
        if delivered:
            handler(signum, frame)

    def in_the_read(phase, info):
        if delivered or WORKER_DEATHS.reading is None or not (tmp_path / "died").exists():
            return
        frame = sys._getframe(1)
        while frame is not None and not (frame.f_code.co_name == "get" and frame.f_code.co_filename == QUEUES):
            frame = frame.f_back
        if frame is not None and unread() == HALF:  # the batches before it read: this read waits for ever
            os.waitid(os.P_PID, victim, os.WEXITED | os.WNOWAIT)  # it wrote the half batch: it dies now
            delivered.append(phase)
            handler(signal.SIGCHLD, sys._getframe())  # as the signal would run it: inside this callback

    threshold = gc.get_threshold()
    signal.signal(signal.SIGCHLD, swallow_the_first)
    gc.callbacks.append(in_the_read)
    gc.set_threshold(1)  # a collection (and the callback) at almost every allocation
    try:
        with must_return(30):
            while len(trained) < TOTAL and len(failures) < 3:
                try:
                    while len(trained) < TOTAL:
                        trained.append(next(it).tolist())
                except RuntimeError as exc:  # the loader's report: a new iter() goes on
                    failures.append(str(exc).split("\n")[0])
                    it = iter(loader)
    finally:
        gc.callbacks.remove(in_the_read)
        gc.set_threshold(*threshold)
        signal.signal(signal.SIGCHLD, handler)
        loader.close()
    assert delivered, "the callback never ran inside the read"
    assert len(failures) == 1 and "DataLoader worker" in failures[0], failures
    assert trained == reference()
