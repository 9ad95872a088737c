"""``datareel prepare`` stopped mid-scan leaves no scanning process behind and no index that looks complete:
SIGTERM and Ctrl-C (SIGINT) terminate its process pool at once and remove the staging directory; a
SIGKILL, which runs no cleanup, still takes the pool with it (the kernel's parent-death signal and a
watchdog thread), and a later run prepares the dataset. Every scan is slowed to hang in the worker (the
CLI's own ``main``, with ``scan_shard`` wrapped), so the signal always comes mid-work."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from datareel import DatasetError
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import write_shard

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    import datareel.formats.webdataset.prepare as prepare  # the module whose scan_shard prepare_webdataset calls
    from datareel.cli import main

    # Ctrl-C as in a terminal: a test runner started as a background job (`pytest &`, nohup, many CI
    # runners) has SIGINT ignored, every process it starts inherits that, and Python then installs no
    # KeyboardInterrupt handler: the SIGINT below would be ignored, as it rightly is for a background job
    signal.signal(signal.SIGINT, signal.default_int_handler)

    stuck = sys.argv[1]
    real = prepare.scan_shard

    def scan_shard(root, shard):  # a shard that takes an hour to scan
        open(os.path.join(stuck, str(os.getpid())), "w").close()
        while True:
            time.sleep(0.05)

    prepare.scan_shard = scan_shard
    sys.exit(main(sys.argv[2:]))
    """
)
WORKERS = 2


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def _dataset(root: Path) -> Path:
    for s in range(6):
        write_shard(root / f"part-{s}.tar", [(f"s{s}-{i}", {"txt": b"x"}) for i in range(3)])
    return root


def _prepare_later(root: Path):
    """``prepare_webdataset(root)``; the directory lock of processes SIGKILLed a moment ago may take the
    kernel a fraction of a second more to release (seen: ~0.1 s after they ended), so a busy lock is retried
    for a while."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return prepare_webdataset(root, progress=False)
        except DatasetError as exc:
            if "another process is already writing" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_stopped_prepare_leaves_no_process_and_no_index(tmp_path, how):
    root = _dataset(tmp_path / "ds")
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    script = tmp_path / "prepare.py"
    script.write_text(SCRIPT)
    err = tmp_path / "stderr"
    with open(err, "w") as stderr_file:  # a file, not a pipe: a process left holding it blocks no read
        run = subprocess.Popen(
            [sys.executable, str(script), str(stuck), "prepare", str(root), "--workers", str(WORKERS)],
            stdout=subprocess.DEVNULL,
            stderr=stderr_file,
        )
    children: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(list(stuck.iterdir())) < WORKERS:  # every scanning process is busy in a shard
            assert time.monotonic() < deadline and run.poll() is None, err.read_text()
            time.sleep(0.02)
        children = [p.pid for p in psutil.Process(run.pid).children(recursive=True)]
        assert len(children) >= WORKERS
        run.send_signal(getattr(signal, how))
        code = run.wait(timeout=30)  # never waits for the hour-long scans
        stderr = err.read_text()
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in children if not _gone(pid)] == [], f"scanning processes outlived prepare ({how})"
        assert not (root / ".nv-meta").exists() and not list(root.glob("*.idx")), "an index looks complete"
        if how == "SIGTERM":
            assert code == 128 + signal.SIGTERM, stderr
        elif how == "SIGINT":
            assert code == 130 and "interrupted; nothing half-written was kept" in stderr, stderr
        if how != "SIGKILL":  # the run cleaned up after itself; a killed one leaves its staging directory
            assert not list(root.glob(".nv-meta*")), "the staging directory was left"
            assert "Traceback" not in stderr, stderr  # no worker printed a KeyboardInterrupt
        report = _prepare_later(root)  # a later run (removes a killed run's staging)
        assert report.samples == 18 and not [p for p in root.glob(".nv-meta*") if p.name != ".nv-meta"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            run.kill()
        run.wait(timeout=30)
        for pid in children:
            if not _gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # leave nothing running, even when the test failed
