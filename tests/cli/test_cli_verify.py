"""``datareel verify``: its verdict is the Loader's own on every topology tried (hypothesis over the saving
and resuming W, m and N, and the checkpoint position), refusals included, and the keys it lists for the
next global batches are those the restored loaders yield; the command itself on a JSONL dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import Packing
from datareel.cli import main
from datareel.cli.verify import verify_state
from profiles import examples

LENGTHS = np.random.default_rng(1).integers(1, 7, 40)


def length_of(source, indices):
    return LENGTHS[indices]


class Keys:
    """Batches of sample keys (packs: lists of keys), as verify lists them."""

    def batch(self, samples):
        return list(samples)

    def encode_sample(self, sample):
        return sample["__key__"]

    def pack_selected_samples(self, samples):
        return list(samples)


class Online(Keys):
    """Online packing in the windowed stage: verify rebuilds it from the class the state names."""

    def encode_sample(self, sample):
        yield sample["__key__"]

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]


def dataset(kind):
    a = datareel.from_sequence([{"__key__": f"a{i}"} for i in range(40)], name="a")
    if kind == "mixed":
        b = datareel.from_sequence([{"__key__": f"b{i}"} for i in range(15)], name="b")
        return datareel.mix([(a, 2), (b, 1)])
    return a


def loader(kind, G, W, m, rank=0, N=0, **extra):
    packing = Packing(max_length=8, length=length_of, window=6) if kind == "packed" else None
    stage = datareel.WindowedStage(window=5, pack=True, background=False) if kind == "windowed" else None
    return datareel.Loader(
        dataset(kind), global_batch_size=G, micro_batch_size=m, world_size=W, rank=rank, num_workers=N, seed=5,
        task_encoder=Online() if stage else Keys(), packing=packing, stage=stage, **extra,
    )  # fmt: skip


def fitting(G):
    return [(w, m) for w in range(1, 4) for m in range(1, G + 1) if G % (w * m) == 0]


def check(kind, G, W, m, steps, Wn, mn, N):
    """Save after ``steps`` micro-steps on ``W`` × ``m``; verify on ``Wn`` × ``mn`` with ``N`` workers and
    compare with real loaders restored there. -> "resumed" or "refused" (both agreeing)."""
    saving = loader(kind, G, W, m)
    it = iter(saving)
    for _ in range(steps):
        next(it)
    state = saving.state_dict()
    verdict = verify_state(  # trusted: the state names this module's length function or encoder class
        state, dataset(kind), world_size=Wn, micro_batch_size=mn, num_workers=N, show=2, trusted=True
    )
    try:
        ranks = [loader(kind, G, Wn, mn, rank=r, N=N) for r in range(Wn)]
        for r in ranks:
            r.load_state_dict(state)
    except datareel.DatareelError as exc:
        assert not verdict["ok"] and verdict["error"] == {"type": type(exc).__name__, "message": str(exc)}
        return "refused"
    assert verdict["ok"], verdict
    if kind in ("plain", "mixed"):  # the cursor counts samples: every one read is some source's
        assert verdict["inputs_read"] == state["cursor"] == sum(s["read"] for s in verdict["sources"])
    iterators = [iter(r) for r in ranks]
    for b in range(2):  # the rest of the cursor's global batch, then the next whole one
        assert verdict["next"][b]["global_batch"] == ranks[0].global_batch
        for r, it in enumerate(iterators):
            keys = list(next(it))
            while not ranks[r].at_global_batch_boundary:
                keys += next(it)
            assert verdict["next"][b]["ranks"][r] == keys, (b, r)
    for r in ranks:
        r.close()
    return "resumed"


@pytest.mark.workers
@settings(max_examples=examples(0.15))
@given(
    kind=st.sampled_from(["plain", "mixed", "packed", "windowed"]),
    G=st.sampled_from([4, 6, 12]),
    steps=st.integers(0, 9),
    N=st.sampled_from([0, 1]),
    data=st.data(),
)
def test_verify_says_what_the_loader_does_on_every_topology(kind, G, steps, N, data):
    W, m = data.draw(st.sampled_from(fitting(G)), label="saved on")
    Wn, mn = data.draw(st.sampled_from(fitting(G) + [(2, 5)]), label="resumed on")  # (2, 5): never fits
    check(kind, G, W, m, steps, Wn, mn, N)


@pytest.mark.parametrize(
    "case, outcome",
    [
        (("plain", 12, 2, 3, 1, 1, 4, 0), "refused"),  # 6 into global batch 0: 1 × 4 cannot split the rest
        pytest.param(
            ("mixed", 12, 2, 3, 1, 3, 2, 1), "resumed", marks=pytest.mark.workers
        ),  # 3 × 2 divides 6, with a worker
        (("packed", 12, 1, 4, 5, 2, 2, 0), "resumed"),
        (("packed", 12, 1, 4, 5, 2, 5, 0), "refused"),  # 2 × 5 does not divide 12
        (("windowed", 12, 2, 2, 3, 3, 2, 0), "resumed"),  # encoder class imported by the name the state holds
    ],
)
def test_verify_on_chosen_topologies(case, outcome):
    assert check(*case) == outcome


def test_a_spec_mismatch_is_reported_with_its_fields():
    saving = loader("mixed", 12, 2, 3)
    next(iter(saving))
    verdict = verify_state(saving.state_dict(), dataset("mixed"), world_size=2, micro_batch_size=2, seed=6)
    assert not verdict["ok"] and verdict["error"]["type"] == "StateMismatchError"
    assert verdict["error"]["fields"] == {"seed": {"saved": 5, "now": 6}}


def jsonl_job(tmp_path, micro_batch_size, world_size, steps):
    """A prepared 30-line JSONL file and a loader on it (G = 8, seed 3) after ``steps`` micro-steps."""
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(30)))
    assert main(["prepare", str(path)]) == 0
    job = datareel.Loader(
        datareel.open_dataset(path),
        global_batch_size=8,
        micro_batch_size=micro_batch_size,
        world_size=world_size,
        rank=0,
        seed=3,
    )
    it = iter(job)
    for _ in range(steps):
        next(it)
    return path, job


def test_the_command_gates_a_launch(tmp_path, capsys):
    path, job = jsonl_job(tmp_path, 2, 4, 3)  # 3 micro-steps of 8: global batch 3, at its start
    state = tmp_path / "state.json"
    state.write_text(json.dumps(job.state_dict()))
    capsys.readouterr()
    assert main(["verify", str(state), str(path), "--world-size", "2", "--micro-batch-size", "4", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    resumed = datareel.Loader(
        datareel.open_dataset(path),
        global_batch_size=8,
        micro_batch_size=4,
        world_size=2,
        rank=1,
        seed=3,
        task_encoder=Keys(),
    )
    resumed.load_state_dict(job.state_dict())
    assert verdict["ok"] and verdict["next"][0]["global_batch"] == 3
    (source,) = verdict["sources"]
    assert (source["read"], source["epoch"], source["offset"], source["size"]) == (24, 0, 24, 30)
    assert verdict["next"][0]["ranks"][1] == next(iter(resumed))  # what rank 1 reads first after the restore
    code = main(["verify", str(state), str(path), "--world-size", "3", "--micro-batch-size", "1"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("REFUSED on world_size 3 × micro_batch_size 1: TopologyError")
    code = main(["verify", str(state), str(path), "--world-size", "2", "--micro-batch-size", "4", "--seed", "4"])
    assert code == 1 and "StateMismatchError" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["verify", str(state), str(path), "--world-size", "2"])  # --micro-batch-size is required


@pytest.mark.parametrize("container", ["torch.save", "dcp"])
def test_verify_reads_checkpoints_and_refuses_damaged_or_foreign_ones(tmp_path, capsys, container):
    import warnings

    import torch

    path, job = jsonl_job(tmp_path, 4, 2, 1)
    ckpt = tmp_path / "ckpt"
    if container == "torch.save":
        torch.save({"model": {"w": torch.ones(1)}, "loader": job.state_dict()}, ckpt)
    else:
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"loader": job, "w": torch.ones(1)}, checkpoint_id=str(ckpt))
    capsys.readouterr()
    assert main(["verify", str(ckpt), str(path), "--world-size", "4", "--micro-batch-size", "2"]) == 0
    assert capsys.readouterr().out.startswith("OK on world_size 4 × micro_batch_size 2 (1 accumulation steps)")
    edited = tmp_path / "edited.pt"
    torch.save({"loader": {**job.state_dict(), "cursor": 12}}, edited)
    assert main(["verify", str(edited), str(path), "--world-size", "2", "--micro-batch-size", "4"]) == 1
    assert "does not match its cursor=12" in capsys.readouterr().out
    foreign = tmp_path / "foreign.pt"
    torch.save({"loader": {"worker_states": [], "micro_batch_size": 4}}, foreign)
    assert main(["verify", str(foreign), str(path), "--world-size", "2", "--micro-batch-size", "4"]) == 1
    assert "Megatron-Energon loader state" in capsys.readouterr().err
    job.close()


class Truncating(Keys):
    def truncate_sample(self, sample, max_length):
        return sample


def test_truncating_packing_and_the_end_of_a_finite_pass():
    common = dict(global_batch_size=4, micro_batch_size=2, world_size=2, rank=0, seed=5, task_encoder=Truncating())
    packing = Packing(max_length=4, length=length_of, window=6, over_length="truncate")  # lengths go up to 6
    job = datareel.Loader(dataset("plain"), packing=packing, **common)
    next(iter(job))
    verdict = verify_state(job.state_dict(), dataset("plain"), world_size=1, micro_batch_size=2, trusted=True)
    assert verdict["ok"], verdict  # the stand-in encoder truncates too
    packing = Packing(max_length=8, length=length_of, window=16)
    job = datareel.Loader(dataset("plain"), packing=packing, repeat=False, **common)
    for _ in job:  # the whole finite pass
        pass
    verdict = verify_state(
        job.state_dict(), dataset("plain"), world_size=1, micro_batch_size=4, repeat=False, trusted=True
    )
    (source,) = verdict["sources"]
    assert verdict["ok"] and (source["read"], source["epoch"], source["offset"]) == (40, 1, 0)


@pytest.mark.slow
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path, command, unbuffered):
    """`datareel ... | head`: the reader closes the pipe after a few bytes; the command stops with the shell's
    SIGPIPE status (141) and writes nothing to stderr (no "Broken pipe" error, no ignored-exception noise).
    An answer the pipe holds whole is written at once, so it succeeds whether or not stdout is buffered
    (PYTHONUNBUFFERED=1 made print write the JSON and its newline apart: 141 about one run in three)."""
    import os
    import subprocess
    import sys

    (tmp_path / "ids.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(4000)))
    assert main(["prepare", str(tmp_path / "ids.jsonl")]) == 0
    loader = datareel.Loader(
        datareel.open_dataset(str(tmp_path / "ids.jsonl")), global_batch_size=8, micro_batch_size=8
    )
    (tmp_path / "state.json").write_text(json.dumps(loader.state_dict()))
    args = [str(tmp_path / "state.json"), str(tmp_path / "ids.jsonl")]
    if command == "verify":
        args += ["--world-size", "1", "--micro-batch-size", "1", "--show", "3000"]  # ~300 KB of keys
    else:
        args = [args[0], "--dataset", args[1], "--json"]  # short output: the pipe holds it all
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update({"PYTHONUNBUFFERED": "1"} if unbuffered else {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "datareel", command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read(20)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert first and err == "", err
    assert code == (141 if command == "verify" else 0)
