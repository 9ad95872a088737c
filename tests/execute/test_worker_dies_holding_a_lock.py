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

import gc
import os
import signal
import struct
import sys
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
    q._writer._send(struct.pack("!i", 100_000) + b"x" * 10)


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
