"""The windowed stage's background planning process: plans windows a few ahead of the training loop.

One daemon process per reel.  The reel asks for windows by number over a pipe; the process
computes each window's inputs itself (``inputs(w)``, pure: the reel plan resolves positions) and
sends back the plans, in the order asked.  Requests are a few bytes, so asking never blocks on a
full pipe while the process sends a large plan.  Plans are pure, so stopping the process loses
nothing: a window asked again is planned again, identically.

Why not ``concurrent.futures.ProcessPoolExecutor``: its process is not a daemon and its exit
protocol (a manager thread, a wake-up pipe, sentinels) can fail at interpreter exit (CPython 3.11:
``OSError: Bad file descriptor`` in its exit hook), after which the interpreter's final join of
child processes waits forever: a 4-rank training script hung at exit that way.  A daemon process
is terminated by ``multiprocessing``'s own exit hook, and nothing in the training process runs a thread
(the planning process runs one: it ends the process when the training process is gone however that
ended, :func:`datareel.lifetime.die_with_parent`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..errors import DatareelError, PlanningMessageError, PlanningProcessDied, picklable
from ..lifetime import die_with_parent

#: (positions int64[k], source ids int32[k], indices int64[k]) of a window
Inputs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _serve(
    conn: Any,
    other_end: Any,
    planner: Callable[..., Any],
    inputs: Callable[[int], Inputs],
    parent: int,
    pdeathsig: bool,
) -> None:
    """The planning process: plans the windows asked, oldest first, until the pipe closes or the training
    process ``parent`` ends (however it ends: busy in the user's encoder, this process does not see the
    pipe close)."""
    die_with_parent(parent, pdeathsig=pdeathsig)
    other_end.close()  # the reel's end, copied by fork: without this the process never sees the reel go
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the training process, which stops this one
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a handler inherited by fork must not keep it alive
    torch.set_num_threads(1)  # as in DataLoader workers: an OpenMP pool inherited through fork must not be used
    pending: list[int] = []
    while True:
        while not pending or conn.poll():  # take every message waiting; block only when idle
            try:
                kind, w = conn.recv()
            except (EOFError, OSError):
                return  # the reel's process is gone
            if kind == "plan":
                pending.append(w)
            elif w in pending:  # "drop": no longer wanted
                pending.remove(w)
        w = pending.pop(0)
        try:
            message: tuple[str, int, Any] = ("plan", w, planner(w, *inputs(w)))
        except Exception as exc:
            message = ("error", w, picklable(exc))
        try:
            conn.send(message)  # pickled whole before anything is written
        except (EOFError, OSError):
            return
        except Exception as exc:  # the plan does not pickle
            error = DatareelError(f"the plan of window {w} could not be sent back: {type(exc).__name__}: {exc}")
            try:
                conn.send(("error", w, error))
            except OSError:
                return


def _stop(process: Any, conn: Any, owner: int) -> None:
    """Stop ``process`` for good (only from the process that started it: a forked copy must not)."""
    if os.getpid() != owner:
        return
    conn.close()
    if process.is_alive():
        process.terminate()
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


class PlanningProcess:
    """A daemon process planning windows ``planner(w, *inputs(w))`` on request."""

    def __init__(self, planner: Callable[..., Any], inputs: Callable[[int], Inputs], context: Any = None):
        if context is None or isinstance(context, str):
            context = multiprocessing.get_context(context)
        mine, theirs = context.Pipe()
        self._process = context.Process(
            target=_serve,
            # the kernel's parent-death signal follows the starting thread: only the main thread lives as long
            # as the training process (from another thread, the watchdog thread alone ends the process)
            args=(theirs, mine, planner, inputs, os.getpid(), threading.current_thread() is threading.main_thread()),
            name="datareel-planner",
            daemon=True,
        )
        self._process.start()
        theirs.close()  # the process holds the only other end: its death reads as end of file here
        self._conn = mine
        self._asked: set[int] = set()
        self._done: dict[int, tuple[str, Any]] = {}
        self._stop = weakref.finalize(self, _stop, self._process, mine, os.getpid())

    @property
    def process(self) -> Any:
        """The ``multiprocessing.Process`` planning."""
        return self._process

    def ask(self, w: int) -> None:
        """Plan window ``w`` after those already asked (no-op when asked and not yet taken)."""
        if w not in self._asked and w not in self._done:
            self._asked.add(w)
            self._send(("plan", w))

    def drop(self, w: int) -> None:
        """Window ``w`` is no longer wanted (planned anyway if under way; its plan is discarded)."""
        if w in self._asked:
            self._asked.discard(w)
            self._send(("drop", w))
        self._done.pop(w, None)

    def _send(self, message: tuple[str, int]) -> None:
        try:
            self._conn.send(message)
        except OSError:
            pass  # the process is gone: result() says so

    def asked(self) -> set[int]:
        """Windows asked and not yet taken."""
        return self._asked | set(self._done)

    def result(self, w: int, timeout: float) -> Any:
        """Window ``w``'s plan (asked before), waiting at most ``timeout`` seconds: raises ``TimeoutError``,
        :class:`PlanningProcessDied`, :class:`PlanningMessageError`, or the planner's exception."""
        if w not in self._asked and w not in self._done:
            raise DatareelError(f"internal: window {w} was not asked of the planning process; please report this")
        deadline = time.monotonic() + timeout
        while w not in self._done:
            left = deadline - time.monotonic()
            if left <= 0 or not self._conn.poll(min(left, 86400.0)):  # poll() overflows on huge timeouts
                if left <= 0 or time.monotonic() >= deadline:
                    raise TimeoutError(f"no plan of window {w} within {timeout} s")
                continue
            try:
                kind, v, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._process.join(timeout=1)
                raise PlanningProcessDied(
                    f"exit code {self._process.exitcode}" + (f", {exc!r}" if str(exc) else "")
                ) from None
            except Exception as exc:  # a message that does not unpickle here
                self.close()
                raise PlanningMessageError(f"{type(exc).__name__}: {exc}") from None
            if v in self._asked:
                self._asked.discard(v)
                self._done[v] = (kind, value)
        kind, value = self._done.pop(w)
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        """Stop the process (terminated: plans are pure, nothing is lost)."""
        self._stop()
