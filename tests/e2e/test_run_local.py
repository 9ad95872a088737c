"""``datareel.testing.run_local`` gives each rank what a process torchrun starts has: here, the default start
method.  A child of the fork server inherited "forkserver", so each rank's DataLoader started a fork server of
its own for its workers (2 to 6 s to the first batch, `datareel demo --distributed` 17 s instead of 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from datareel.testing import run_local

pytestmark = pytest.mark.slow  # real processes


def _start_method(rank: int, world: int, out: str) -> None:
    import multiprocessing

    Path(out, f"rank{rank}").write_text(str(multiprocessing.get_start_method()))


def test_a_rank_has_the_start_method_of_a_fresh_interpreter(tmp_path):
    fresh = subprocess.run(
        [sys.executable, "-c", "import multiprocessing; print(multiprocessing.get_start_method())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    run_local(_start_method, 2, str(tmp_path), timeout=120)
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == [fresh, fresh]
