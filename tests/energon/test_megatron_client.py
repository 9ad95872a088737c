"""Acceptance: a Megatron-style Energon client (examples/energon_vlm_client.py, in the form of Megatron-LM's newer
multimodal provider: FileStoreCachePool, SourceInfo, WorkerConfig error handlers) runs on Energon 7.4.1 and,
with only its megatron.energon imports switched and global_batch_size added, on datareel: saved on 2 ranks through
per-rank state files, it resumes on 1 and on 4 ranks (other worker counts) with the uninterrupted run's
global batches, with packing off and on."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image

import datareel
from datareel.testing.launch import free_port
from rank_launcher import RankServer
from wds_helpers import ENERGON, write_shard

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "energon_vlm_client.py"
G = 8
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    """A captioning dataset (images of several sizes) prepared by Energon's own CLI, 80/20 train/val."""
    root = tmp_path_factory.mktemp("vlm")
    rng = np.random.default_rng(0)
    for s in range(3):
        samples = []
        for i in range(s * 20, s * 20 + 20):
            h, w = int(rng.integers(4, 12)), int(rng.integers(4, 12))
            image = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(image, format="png")
            words = " ".join(f"w{int(x)}" * int(x % 3 + 1) for x in rng.integers(0, 50, int(rng.integers(2, 9))))
            samples.append((f"img{i:03d}", {"png": image.getvalue(), "txt": f"caption {i}: {words}".encode()}))
        write_shard(root / f"shard-{s}.tar", samples)
    cmd = [
        ENERGON, "prepare", str(root), "--non-interactive", "--split-ratio=8,2,0",
        "--sample-type=CaptioningSample", '--field-map={"image": "png", "caption": "txt"}',
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """The client with only its megatron.energon imports (the package and task_encoder.base) switched."""
    original = SCRIPT.read_text()
    changed = original.replace("megatron.energon", "datareel.energon")
    differ = [b for a, b in zip(original.splitlines(), changed.splitlines()) if a != b]
    assert len(differ) == 3 and all(line.startswith("from datareel.energon") for line in differ), differ
    path = tmp_path_factory.mktemp("client") / "client.py"
    path.write_text(changed)
    return path


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Megatron-LM's pattern: only the loader functions' import switched; the task encoder, samples, batches,
    WorkerConfig, FileStoreCachePool, SourceInfo and stateless stay megatron.energon's."""
    original = SCRIPT.read_text()
    line = "from megatron.energon import (  # the loader functions"
    assert original.count(line) == 1
    path = tmp_path_factory.mktemp("mixed") / "client.py"
    path.write_text(original.replace(line, line.replace("megatron.energon", "datareel.energon")))
    return path


def forked(ranks: RankServer, script: Path, nproc: int, dataset: Path, out: Path, *args: str) -> str:
    """Ranks forked from the session's server (conftest.py): the datareel runs and Energon's packing run.  One
    Energon run goes through torchrun itself, and so do datareel's in tests/e2e/test_distributed.py."""
    return ranks.run(script, nproc, str(dataset), str(out), *args, scratch=out.parent / f"{out.name}-tmp")


def torchrun(script: Path, nproc: int, dataset: Path, out: Path, *args: str, timeout: float = 240) -> str:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--nnodes=1",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(script), str(dataset), str(out), *args,
    ]  # fmt: skip
    scratch = out.parent / f"{out.name}-tmp"  # torchrun's own temporary directories stay under the test's
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", "TMPDIR": str(scratch)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # a hang: every process's Python stacks (faulthandler on SIGABRT), then fail
        tree = psutil.Process(proc.pid).children(recursive=True)
        described = "\n".join(f"{p.pid} {p.status()} {' '.join(p.cmdline())[:160]}" for p in tree if p.is_running())
        for p in reversed(tree):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGABRT)
        time.sleep(5)
        for p in [psutil.Process(proc.pid), *tree]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"torchrun {args} hung; processes:\n{described}\nstderr:\n{stderr[-20000:]}")
    assert proc.returncode == 0, stdout[-4000:] + stderr[-4000:]
    return stdout


def global_batches(out: Path, world: int) -> list[list]:
    """Per global batch: every micro-batch record in reel order (micro-step by micro-step, ranks in order)."""
    ranks = [json.loads((out / f"train-{r}.json").read_text()) for r in range(world)]
    return [
        [ranks[r][step][a] for a in range(len(ranks[0][step])) for r in range(world)] for step in range(len(ranks[0]))
    ]


@pytest.mark.parametrize("pack", [False, True], ids=["packing-off", "packing-on"])
def test_the_client_runs_on_energon(captions, ranks, tmp_path, pack):
    """megatron.energon's own loop: under torchrun itself (packing off: the one run of the client as a user starts
    it), and in ranks forked from the session's server (packing on)."""
    out = tmp_path / "energon"
    args = ("--steps", "4", *(["--pack"] if pack else []))
    if pack:
        forked(ranks, SCRIPT, 2, captions, out, *args)
    else:
        torchrun(SCRIPT, 2, captions, out, *args)
    batches = global_batches(out, 2)
    assert len(batches) == 4 and all(len(r["keys"]) == 2 for b in batches for r in b)
    if pack:
        assert any("," in k for b in batches for r in b for k in r["keys"])  # some packs hold several samples
    assert json.loads((out / "val-0.json").read_text())


@pytest.mark.parametrize("pack", [False, True], ids=["packing-off", "packing-on"])
def test_the_client_resumes_on_datareel_on_1_and_4_ranks_through_per_rank_files(captions, ours, ranks, tmp_path, pack):
    train = datareel.open_dataset(captions, split="train")
    damaged = train.key(5)  # its encoding fails: the handler is told, the sample skipped
    flags = ["--global-batch-size", str(G), "--fail-key", damaged, *(["--pack"] if pack else [])]
    first = tmp_path / "w2"
    stdout = forked(ranks, ours, 2, captions, first, "--steps", "7", "--save-at", "3", "--workers", "1", *flags)
    reference = global_batches(first, 2)
    assert len(reference) == 7 and sorted((first / "state").iterdir())
    keys = [k for b in reference for r in b for key in r["keys"] for k in key.split(",")]
    assert f"sample {damaged} failed" in stdout and damaged not in keys and len(set(keys)) == len(train) - 1
    # the newer provider's handler (exception, sample, sources) is told where the sample was read
    assert re.search(rf"sample {damaged} failed: .*\(read from \S+:shard-\d\.tar#\d+\)", stdout), stdout[-2000:]
    if pack:
        assert any("," in k for b in reference for r in b for k in r["keys"])
    evals = json.loads((first / "val-0.json").read_text())
    assert len(evals) == 3 and evals[0] == evals[1] == evals[2]  # LimitDataset(reset_after_epoch): same batches
    for world, workers in ((1, 2), (4, 0)):
        out = tmp_path / f"w{world}"
        shutil.copytree(first / "state", out / "state")  # rank files 0 and 1 only: ranks 2, 3 find none
        forked(ranks, ours, world, captions, out, "--steps", "4", "--load", "--workers", str(workers), *flags)
        resumed = global_batches(out, world)
        flat = [[(k, r["tokens"], r["imgs"]) for r in b for k in r["keys"]] for b in resumed]
        expected = [[(k, r["tokens"], r["imgs"]) for r in b for k in r["keys"]] for b in reference[3:]]
        assert [[k for k, *_ in b] for b in flat] == [[k for k, *_ in b] for b in expected], f"keys on {world} ranks"
        assert flat == expected, f"augmentation differs on {world} ranks"


def test_megatron_types_with_datareel_loaders_resume_elastically(captions, ours, mixed, ranks, tmp_path):
    """Every type megatron.energon's (only the loader functions from datareel.energon): the same global batches,
    sample by sample, as with every import switched; saved per rank at N=2 and at N=0 on 2 ranks, it resumes on
    1 rank (N=0) and on 4 ranks (N=2) with the uninterrupted run's global batches."""
    train = datareel.open_dataset(captions, split="train")
    damaged = train.key(7)
    flags = ["--global-batch-size", str(G), "--fail-key", damaged, "--steps", "6", "--save-at", "3"]
    stdout = forked(ranks, mixed, 2, captions, tmp_path / "mixed", "--workers", "2", *flags)
    reference = global_batches(tmp_path / "mixed", 2)
    assert re.search(rf"sample {damaged} failed: .*\(read from \S+:shard-\d\.tar#\d+\)", stdout), stdout[-2000:]
    forked(ranks, ours, 2, captions, tmp_path / "ours", "--workers", "0", *flags)
    assert global_batches(tmp_path / "ours", 2) == reference  # the facade's own types: the same batches
    keys = [k for b in reference for r in b for k in r["keys"]]
    assert set(keys) == {train.key(i) for i in range(len(train))} - {damaged}  # 1.2 epochs: all but the damaged
    for world, workers, saved in ((1, "0", "mixed"), (4, "2", "ours")):
        out = tmp_path / f"w{world}"
        shutil.copytree(tmp_path / saved / "state", out / "state")  # rank files 0 and 1: ranks 2, 3 adopt
        args = ["--global-batch-size", str(G), "--fail-key", damaged, "--steps", "3", "--load", "--workers", workers]
        forked(ranks, mixed, world, captions, out, *args)
        assert global_batches(out, world) == reference[3:], f"resumed on {world} ranks from the {saved} run's state"
