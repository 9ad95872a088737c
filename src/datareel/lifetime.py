"""Child processes that end with the process that started them, however it ends.

A child busy in user code (an ``encode_sample`` that takes minutes, a shard scan) does not look at its
pipe, so it would outlive a parent killed by SIGKILL, by a SIGTERM's default action or by ``os._exit``
(no exit hook runs then), holding the parent's stdout open: a shell pipeline or ``subprocess.run`` that
reads it waits for the orphan.  :func:`die_with_parent`, called first thing in the child, makes sure it
does not: on Linux the kernel sends it SIGKILL when its parent goes (``prctl(PR_SET_PDEATHSIG)``), and on
every platform a daemon thread polls ``os.getppid()`` and ends the process when the parent is gone (the
thread runs while the main thread is in user code; a pure-Python loop gives it the interpreter lock every
few milliseconds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_SECONDS = 0.2  # how often the watchdog thread looks at the parent


def die_with_parent(parent: int, *, pdeathsig: bool = True) -> None:
    """End this process (``os._exit``, or SIGKILL from the kernel) as soon as process ``parent``, which
    started it, has ended.  ``pdeathsig=False`` relies on the watchdog thread alone: Linux sends the death
    signal when the *thread* that started the child ends, so use it only for a child started from a
    thread that lives as long as its process (the main thread).

    Under ``forkserver`` the child's own parent is the fork server (itself a child of ``parent``, which
    ends when ``parent`` does): the child then watches both."""
    real = os.getppid()
    if pdeathsig and sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):  # no libc / no prctl: the watchdog thread still runs
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != real or not _alive(parent, real):  # it ended before the kernel was told to watch it
        os._exit(1)
    threading.Thread(target=_watch, args=(parent, real), name="datareel-parent-watch", daemon=True).start()


def _alive(parent: int, real: int) -> bool:
    if parent == real:
        return True  # the ppid check says it
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours to signal
    return True


def _watch(parent: int, real: int) -> None:
    while os.getppid() == real and _alive(parent, real):  # an orphan is re-parented to init or a subreaper
        time.sleep(POLL_SECONDS)
    os._exit(1)
