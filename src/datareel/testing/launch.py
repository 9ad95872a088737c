"""Run a function on several local processes joined by a gloo process group on 127.0.0.1.

Used by ``datareel demo --distributed`` and the multi-process tests.  Every
process started here is ended before :func:`run_local` returns or raises,
also on failure or time-out.

The processes come from a fork server (``forkserver``) that imported torch and
datareel once: each is a fresh process (its own interpreter state, arguments
pickled as under ``spawn``) that starts in milliseconds instead of the seconds a
new interpreter takes to import torch.  ``start_method="spawn"`` gives a new
interpreter per process.  Either way a rank starts its own processes (its DataLoader
workers) with the start method a process torchrun starts has: the platform's default.
"""

from __future__ import annotations

import datetime
import multiprocessing
import socket
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as torch_dist
import torch.multiprocessing as mp

from ..errors import DatareelError, OptionError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn: Callable[..., None], world_size: int, port: int, timeout: float, args: tuple) -> None:
    # A child of the fork server inherits "forkserver" as its default start method, so each rank's DataLoader
    # started a fork server of its own for its workers: 2 to 6 s to the first batch.  A rank gets the default
    # a process torchrun starts has (its workers fork from it).
    multiprocessing.set_start_method(None, force=True)
    torch_dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout),
    )
    try:
        fn(rank, world_size, *args)
    finally:
        torch_dist.destroy_process_group()


PRELOAD = ["torch", "torch.distributed", "datareel", "datareel.loader", "datareel.energon"]


def run_local(
    fn: Callable[..., None], world_size: int, *args: Any, timeout: float = 300.0, start_method: str = "forkserver"
) -> None:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` new processes (gloo, loopback).

    ``fn`` must be importable (a module-level function).  Raises if any process
    fails or if all have not finished within ``timeout`` seconds; the remaining
    processes are killed either way.  ``start_method``: ``"forkserver"`` (forks of
    one server that has imported :data:`PRELOAD`; it starts with the first call)
    or ``"spawn"``.
    """
    if start_method not in ("forkserver", "spawn"):
        raise OptionError(f"start_method={start_method!r} must be 'forkserver' (the default) or 'spawn'")
    if start_method == "forkserver":
        multiprocessing.set_forkserver_preload(PRELOAD)  # read when the server starts (the first call)
    context = mp.start_processes(
        _entry,
        args=(fn, world_size, free_port(), timeout, args),
        nprocs=world_size,
        start_method=start_method,
        join=False,
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=0.2):
            if time.monotonic() > deadline:
                raise DatareelError(f"{world_size} local processes did not finish within {timeout:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join()
