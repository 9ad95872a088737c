"""A worker's death signalled at any lock inside ``next()`` neither hangs the loader nor costs a batch.

torch reports a dead worker from a ``SIGCHLD`` handler that raises in the main thread wherever it happens to
run.  Inside torch's ``next()`` that may be right after a queue's ``put`` or ``get`` took a lock: the
exception left the lock held, and stopping the workers (torch puts a stop message into every worker's queue)
waited for it forever.  A killed worker hung the training process now and then (CI: 120 s, a fresh
interpreter whose worker was killed by pid).

Here the signal is delivered exactly there, deterministically: the worker is killed with its signal
swallowed, and a profile hook calls the real handler right after the k-th lock the main thread takes inside
the next ``next()``s, for every k in two rounds of its puts and gets (each run ends within a second: torch's
own check would find the death within 5 s even without the signal).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

import datareel
from hangs import must_return

pytestmark = pytest.mark.workers

BATCH = 4
TOTAL = 12  # micro-batches each run hands out


def expected() -> list[list[int]]:
    return [list(range(BATCH * i, BATCH * i + BATCH)) for i in range(TOTAL)]


def run(at_lock: int, workers: int, persistent: bool, pin_memory: bool) -> tuple[int, list[str]]:
    """Train ``TOTAL`` micro-batches; after 3, kill a worker and deliver its signal right after the
    ``at_lock``-th lock taken inside ``next()``.  Returns how many locks ``next()`` took before the
    delivery (all of them, where it never came) and the failures that ended iterators."""
    loader = datareel.Loader(
        datareel.from_sequence(list(range(80)), name="n"),
        global_batch_size=BATCH,
        micro_batch_size=BATCH,
        world_size=1,
        rank=0,
        shuffle=False,
        num_workers=workers,
        persistent_workers=persistent,
        pin_memory=pin_memory,
    )
    locks, failures, trained = [0], [], []

    def profile(frame, event, arg):  # right after a lock is taken: the signal's handler runs there
        if event == "c_return" and getattr(arg, "__name__", "") in ("acquire", "__enter__"):
            locks[0] += 1
            if locks[0] == at_lock + 1:
                sys.setprofile(None)
                handler(signal.SIGCHLD, frame)

    it = iter(loader)
    trained += [next(it).tolist() for _ in range(3)]
    victim = it.inner._workers[0].pid
    handler = signal.getsignal(signal.SIGCHLD)  # datareel's (around torch's), installed by iter()
    assert callable(handler), handler
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the death's own signal: swallowed
    try:
        os.kill(victim, signal.SIGKILL)
        os.waitid(os.P_PID, victim, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
        time.sleep(0.01)  # the swallowing handler has run
    finally:
        signal.signal(signal.SIGCHLD, handler)
    with must_return(20):
        while len(trained) < TOTAL and len(failures) < 3:
            try:
                sys.setprofile(profile if locks[0] <= at_lock else None)
                try:
                    batch = next(it)
                finally:
                    sys.setprofile(None)
            except RuntimeError as exc:  # the loader's report of the dead worker: a new iter() goes on
                failures.append(str(exc).split("\n")[0])
                it = iter(loader)
                continue
            trained.append(batch.tolist())
        loader.close()
    assert trained == expected(), (at_lock, failures)  # nothing skipped, nothing repeated
    return locks[0], failures


LOCKS = 12  # two of next()'s rounds of puts and gets: every lock it takes while a batch is on its way


@pytest.mark.parametrize(
    ("workers", "persistent", "pin_memory"),
    [(2, False, False), (2, True, True)],
    ids=["fresh", "persistent-pinned"],
)
def test_a_death_signalled_right_after_any_lock_in_next_costs_no_batch_and_no_hang(workers, persistent, pin_memory):
    for at_lock in range(LOCKS):
        reached, failures = run(at_lock, workers, persistent, pin_memory)
        assert reached == at_lock + 1, (at_lock, reached, failures)  # delivered there, inside next()
        assert len(failures) == 1, (at_lock, failures)  # one iterator ended, reported by next()


def test_the_handler_raises_only_out_of_the_pipes_read_and_elsewhere_signals_again():
    """The one report the handler raises (a read its dead worker left half-written waits for ever) comes out of
    the read itself only; at any other line of the read (a gc callback, a finalizer: Python drops what they
    raise) it raises nothing and the signal comes again, until the main thread is in the read or left it."""
    import multiprocessing.connection

    from datareel.errors import WorkerLost
    from datareel.execute.deaths import WORKER_DEATHS

    class Reader:  # a result read whose iterator lost a worker
        def lost(self) -> str:
            return "DataLoader worker process ended unexpectedly: pid 1 killed by signal SIGKILL"

    with WORKER_DEATHS.starting():  # torch's SIGCHLD handler set, and datareel's around it
        pass
    handler = signal.getsignal(signal.SIGCHLD)
    scope: dict = {}
    exec(compile("import sys; frame = sys._getframe()", multiprocessing.connection.__file__, "exec"), scope)
    again: list = []
    counted = WORKER_DEATHS.wait()
    WORKER_DEATHS.reading = Reader()
    signal.signal(signal.SIGCHLD, lambda signum, frame: again.append(frame))  # where the signal comes again
    try:
        with must_return(10):
            handler(signal.SIGCHLD, sys._getframe())  # this test's line: not the read
            while not again:
                time.sleep(0.001)
            with pytest.raises(WorkerLost, match="pid 1 killed by signal SIGKILL"):
                handler(signal.SIGCHLD, scope["frame"])  # a frame of the pipe's read
    finally:
        WORKER_DEATHS.reading = None
        signal.signal(signal.SIGCHLD, handler)
        WORKER_DEATHS.done(counted)
