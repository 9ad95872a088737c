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
import multiprocessing.connection
import os
import signal
import struct
import sys
import termios
import traceback
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
CONNECTION = multiprocessing.connection.__file__


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


class DiesHoldingListBatches(DiesHolding):
    """Batches as plain lists: no tensor shared through the worker (whose reading fails once it is dead)."""

    def batch(self, samples):
        return [int(sample) for sample in samples]


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # a report dropped in a callback
def test_a_death_handled_in_a_gc_callback_during_the_read_of_a_half_written_batch_still_ends_the_read(tmp_path):
    """Python runs a signal's handler at whatever bytecode the main thread is at, a gc callback's too (hypothesis
    installs one), where a raised exception is printed and dropped: a full run's warnings showed the handler's
    report of a dead worker dropped so, and a read of a batch that worker left half-written then waits for the
    rest for ever.  Two workers: the second dies halfway through writing micro-batch 7, holding the pipe's write
    lock (the first waits on it).  Its death's own signal is swallowed, and as the read of that half batch begins
    a collection calls the handler from a gc callback: nothing is raised there, the signal comes again, and the
    report comes out of the pipe's read."""
    from datareel.execute.deaths import WORKER_DEATHS

    marker = tmp_path / "died"
    loader = datareel.Loader(
        datareel.from_sequence(list(range(200)), name="numbers"),
        num_workers=2,
        task_encoder=DiesHoldingListBatches(marker, 29, "half-written-batch"),  # micro-batch 7: past the first indices
        **OPTIONS,
    )
    trained, failures, delivered = [], [], []
    it = iter(loader)
    handler = signal.getsignal(signal.SIGCHLD)  # datareel's (around torch's), installed by iter()
    assert callable(handler), handler

    def swallow_the_first(signum, frame):  # the death's own signal(s); those after the delivery reach the handler
        if delivered:
            handler(signum, frame)

    signal.signal(signal.SIGCHLD, swallow_the_first)
    pipe = it.inner._worker_result_queue._reader.fileno()

    def unread() -> int:  # bytes in the result pipe
        return struct.unpack("i", fcntl.ioctl(pipe, termios.FIONREAD, b"\0\0\0\0"))[0]

    def in_the_read(phase, info):  # a gc callback: the handler runs inside it, as a signal's would
        if armed and not delivered:
            delivered.append(phase)
            handler(signal.SIGCHLD, sys._getframe())

    def profile(frame, event, arg):  # the read of the half batch begins: a collection runs the callback there
        code = frame.f_code
        if event == "call" and code.co_name == "_recv_bytes" and code.co_filename == CONNECTION and not armed:
            if WORKER_DEATHS.reading is not None and marker.exists() and unread() == HALF:
                sys.setprofile(None)
                os.waitid(os.P_PID, int(marker.read_text()), os.WEXITED | os.WNOWAIT)  # it wrote the half: it dies
                armed.append(True)
                gc.collect()

    armed: list = []
    gc.callbacks.append(in_the_read)
    try:
        with must_return(30):
            while len(trained) < TOTAL and len(failures) < 3:
                try:
                    while len(trained) < TOTAL:
                        sys.setprofile(None if armed else profile)
                        try:
                            batch = next(it)
                        finally:
                            sys.setprofile(None)
                        trained.append(list(batch))
                except RuntimeError as exc:  # the loader's report: a new iter() goes on
                    failures.append(exc)
                    it = iter(loader)
    finally:
        gc.callbacks.remove(in_the_read)
        signal.signal(signal.SIGCHLD, handler)
        loader.close()
    assert delivered, "the callback never ran inside the read of the half batch"
    assert len(failures) == 1 and "DataLoader worker" in str(failures[0]), failures
    frames = [f.filename for f in traceback.extract_tb(failures[0].__cause__.__traceback__)]
    assert CONNECTION in frames, frames  # raised out of the pipe's read, by the signal that came again
    assert trained == reference()
