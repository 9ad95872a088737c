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

import functools
import importlib
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


class _Dead:
    """A worker process that has ended."""

    pid, exitcode = 1, -signal.SIGKILL

    def is_alive(self) -> bool:
        return False


class _LostIterator:
    """A DataLoader iterator whose one worker died."""

    _shutdown, _workers, _workers_status = False, [_Dead()], [True]


def _read_code(module: str, source: str) -> dict:
    """Functions compiled as ``module``'s code, in its file (the handler tells the read's own code by its module)."""
    scope = {"__name__": module}
    exec(compile(source, importlib.import_module(module).__file__, "exec"), scope)
    return scope


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # a report raised and dropped
@pytest.mark.parametrize(
    ("where", "raises"),
    [
        ("the pipe's read", True),
        ("a __del__ of the pipe's module, run inside the read", False),
        ("a gc callback run inside the read", False),
        ("the pipe's code, run outside any read", False),
    ],
)
def test_the_handler_raises_only_out_of_the_read_itself_and_elsewhere_signals_again(where, raises):
    """The one report the handler raises (a read its dead worker left half-written waits for ever) comes out of
    the read itself only: from the reader's ``_get`` down, every frame the read's own code.  A gc callback, a
    finalizer or a ``__del__`` run inside the read (Python drops what they raise), or the same code run
    outside a read, gets nothing raised, and the signal comes again while the read goes on."""
    from datareel.errors import WorkerLost
    from datareel.execute.deaths import WORKER_DEATHS
    from datareel.execute.lost import GuardedResults

    with WORKER_DEATHS.starting():  # torch's SIGCHLD handler set, and datareel's around it
        pass
    handler = signal.getsignal(signal.SIGCHLD)
    signalled = functools.partial(handler, signal.SIGCHLD)  # called with the frame the signal interrupted
    pipe = _read_code(
        "multiprocessing.connection",
        "import sys\n"
        "def recv(signalled):\n    signalled(sys._getframe())\n"
        "class Pipe:\n    def __del__(self):\n        recv(self.signalled)\n"
        "def close_one(signalled):\n    pipe = Pipe()\n    pipe.signalled = signalled\n    del pipe\n",
    )
    queues = _read_code("multiprocessing.queues", "def get(read, **kwargs):\n    return read()\n")

    def callback() -> None:  # this test's code, run inside the read (as a gc callback is)
        signalled(sys._getframe())

    read = {
        "the pipe's read": functools.partial(pipe["recv"], signalled),
        "a __del__ of the pipe's module, run inside the read": functools.partial(pipe["close_one"], signalled),
        "a gc callback run inside the read": callback,
    }.get(where, callback)
    lost = _LostIterator()  # the reader holds it weakly
    queue = type("Queue", (), {"get": staticmethod(functools.partial(queues["get"], read))})()
    reader = GuardedResults(queue, lost)
    again: list = []
    counted = WORKER_DEATHS.wait()
    signal.signal(signal.SIGCHLD, lambda signum, frame: again.append(frame))  # where the signal comes again
    try:
        with must_return(10):
            if where == "the pipe's code, run outside any read":
                WORKER_DEATHS.reading = reader
                pipe["recv"](signalled)
                WORKER_DEATHS.reading = None
            elif raises:
                with pytest.raises(WorkerLost, match="pid 1 killed by signal SIGKILL"):
                    reader._get(timeout=0.05)
            else:
                reader._get(timeout=0.05)
            if not raises and where != "the pipe's code, run outside any read":
                WORKER_DEATHS.reading = reader  # the read goes on: the signal comes again
                while not again:
                    time.sleep(0.001)
    finally:
        WORKER_DEATHS.reading = None
        signal.signal(signal.SIGCHLD, handler)
        WORKER_DEATHS.done(counted)
