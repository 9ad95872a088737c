"""Ending and watching processes: a worker that ends itself, and a wait for one to end."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import psutil
import pytest


def die(how: str) -> None:
    if how == "SIGKILL":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "SIGTERM":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "os._exit":
        os._exit(3)
    elif how == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    time.sleep(60)  # not reached


def ended(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped by its parent counts)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until_ended(pid: int) -> None:
    """Busy in Python (a training step): torch's SIGCHLD handler, if it raises, raises here."""
    deadline = time.monotonic() + 30
    while not ended(pid):
        if time.monotonic() > deadline:
            pytest.fail(f"worker {pid} did not end")
        time.sleep(0.01)
    for _ in range(20):  # a few more bytecodes and sleeps: the signal handler has run by now
        time.sleep(0.01)
