"""Run a script on N local ranks as torchrun does (its rendezvous variables, one process per rank, the script as
``__main__``, unchanged), each rank forked from one server process that imported torch, megatron.energon and
datareel.energon once.  A rank then starts in milliseconds instead of the ~2 s a new interpreter spends on those
imports, and no launcher interpreter runs: the Megatron client tests start 20 ranks this way.

:class:`RankServer` is the server; :meth:`RankServer.run` one job (all its ranks), returning their stdout in rank
order.  A job that outlives its timeout is stopped with every process's Python stacks in the failure (faulthandler
on SIGABRT), as the tests' torchrun helper does.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datareel.testing.launch import free_port

SERVER = r"""
import atexit, faulthandler, json, os, runpy, signal, sys, tempfile, threading
import torch, torch.distributed, megatron.energon, datareel.energon  # imported once, inherited by every rank
if threading.active_count() != 1:
    raise SystemExit(f"the rank server must not run threads before it forks: {threading.enumerate()}")
requests, replies = sys.stdin, os.fdopen(os.dup(1), "w")
for line in requests:
    job = json.loads(line)
    pids = []
    for rank in range(job["nproc"]):
        pid = os.fork()
        if pid == 0:  # a rank: torchrun's environment, its output in files, the script as __main__
            os.setsid()
            os.close(replies.fileno())
            code = 1
            try:
                os.environ.clear()
                os.environ.update(job["env"], RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0",
                                  ROLE_RANK=str(rank), WORLD_SIZE=str(job["nproc"]),
                                  LOCAL_WORLD_SIZE=str(job["nproc"]), ROLE_WORLD_SIZE=str(job["nproc"]))
                tempfile.tempdir = None
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                for fd, name in ((1, "out"), (2, "err")):
                    os.dup2(os.open(f"{job['dir']}/rank-{rank}.{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
                faulthandler.enable(all_threads=True)  # SIGABRT on a hang: every thread's stack
                sys.argv = [job["script"], *job["args"]]
                extra = [p for p in job["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
                sys.path[:1] = [os.path.dirname(os.path.abspath(job["script"])), *extra]  # as `python script`
                try:
                    runpy.run_path(job["script"], run_name="__main__")
                    code = 0
                except SystemExit as stop:
                    code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                except BaseException:
                    import traceback
                    traceback.print_exc()
                threading._shutdown()  # as an interpreter ends: its threads, then its exit hooks
                atexit._run_exitfuncs()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:
                        pass
                os._exit(code)
        pids.append(pid)
    replies.write(json.dumps({"pids": pids}) + "\n")
    replies.flush()
    codes = []
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    replies.write(json.dumps({"codes": codes}) + "\n")
    replies.flush()
"""


class RankServer:
    """The server process, started at construction (its imports take a few seconds) and ended by :meth:`close`."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )

    def run(self, script: Path, nproc: int, *args: str, scratch: Path, timeout: float = 240) -> str:
        """Run ``script args`` on ``nproc`` ranks; fail (with every rank's output) unless all exit 0."""
        logs = scratch / "ranks"
        logs.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(scratch),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
        }  # fmt: skip
        request = {"script": str(script), "args": list(args), "nproc": nproc, "env": env, "dir": str(logs)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pids = self._reply(deadline)["pids"]
        try:
            codes = self._reply(deadline)["codes"]
        except TimeoutError:
            for pid in pids:  # every rank's stacks into its err file, then the rank and its workers go
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGABRT)
            time.sleep(3)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            self._reply(time.monotonic() + 30)
            pytest.fail(f"{script.name} {' '.join(args)} on {nproc} ranks hung:\n{self._output(logs, nproc, 'err')}")
        stdout = self._output(logs, nproc, "out")
        assert codes == [0] * nproc, f"exit codes {codes}\n{stdout[-4000:]}\n{self._output(logs, nproc, 'err')[-8000:]}"
        return stdout

    def _reply(self, deadline: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError("the rank server did not answer in time")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the rank server ended (exit code {self.proc.wait()})")
        return json.loads(line)

    @staticmethod
    def _output(logs: Path, nproc: int, kind: str) -> str:
        return "".join((logs / f"rank-{r}.{kind}").read_text(errors="replace") for r in range(nproc))

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
