"""The main job: ``datareel demo`` passes and its verdict can fail."""

import subprocess
import sys

import pytest

from datareel.cli import demo


@pytest.mark.slow
def test_demo_command_passes():
    proc = subprocess.run([sys.executable, "-m", "datareel", "demo"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout and "DIFFERENT" not in proc.stdout
    for label in ("4 ranks × 2 workers", "3 ranks × 1 workers", "2 ranks × 0 workers"):
        assert label in proc.stdout


@pytest.mark.workers
def test_demo_reports_a_difference(monkeypatch):
    lines = []
    real = demo.take_global_batches

    def corrupt(loaders, count, iterators=None):
        batches = real(loaders, count, iterators)
        if loaders[0].world_size == 3:  # the first resume sees a swapped pair of samples
            batches[0][0], batches[0][1] = batches[0][1], batches[0][0]
        return batches

    monkeypatch.setattr(demo, "take_global_batches", corrupt)
    assert demo.run_demo(samples=30, out=lines.append) is False
    assert any("DIFFERENT" in line for line in lines) and "FAIL" in lines[-1]
