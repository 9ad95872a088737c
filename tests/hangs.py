"""Guards that turn a hang or a huge allocation into a test failure (not timing assertions)."""

from __future__ import annotations

import contextlib
import faulthandler
import resource
import signal
import sys
import threading

MEMORY = 4 << 30  # address space while fuzzing: a 1 TiB (or 64 GiB) allocation fails instead of swapping


class Hung(BaseException):
    """What a hang guard raises: not an ``Exception``, so neither a test's loop that catches the loader's errors
    nor library code that suppresses errors (while stopping workers, say) swallows it."""


@contextlib.contextmanager
def must_return(seconds: int = 10, exception: type[BaseException] = Hung):
    """Turn a hang into a failure (SIGALRM): a hang guard, not a timing assertion.  ``exception`` is what the
    guard raises.

    The signal goes to the main thread itself (``pthread_kill`` from a timer thread): ``alarm()``'s went to
    whichever thread the kernel chose, and one delivered to a queue's feeder thread never woke a main thread
    blocked on a lock, so a hung test hung the session instead of failing."""

    def hung(signum, frame):
        with contextlib.suppress(Exception):  # stderr without a file descriptor (capsys): the guard still raises
            faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)  # where it hung, in the test's report
        raise exception(f"did not return within {seconds} s: an endless loop")

    main = threading.main_thread().ident
    previous = signal.signal(signal.SIGALRM, hung)
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGALRM))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def bounded():
    """A hang guard and an address-space cap; a MemoryError under the cap is a bug too (it escapes as
    a bare exception), so it fails the test like any other."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with must_return(20):  # its timer thread starts before the cap: under it, a process holding many threads'
        # stacks may have no room for one more, and a thread that cannot start hangs Thread.start()
        resource.setrlimit(resource.RLIMIT_AS, (min(MEMORY, hard) if hard > 0 else MEMORY, hard))
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
