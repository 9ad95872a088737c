"""A training script with a background planning process ends, and its planning process with it, on every
way out: a normal end without close(), a planning process stuck in the user's encoder at exit, the loader
garbage-collected mid-run, the training process SIGKILLed, with and without DataLoader workers, and always
with a SIGTERM handler that does not exit (Megatron's DistributedSignalHandler records the signal and lets
training go on; a process forked from such a script inherits it). A 4-rank Megatron-style client once hung
at exit in the interpreter's final join of a planning process."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import gc, multiprocessing, os, signal, sys, time
    import datareel

    mode, workers = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM ignored", flush=True))  # as Megatron's handler
    PARENT = os.getpid()
    calls = 0

    class Encoder:
        def encode_sample(self, sample):
            global calls
            calls += 1
            if mode == "stuck" and os.getpid() != PARENT and calls > 16:
                time.sleep(3600)  # the planning process hangs in the user's code in window 2
            yield {"id": sample["id"]}

        def batch(self, samples):
            return [s["id"] for s in samples]

    data = datareel.from_sequence([{"id": i} for i in range(400)], name="records")
    loader = datareel.Loader(data, global_batch_size=4, micro_batch_size=4, world_size=1, seed=1,
                             task_encoder=Encoder(), stage=datareel.WindowedStage(window=8), num_workers=workers)
    it = iter(loader)
    print("batch", next(it), flush=True)
    planners = [p.pid for p in multiprocessing.active_children() if p.name == "datareel-planner"]
    print("planner", *planners, flush=True)
    if mode == "collected":
        del it, loader
        gc.collect()
        deadline = time.monotonic() + 30
        while any(p.name == "datareel-planner" for p in multiprocessing.active_children()):
            if time.monotonic() > deadline:
                sys.exit("the planning process outlived its collected loader")
            time.sleep(0.05)
        print("planner stopped", flush=True)
    elif mode == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    print("end", flush=True)
    """
)


def _gone(pid: int) -> bool:
    """The process has ended (a zombie left to a PID 1 that does not reap counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize(
    "mode, workers, code",
    [("done", 0, 0), ("done", 2, 0), ("stuck", 0, 0), ("collected", 0, 0), ("killed", 0, -signal.SIGKILL)],
)
def test_the_script_and_its_planning_process_end(tmp_path, mode, workers, code):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    started = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, str(script), mode, str(workers)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the script hung at exit ({mode}, {workers} workers); output: {exc.stdout!r} {exc.stderr!r}")
    lines = run.stdout.splitlines()
    assert run.returncode == code, (run.stdout, run.stderr[-3000:])
    planners = [int(pid) for line in lines if line.startswith("planner ") for pid in line.split()[1:] if pid.isdigit()]
    assert len(planners) == 1, run.stdout  # the test looks at a real planning process
    if mode == "collected":
        assert "planner stopped" in lines
    if code == 0:
        assert lines[-1] == "end" and time.monotonic() - started < 60
    deadline = time.monotonic() + 15  # after a SIGKILL the planning process sees its pipe close
    while not _gone(planners[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(planners[0]), f"planning process {planners[0]} outlived the script ({mode})"
