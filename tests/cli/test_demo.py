"""The main job: ``datareel demo`` passes and its verdict can fail; ``--keep`` leaves what the operating
commands run on."""

import json
import shlex
import subprocess
import sys

import pytest

import datareel
from datareel.cli import demo, main


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


@pytest.mark.workers
def test_the_demo_keeps_its_dataset_and_checkpoint_and_the_commands_it_prints_run(tmp_path, capsys):
    """``--keep DIR``: the demo's prepared dataset and its 4-rank checkpoint stay in DIR, and every operating
    command it prints (info, preview, inspect, verify, plot) runs as printed and succeeds."""
    keep = tmp_path / "new" / "keep"
    assert main(["demo", "--samples", "30", "--quiet", "--keep", str(keep)]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and f"kept in {keep}" in out
    assert sorted(p.name for p in keep.iterdir()) == ["checkpoint.json", "dataset"]
    commands = [shlex.split(line, comments=True) for line in out.splitlines() if line.startswith("  datareel ")]
    assert [argv[1] for argv in commands] == ["info", "preview", "inspect", "verify", "plot"]
    results = {}
    for argv in commands:
        assert main(argv[1:]) == 0, argv
        results[argv[1]] = capsys.readouterr().out
    assert "samples: 30" in results["info"]
    assert "global batch 5 (global_batch_size 24), at its start" in results["inspect"]
    assert results["verify"].startswith("OK on world_size 3 × micro_batch_size 2")
    assert (keep / "plot.png").stat().st_size > 0
    # the kept dataset is what the demo read: its checkpoint restores there, with the demo's own encoder
    loader = datareel.Loader(
        datareel.open_dataset(str(keep / "dataset")), global_batch_size=24, micro_batch_size=24, seed=1234
    )
    loader.load_state_dict(json.loads((keep / "checkpoint.json").read_text()))
    assert loader.state_dict()["cursor"] == 5 * 24


@pytest.mark.parametrize("given", ["non-empty", "file"])
def test_the_demo_refuses_a_keep_directory_that_holds_something(tmp_path, capsys, given):
    keep = tmp_path / "keep"
    if given == "file":
        keep.write_text("mine")
    else:
        keep.mkdir()
        (keep / "notes.txt").write_text("mine")
    assert main(["demo", "--samples", "30", "--quiet", "--keep", str(keep)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"datareel demo: error: --keep {keep}: {keep} is ")
    assert ("notes.txt" in err) if given == "non-empty" else ("is a file" in err)
    assert "new or empty directory" in err
    assert (keep.read_text() if given == "file" else sorted(p.name for p in keep.iterdir())) in ("mine", ["notes.txt"])


@pytest.mark.workers
def test_the_demo_accepts_an_existing_empty_keep_directory(tmp_path):
    lines = []
    assert demo.run_demo(samples=12, out=lines.append, keep=tmp_path) is True
    assert (tmp_path / "checkpoint.json").is_file() and (tmp_path / "dataset" / ".nv-meta").is_dir()
