"""datareel's SIGCHLD handler (:class:`datareel.execute.workers.WorkerDeaths`) defers only the deaths of
datareel's own DataLoader workers: a plain torch DataLoader running beside a datareel Loader learns of its
dead worker exactly as it would without datareel (torch's handler raises in its ``next()``, "is killed by
signal").  Before, datareel swallowed every worker death signalled outside its own ``next()``, and the
plain DataLoader only found out at torch's periodic check, with another message."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # worker processes

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from torch.utils.data import DataLoader, Dataset

    class KillsItsWorker(Dataset):
        def __len__(self):
            return 6
        def __getitem__(self, i):
            if i == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return i

    signal.alarm(100)  # a hang guard for the whole script
    beside = sys.argv[1]
    if beside != "alone":
        import datareel
        workers = 2 if beside == "datareel-persistent" else 1
        loader = datareel.Loader(
            datareel.from_sequence(list(range(100)), name="n"), global_batch_size=2, micro_batch_size=2,
            world_size=1, rank=0, seed=1, num_workers=workers, persistent_workers=beside == "datareel-persistent",
        )
        ours = iter(loader)
        next(ours)  # datareel's workers are alive, its handler installed
    got = []
    it = iter(DataLoader(KillsItsWorker(), batch_size=None, num_workers=1, prefetch_factor=1))
    try:
        while True:
            got.append(next(it))
    except StopIteration:
        print("END", got)
    except RuntimeError as exc:
        cause = exc.__cause__  # torch's handler's report ("is killed by signal"), or its periodic check's
        words = f"{exc} FROM {type(cause).__name__}: {cause}"
        print("ERROR", got, re.sub(r"\\d{2,}", "N", words))
    if beside != "alone":
        print("OURS", next(ours).tolist())  # datareel's loader goes on
        loader.close()
    """
).replace("import os,", "import re, os,")


def run(tmp_path, beside: str) -> list[str]:
    script = tmp_path / "plain.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), beside], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.parametrize("beside", ["datareel", "datareel-persistent"])
def test_a_plain_dataloader_beside_datareel_learns_of_its_dead_worker_as_torch_reports_it(tmp_path, beside):
    alone = run(tmp_path, "alone")
    assert len(alone) == 1 and "is killed by signal" in alone[0] and alone[0].startswith("ERROR [0, 1]")
    lines = run(tmp_path, beside)
    assert lines[0] == alone[0]  # torch's own report from next(), not its later periodic check
    assert re.fullmatch(r"OURS \[\d+, \d+\]", lines[1])
