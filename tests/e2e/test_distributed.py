"""Real processes talking through torch.distributed (gloo on 127.0.0.1).

Each test starts its processes through datareel.testing.run_local or a torchrun
subprocess in its own session, and ends every one of them, also on failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch.distributed.checkpoint as dcp

import datareel
from datareel.cli.demo import (
    Job,
    NoisyEncoder,
    Phase,
    TokenFile,
    assemble,
    job_loaders,
    run_phase_distributed,
    run_scenario,
    write_dataset,
)
from datareel.testing import free_port, run_local, unbatch

pytestmark = pytest.mark.slow  # every test here starts real processes


ROOT = Path(__file__).resolve().parents[2]
G, SEED = 24, 99


def test_save_globally_on_4x2_resume_on_2x3_and_3x1(tmp_path):
    data = write_dataset(tmp_path, 100, seed=SEED)  # 100 samples: epoch boundaries at 100 and 200
    phases = (
        Phase(world_size=4, num_workers=2, micro_batch_size=2, batches=5),
        Phase(world_size=2, num_workers=3, micro_batch_size=3, batches=6, restore="src0"),
        Phase(world_size=3, num_workers=1, micro_batch_size=2, batches=6, restore="every"),
    )
    reference, results, state = run_scenario(
        data, phases, seed=SEED, global_batch_size=G, work=tmp_path, runner=run_phase_distributed
    )
    assert state is not None and json.loads(state)["cursor"] == 5 * G
    assert [r["__positions__"] for b in reference for r in b] == list(range(11 * G))
    for phase, first, batches in results:
        assert len(batches) == phase.batches
        assert batches == reference[first : first + phase.batches], f"{phase.label} differs from the reference"
    # the resumed runs cross the epoch boundary at position 200 (global batch 8)
    assert results[1][1] * G < 200 < (results[1][1] + len(results[1][2])) * G


def _dcp_rank(rank: int, world: int, job: Job, ckpt: str, mode: str) -> None:
    (loader,) = job_loaders(job, distributed=True)
    if mode == "load":
        dcp.load({"loader": loader}, checkpoint_id=ckpt)
    it = iter(loader)
    steps = [unbatch(next(it)) for _ in range(job.phase.batches * loader.accumulation_steps)]
    if mode == "save":
        dcp.save({"loader": loader}, checkpoint_id=ckpt)
    loader.close()
    Path(job.out_dir, f"rank{rank}.json").write_text(json.dumps(steps))


def test_dcp_save_on_4_ranks_load_on_2(tmp_path):
    data = str(write_dataset(tmp_path, 70, seed=SEED))
    ckpt = str(tmp_path / "dcp")
    save = Job(
        data=data,
        seed=SEED,
        global_batch_size=G,
        state_in=None,
        out_dir=str(tmp_path / "save"),
        phase=Phase(world_size=4, num_workers=1, micro_batch_size=3, batches=4),
    )
    load = Job(
        data=data,
        seed=SEED,
        global_batch_size=G,
        state_in=None,
        out_dir=str(tmp_path / "load"),
        phase=Phase(world_size=2, num_workers=0, micro_batch_size=4, batches=4),
    )
    for job, mode in ((save, "save"), (load, "load")):
        os.makedirs(job.out_dir)
        run_local(_dcp_rank, job.phase.world_size, job, ckpt, mode, timeout=180)
    got = [
        assemble([json.loads(Path(j.out_dir, f"rank{r}.json").read_text()) for r in range(j.phase.world_size)], 4)
        for j in (save, load)
    ]
    reference = datareel.Loader(
        datareel.from_sequence(TokenFile(data), name="demo-tokens"),
        global_batch_size=G,
        micro_batch_size=G,
        seed=SEED,
        task_encoder=NoisyEncoder(),
    )
    it = iter(reference)
    expected = [unbatch(next(it)) for _ in range(8)]
    assert got[0] + got[1] == expected


def _diverge_rank(rank: int, world: int, job: Job) -> None:
    (loader,) = job_loaders(job, distributed=True)
    it = iter(loader)
    for _ in range(loader.accumulation_steps + (1 if rank == 2 else 0)):  # rank 2 takes one extra micro-batch
        next(it)
    try:
        loader.save_state_global(dst_rank=0)
        message = "no error"
    except datareel.DatareelError as exc:
        message = str(exc)
    Path(job.out_dir, f"rank{rank}.txt").write_text(message)


def test_divergent_rank_makes_save_state_global_raise(tmp_path):
    job = Job(
        data=str(write_dataset(tmp_path, 50)),
        seed=1,
        global_batch_size=G,
        state_in=None,
        out_dir=str(tmp_path),
        phase=Phase(world_size=3, num_workers=0, micro_batch_size=2, batches=1),
    )
    run_local(_diverge_rank, 3, job, timeout=120)
    for rank in range(3):
        message = Path(tmp_path, f"rank{rank}.txt").read_text()
        assert "rank 2 at 30" in message and "24" in message, message


def _load_example():
    spec = importlib.util.spec_from_file_location("train_ddp", ROOT / "examples" / "train_ddp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torchrun(nproc: int, *args: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--nnodes=1",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(ROOT / "examples" / "train_ddp.py"),
        *args,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and every process below it (its workers run in sessions of their own)."""
    try:
        tree = [psutil.Process(proc.pid)]
        tree += tree[0].children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=30)
    proc.wait(timeout=30)


def _read_log(directory: Path, ranks: int) -> list[dict]:
    records = []
    for r in range(ranks):
        for line in (directory / f"rank{r}.jsonl").read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut by SIGKILL
                continue
            records.extend(zip(entry["positions"], entry["ids"]))
    return records


def test_sigkill_mid_run_then_resume_on_fewer_ranks(tmp_path):
    import torch

    common = [
        "--ckpt-dir",
        str(tmp_path / "ckpt"),
        "--global-batches",
        "16",
        "--ckpt-every",
        "3",
        "--samples",
        "50",
        "--seed",
        "5",
        "--global-batch-size",
        str(G),
        "--micro-batch-size",
        "3",
    ]
    killed = _torchrun(4, *common, "--num-workers", "1", "--sleep", "0.3", "--log-dir", str(tmp_path / "log1"))
    ckpt = tmp_path / "ckpt" / "latest.pt"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and killed.poll() is None:
            # wait until a checkpoint exists and the job has gone past it
            if (
                ckpt.exists()
                and len(_read_log(tmp_path / "log1", 4)) > torch.load(ckpt, weights_only=False)["loader"]["cursor"] + G
            ):
                break
            time.sleep(0.05)
        assert killed.poll() is None, "the job ended before it could be killed:\n" + killed.stdout.read()
    finally:
        _kill_tree(killed)
    saved = torch.load(ckpt, weights_only=False)
    cursor = saved["loader"]["cursor"]
    assert 0 < cursor < 16 * G and cursor == saved["global_step"] * G
    before = _read_log(tmp_path / "log1", 4)
    assert max(p for p, _ in before) >= cursor  # the killed job had consumed past its checkpoint

    resumed = _torchrun(2, *common, "--num-workers", "0", "--log-dir", str(tmp_path / "log2"))
    try:
        out, _ = resumed.communicate(timeout=240)
    finally:
        _kill_tree(resumed)
    assert resumed.returncode == 0, out
    assert f"resumed at global batch {saved['global_step']} on 2 ranks" in out
    after = _read_log(tmp_path / "log2", 2)

    combined = sorted([(p, i) for p, i in before if p < cursor] + after)
    example = _load_example()
    reference = datareel.Loader(example.make_dataset(50, 5), global_batch_size=G, micro_batch_size=G, seed=5)
    it = iter(reference)
    expected = []
    for _ in range(16):
        batch = next(it)
        expected += list(zip(batch["__positions__"].tolist(), batch["id"].tolist()))
    assert combined == expected  # exactly the reference prefix: nothing twice, nothing missing
    assert len({p for p, _ in combined}) == len(combined) == 16 * G


def test_single_process_global_save_and_restore():
    loader = datareel.Loader(list(range(10)), global_batch_size=2, micro_batch_size=2)
    it = iter(loader)
    next(it)
    state = loader.save_state_global()
    other = datareel.Loader(list(range(10)), global_batch_size=2, micro_batch_size=1)
    other.restore_state_global(state)
    assert other.cursor == 2
    with pytest.raises(datareel.DatareelError, match="torch.distributed"):
        datareel.Loader(
            list(range(10)), global_batch_size=2, micro_batch_size=1, rank=0, world_size=2
        ).save_state_global()
    with pytest.raises(datareel.DatareelError, match="pass the state"):
        other.restore_state_global(None)


def _tp_rank(rank: int, world: int, out_dir: str) -> None:
    import torch.distributed as dist

    # world 4 = data-parallel 2 × tensor-parallel 2; TP peers (0, 1) and (2, 3) share a DP rank
    groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    dp_group = groups[rank % 2]
    loader = datareel.Loader(
        [{"id": i} for i in range(40)], global_batch_size=8, micro_batch_size=2, seed=3, data_parallel_group=dp_group
    )
    it = iter(loader)
    ids = [next(it)["id"].tolist() for _ in range(loader.accumulation_steps)]
    state = loader.save_state_global(dst_rank=0)
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps({"dp": [loader.rank, loader.world_size], "ids": ids, "state": state})
    )


def test_tensor_parallel_peers_share_batches(tmp_path):
    run_local(_tp_rank, 4, str(tmp_path), timeout=120)
    got = [json.loads(Path(tmp_path, f"rank{r}.json").read_text()) for r in range(4)]
    # global rank g sits at DP rank g // 2 of its group [g % 2, g % 2 + 2]
    assert [g["dp"] for g in got] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    assert got[0]["ids"] == got[1]["ids"] and got[2]["ids"] == got[3]["ids"] and got[0]["ids"] != got[2]["ids"]
    assert got[0]["state"]["cursor"] == 8 and got[1]["state"] is not None and got[2]["state"] is None


def test_demo_distributed_command():
    proc = subprocess.run(
        [sys.executable, "-m", "datareel", "demo", "--distributed"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "real processes" in proc.stdout and "PASS" in proc.stdout and "DIFFERENT" not in proc.stdout
