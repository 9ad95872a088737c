"""A planning process busy in the user's ``encode_sample`` ends with its training process, however that ends:
SIGKILL, a SIGTERM's default action, ``os._exit`` (no exit hook runs in any of them, and the planning
process, asleep in user code, does not see its pipe close), also when the loader was first iterated from
a thread other than the main one; and the training process's stdout, which the planning process
inherited, reaches its end (a ``subprocess.run`` or a shell pipeline reading it would otherwise wait for
the orphan)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, sys, threading, time
    import datareel

    how, stuck = sys.argv[1], sys.argv[2]
    PARENT = os.getpid()

    class Encoder:
        calls = 0

        def encode_sample(self, sample):
            Encoder.calls += 1
            if os.getpid() != PARENT and Encoder.calls > 16:  # the planning process, in window 2
                open(stuck, "w").close()
                while True:  # the user's code, busy for an hour
                    time.sleep(0.05)
            yield {"id": sample["id"]}

        def batch(self, samples):
            return [s["id"] for s in samples]

    data = datareel.from_sequence([{"id": i} for i in range(400)], name="records")
    loader = datareel.Loader(data, global_batch_size=4, micro_batch_size=4, world_size=1, seed=1,
                             task_encoder=Encoder(), stage=datareel.WindowedStage(window=8))
    iterators = []

    def start():
        iterators.append(iter(loader))
        print("batch", next(iterators[0]), flush=True)

    if how == "thread":  # the planning process is started from a thread that then ends
        t = threading.Thread(target=start)
        t.start()
        t.join()
    else:
        start()
    print("planner", *[p.pid for p in multiprocessing.active_children() if p.name == "datareel-planner"], flush=True)
    while not os.path.exists(stuck):
        time.sleep(0.01)
    print("stuck", flush=True)
    if how == "os._exit":
        os._exit(0)
    time.sleep(3600)  # until the test kills it
    """
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def _read_to_end(stream, seconds: float) -> bool:
    """Whether ``stream`` reached its end within ``seconds`` (read in a thread: a pipe read has no timeout)."""
    reader = threading.Thread(target=stream.read, daemon=True)
    reader.start()
    reader.join(seconds)
    return not reader.is_alive()


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "os._exit", "thread"])
def test_the_planning_process_ends_with_its_training_process(tmp_path, how):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    stuck = tmp_path / "stuck"
    run = subprocess.Popen(
        [sys.executable, str(script), how, str(stuck)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    planner = None
    try:
        lines = []
        deadline = time.monotonic() + 120
        while "stuck" not in lines:  # the planning process is in the user's encode_sample now
            assert time.monotonic() < deadline and run.poll() is None, lines
            lines.append(run.stdout.readline().strip())
        planner = next(int(line.split()[1]) for line in lines if line.startswith("planner "))
        assert not _gone(planner)  # alive and busy (from a thread that has ended too: no early death signal)
        if how != "os._exit":
            run.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
        assert run.wait(timeout=30) in (0, -signal.SIGKILL, -signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not _gone(planner) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(planner), f"the planning process outlived its training process ({how})"
        assert _read_to_end(run.stdout, 30), "the training process's stdout is still held open"
    finally:
        with contextlib.suppress(ProcessLookupError):
            run.kill()
        run.wait(timeout=30)
        if planner is not None and not _gone(planner):
            with contextlib.suppress(ProcessLookupError):
                os.kill(planner, signal.SIGKILL)  # leave nothing running, even when the test failed
        run.stdout.close()
        Path(stuck).unlink(missing_ok=True)


WORKERS_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import datareel

    how, stuck = sys.argv[1], sys.argv[2]
    PARENT = os.getpid()

    class Encoder:
        def encode_sample(self, sample):
            if os.getpid() != PARENT and sample >= 8:  # a worker, from micro-batch 2 on
                open(f"{stuck}.{os.getpid()}", "w").close()
                while True:  # the user's code, busy for an hour
                    time.sleep(0.05)
            return sample

    data = datareel.from_sequence(list(range(100)), name="numbers")
    loader = datareel.Loader(data, global_batch_size=4, micro_batch_size=4, world_size=1, rank=0, shuffle=False,
                             num_workers=2, persistent_workers=how == "persistent", task_encoder=Encoder())
    it = iter(loader)
    print("batch", next(it).tolist(), flush=True)
    print("workers", *[w.pid for w in it.inner._workers], flush=True)
    time.sleep(3600)  # until the test kills it
    """
)


@pytest.mark.parametrize("how", ["fresh", "persistent"])
def test_dataloader_workers_busy_in_encode_sample_end_with_a_killed_training_process(tmp_path, how):
    script = tmp_path / "train.py"
    script.write_text(WORKERS_SCRIPT)
    stuck = tmp_path / "stuck"
    run = subprocess.Popen(
        [sys.executable, str(script), how, str(stuck)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not workers:
            assert time.monotonic() < deadline and run.poll() is None
            line = run.stdout.readline().strip()
            if line.startswith("workers "):
                workers = [int(pid) for pid in line.split()[1:]]
        while not all(Path(f"{stuck}.{pid}").exists() for pid in workers):  # both busy in encode_sample
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.01)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + 30
        while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(pid) for pid in workers), "DataLoader workers outlived their training process"
        assert _read_to_end(run.stdout, 30), "the training process's stdout is still held open"
    finally:
        with contextlib.suppress(ProcessLookupError):
            run.kill()
        run.wait(timeout=30)
        for pid in workers:
            if not _gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        run.stdout.close()
