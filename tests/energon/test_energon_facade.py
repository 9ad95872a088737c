"""datareel.energon: Energon's API, elastic underneath."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from datareel import DatareelError, StateMismatchError
from datareel import energon as den
from datareel.testing import free_port, run_local
from encoders import Keys
from state_edit import edited
from wds_helpers import val_blend
from where import HELPERS

TESTS = HELPERS  # energon_script.py


def global_batches(root, W, N, count, G=8, m=2, seed=0):
    """Global batches through the facade, ranks simulated in this process."""
    loaders = []
    for rank in range(W):
        config = den.WorkerConfig(rank=rank, world_size=W, num_workers=N, seed_offset=seed)
        ds = den.get_train_dataset(
            str(root),
            worker_config=config,
            batch_size=m,
            shuffle_buffer_size=100,
            max_samples_per_sequence=100,
            task_encoder=Keys(),
            global_batch_size=G,
        )
        loaders.append(iter(den.get_savable_loader(ds)))
    steps = []  # per micro-step: every rank's keys, in rank order
    for _ in range(count * G // (m * W)):
        steps.append([k for it in loaders for k in next(it)])
    return steps


def regroup(micro_steps, per_global):
    """Micro-steps (each: all ranks' keys) -> global batches of ``per_global`` keys."""
    return chunks([k for step in micro_steps for k in step], per_global)


def chunks(flat, n):
    return [flat[i : i + n] for i in range(0, len(flat), n)]


@pytest.mark.workers
def test_reproducible_scaling_example(texts):
    # Energon's example: global batch 8, micro-batch 2; W4·N1 vs W1·N4 -- and W2·N3, W1·N0, which Energon cannot do
    results = {cfg: regroup(global_batches(texts, *cfg, count=12), 8) for cfg in [(4, 1), (1, 4), (2, 3), (1, 0)]}
    reference = results[(1, 0)]
    assert len(reference) == 12 and all(len(b) == 8 for b in reference)
    for cfg, batches in results.items():
        assert batches == reference, f"W{cfg[0]}·N{cfg[1]} differs"


def test_buffer_arguments_are_explained_once_and_others_refused(texts, caplog):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    den.datasets._explained.clear()
    with caplog.at_level(logging.INFO, logger="datareel"):
        for _ in range(2):
            den.get_train_dataset(
                str(texts),
                worker_config=config,
                batch_size=2,
                shuffle_buffer_size=100,
                max_samples_per_sequence=100,
                parallel_shard_iters=2,
            )
    assert caplog.text.count("shuffle_buffer_size is accepted") == 1 and "parallel_shard_iters" in caplog.text
    with pytest.raises(DatareelError, match=r"packing_buffer_size=0\) must be a positive integer"):
        den.get_train_dataset(str(texts), worker_config=config, batch_size=2, packing_buffer_size=0)
    online = den.get_train_dataset(str(texts), worker_config=config, batch_size=2, packing_buffer_size=16)
    with pytest.raises(
        DatareelError, match="online packing .* needs the task encoder to define select_samples_to_pack"
    ):
        den.get_savable_loader(online)
    over_two = den.get_train_dataset(  # Energon's meaning (tests/energon/test_energon_metadataset_epochs)
        str(texts),
        worker_config=config,
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        shuffle_over_epochs_multiplier=2,
    )
    assert over_two.open_kwargs == {"shuffle_over_epochs_multiplier": 2}
    with pytest.raises(DatareelError, match="sample_type"):
        den.get_train_dataset(
            str(texts),
            worker_config=config,
            batch_size=2,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            sample_type="TextSample",
        )


def test_without_global_batch_size_a_world_size_change_is_refused_with_the_fix(texts):
    def loader(W, rank=0, **kw):
        config = den.WorkerConfig(rank=rank, world_size=W, num_workers=0)
        return den.get_savable_loader(
            den.get_train_dataset(
                str(texts),
                worker_config=config,
                batch_size=2,
                shuffle_buffer_size=None,
                max_samples_per_sequence=None,
                task_encoder=Keys(),
                **kw,
            )
        )

    first = loader(1)
    it = iter(first)
    next(it)
    state = first.save_state_rank()
    with pytest.raises(StateMismatchError, match=r"Pass global_batch_size=2 to get_train_dataset"):
        loader(2).restore_state_rank(state)
    ok = loader(1, global_batch_size=2)
    ok.restore_state_rank(state)
    assert ok.cursor == 2


def test_an_energon_checkpoint_is_adopted_or_refused_clearly(texts, tmp_path):
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        WorkerConfig,
        get_savable_loader,
        get_train_dataset,
        stateless,
    )

    class Passthrough(DefaultTaskEncoder):
        cookers = [Cooker(stateless(lambda sample: sample))]

    ds = get_train_dataset(
        str(texts),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=2,
        shuffle_buffer_size=10,
        max_samples_per_sequence=10,
        task_encoder=Passthrough(),
    )
    energon_loader = get_savable_loader(ds, watchdog_timeout_seconds=None)
    next(iter(energon_loader))
    state = energon_loader.save_state_rank()
    ours = den.get_savable_loader(
        den.get_train_dataset(
            str(texts),
            worker_config=den.WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=2,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
    )
    for bad in (state, [state]):  # another configuration than the old job's: refused naming what differs
        with pytest.raises(DatareelError, match="max_samples_per_sequence differ from the old job's"):
            ours.restore_state_rank(bad)
    same = den.get_savable_loader(  # the old job's configuration: adopted (tests/energon/test_adopt_energon.py)
        den.get_train_dataset(
            str(texts),
            worker_config=den.WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=2,
            shuffle_buffer_size=10,
            max_samples_per_sequence=10,
        )
    )
    same.restore_state_rank(state)
    assert len(same.loader.dataset.remainder) == 88  # 90 samples, one batch of 2 handed out


def test_virtual_epochs_and_val_limit(texts):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    train = den.get_savable_loader(
        den.get_train_dataset(
            str(texts),
            worker_config=config,
            batch_size=3,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            virtual_epoch_length=5,
            task_encoder=Keys(),
        )
    )
    first, second = list(train), list(train)
    assert len(first) == len(second) == 5 == len(train) and first != second and train.cursor == 30
    val = den.get_savable_loader(
        den.get_val_dataset(str(texts), split_part="train", worker_config=config, batch_size=7, task_encoder=Keys())
    )
    keys = [k for b in val for k in b]
    assert len(keys) == 90 and keys[:2] == ["t0-000", "t0-001"] and len(val) == 13  # batches per pass
    limited = den.get_savable_loader(
        den.get_val_dataset(
            str(texts), split_part="train", worker_config=config, batch_size=7, task_encoder=Keys(), limit=4
        )
    )
    assert len(list(limited)) == 4 == len(limited)
    single = den.get_savable_loader(
        den.get_train_dataset(
            str(texts), worker_config=config, batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None
        )
    )
    sample = next(iter(single))
    assert isinstance(sample, den.TextSample) and sample.text.startswith("text")


# -- Energon's three save/restore scenarios, in real processes ------------------------------------


def _rank_loader(root, G, workers):
    """This process's facade loader, as a Megatron job builds it (rank and world from torch.distributed)."""
    config = den.WorkerConfig.default_worker_config(num_workers=workers)
    return den.get_savable_loader(
        den.get_train_dataset(
            root,
            worker_config=config,
            batch_size=2,
            shuffle_buffer_size=100,
            max_samples_per_sequence=100,
            task_encoder=Keys(),
            global_batch_size=G,
        )
    )


def _scenario(rank, world, root, out, scenario, phase, G):
    loader = _rank_loader(root, G, workers=1)
    out = Path(out)
    if phase == "resume":
        if scenario == "rank":
            loader.restore_state_rank(torch.load(out / f"state-{rank % 2}.pt", weights_only=False))
        elif scenario == "global-src0":
            loader.restore_state_global(
                torch.load(out / "state.pt", weights_only=False) if rank == 0 else None, src_rank=0
            )
        else:  # global saved, loaded by every rank
            loader.restore_state_global(torch.load(out / "state.pt", weights_only=False))
    it = iter(loader)
    keys = [next(it) for _ in range(3 * G // (2 * world))]
    if phase == "save":
        if scenario == "rank":
            torch.save(loader.save_state_rank(), out / f"state-{rank}.pt")
        else:
            state = loader.save_state_global(global_dst_rank=0)
            if rank == 0:
                torch.save(state, out / "state.pt")
    (out / f"{phase}-{rank}.json").write_text(json.dumps(keys))


SCENARIOS = ["rank", "global-src0", "global-every"]


def _scenarios(rank, world, root, out, phase, G):
    for scenario in SCENARIOS:
        _scenario(rank, world, root, str(Path(out) / scenario), scenario, phase, G)


@pytest.fixture(scope="module")
def scenario_runs(texts, tmp_path_factory):
    """The three scenarios saved by the same 2 processes and resumed by the same 3 (elastic: 2 -> 3 ranks), each
    in its own folder: a process group per scenario and phase cost the processes' start three times over."""
    out = tmp_path_factory.mktemp("scenarios")
    for scenario in SCENARIOS:
        (out / scenario).mkdir()
    run_local(_scenarios, 2, str(texts), str(out), "save", 12, timeout=180)
    run_local(_scenarios, 3, str(texts), str(out), "resume", 12, timeout=180)
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.slow
def test_energon_save_restore_scenarios_in_real_processes(texts, scenario_runs, scenario):
    G = 12
    got = []
    for phase, world in (("save", 2), ("resume", 3)):
        steps = [json.loads((scenario_runs / scenario / f"{phase}-{r}.json").read_text()) for r in range(world)]
        got += [k for step in zip(*steps) for batch in step for k in batch]
    reference = regroup(global_batches(texts, 1, 0, count=6, G=G, m=12), G)
    assert chunks(got, G) == reference


@pytest.mark.slow
def test_an_energon_script_runs_by_changing_only_its_import(texts, ranks, tmp_path):
    original = (TESTS / "energon_script.py").read_text()
    changed = original.replace("from megatron.energon import", "from datareel.energon import")
    assert sum(a != b for a, b in zip(original.splitlines(), changed.splitlines())) == 1
    ours = tmp_path / "ours.py"
    ours.write_text(changed)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}

    def torchrun(script, nproc, out, *args):
        out.mkdir(exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            "--nnodes=1",
            "--master-addr=127.0.0.1",
            f"--master-port={free_port()}",
            str(script),
            str(texts),
            str(out),
            *args,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    def forked(script, nproc, out, *args):  # datareel's runs: ranks forked from the session's server (conftest)
        out.mkdir(exist_ok=True)
        return ranks.run(script, nproc, str(texts), str(out), *args, scratch=tmp_path / f"{out.name}-{nproc}-tmp")

    torchrun(TESTS / "energon_script.py", 2, tmp_path / "energon", "3")  # the original, on Energon itself
    assert json.loads((tmp_path / "energon" / "consumed-0.json").read_text())
    run = tmp_path / "datareel"
    forked(ours, 2, run, "3", "--global-batch-size", "8")
    first = [json.loads((run / f"consumed-{r}.json").read_text()) for r in range(2)]
    got = [k for step in zip(*first) for batch in step for k in batch]
    assert len(got) == 3 * 8
    forked(ours, 1, run, "2", "--restore", "--global-batch-size", "8")  # resume on another world size
    resumed = json.loads((run / "consumed-0.json").read_text())
    got += [k for batch in resumed for k in batch]
    reference = regroup(global_batches(texts, 1, 0, count=5, G=8, m=8), 8)
    assert chunks(got, 8) == reference


# -- Megatron's per-rank state files, on a world that grew or shrank ---------------------------------


def _per_rank_files(rank, world, root, out, phase, G, workers, corrupt):
    loader = _rank_loader(root, G, workers)
    out = Path(out)
    mine = out / f"state-{rank}.pt"
    if phase == "resume" and mine.exists():  # Megatron restores only where a file of this rank exists
        state = torch.load(mine, weights_only=False)
        if corrupt and rank == 1:
            state = edited(state, cursor=state["cursor"] + G)
        loader.restore_state_rank(state)
    try:
        it = iter(loader)
        keys = [next(it) for _ in range(3 * G // (2 * world))]
    except DatareelError as exc:
        (out / f"error-{rank}.txt").write_text(str(exc))
        return
    if phase == "save":
        torch.save(loader.save_state_rank(), mine)
    (out / f"{phase}-{world}-{rank}.json").write_text(json.dumps(keys))


@pytest.fixture(scope="module")
def per_rank_files(texts, tmp_path_factory):
    """Per-rank state files saved by 2 processes (1 worker each), once for the resumes below."""
    out = tmp_path_factory.mktemp("per-rank")
    run_local(_per_rank_files, 2, str(texts), str(out), "save", 8, 1, False, timeout=180)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("resume_world,workers", [(4, 0), (1, 2)])
def test_per_rank_state_files_resume_when_the_world_grows_or_shrinks(
    texts, per_rank_files, tmp_path, resume_world, workers
):
    G = 8
    tmp_path = tmp_path / "run"
    shutil.copytree(per_rank_files, tmp_path)  # each resume writes its own files beside the saved ones
    run_local(_per_rank_files, resume_world, str(texts), str(tmp_path), "resume", G, workers, False, timeout=180)
    assert not list(tmp_path.glob("error-*.txt"))
    got = []
    for phase, world in (("save", 2), ("resume", resume_world)):
        steps = [json.loads((tmp_path / f"{phase}-{world}-{r}.json").read_text()) for r in range(world)]
        got += [k for step in zip(*steps) for batch in step for k in batch]
    reference = regroup(global_batches(texts, 1, 0, count=6, G=G, m=8), G)
    assert chunks(got, G) == reference  # ranks 2 and 3 found no file and adopted the others' state


@pytest.mark.slow
def test_ranks_that_restored_different_states_are_named(texts, tmp_path):
    run_local(_per_rank_files, 2, str(texts), str(tmp_path), "save", 8, 0, False, timeout=180)
    run_local(_per_rank_files, 2, str(texts), str(tmp_path), "resume", 8, 0, True, timeout=180)
    errors = [(tmp_path / f"error-{r}.txt").read_text() for r in range(2)]
    assert all("ranks [1] differ from rank 0's" in e for e in errors), errors


# -- val loaders: Megatron's LimitDataset(RepeatDataset(val)) under a cyclic iterator ------------------


def _val(texts, **kwargs):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    return den.get_val_dataset(
        str(texts), split_part="train", worker_config=config, batch_size=7, task_encoder=Keys(), **kwargs
    )


def cyclic(loader):
    while True:
        yield from loader


def test_a_limited_repeated_val_loader_yields_the_same_batches_every_pass(texts):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    val = den.LimitDataset(
        den.RepeatDataset(_val(texts), worker_config=config), length=20, worker_config=config, reset_after_epoch=True
    )
    loader = den.get_loader(val, worker_config=config)
    passes = [list(loader) for _ in range(3)]
    assert len(loader) == 20 and [len(p) for p in passes] == [20, 20, 20]  # 20 > 13 batches per pass: repeats
    assert passes[0] == passes[1] == passes[2]
    it = cyclic(loader)
    assert [next(it) for _ in range(45)] == (passes[0] * 3)[:45]


def test_a_limited_val_loader_restarts_with_or_without_reset_and_a_plain_one_restarts_its_pass(texts):
    """megatron.energon 7.4.1's LimitDataset resets what it wraps after every pass, whatever
    reset_after_epoch says (compared beside Energon in tests/energon/test_energon_val_loops.py)."""
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    going = den.get_loader(den.LimitDataset(den.RepeatDataset(_val(texts)), length=4), worker_config=config)
    first, second = list(going), list(going)
    assert len(first) == len(second) == 4 and first == second
    plain = den.get_savable_loader(_val(texts))
    one, two = list(plain), list(plain)
    assert one == two and len(one) == 13 == len(plain)  # every `for` restarts the val pass


def test_val_wrappers_refuse_what_they_cannot_honour(texts):
    for repeats in (0, -1, "2", True):
        with pytest.raises(den.datasets.OptionError, match=r"RepeatDataset\(repeats="):
            den.RepeatDataset(_val(texts), repeats=repeats)
    with pytest.raises(den.datasets.OptionError, match=r"LimitDataset\(length=0\)"):
        den.LimitDataset(_val(texts), length=0)
    with pytest.raises(den.datasets.OptionError, match="wraps what"):
        den.LimitDataset([1, 2], length=3)
    loader = den.get_loader(_val(texts))  # a val loader in Energon's order saves its pass position (val_state)
    assert loader.save_state_rank()["kind"] == "datareel.energon val"
    with pytest.raises(den.datasets.OptionError, match="val loader in Energon's order"):
        loader.global_batches()  # but it has no global batches


def test_a_wrong_dataset_path_fails_where_it_is_given(texts, tmp_path):
    """get_train_dataset / get_val_dataset(s) open the dataset at once: the error open_dataset gives, there."""
    import datareel
    from datareel import DatasetError

    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    tar = next(texts.glob("*.tar"))
    for path in (tmp_path / "missing", tar, tmp_path / "missing.jsonl", tmp_path / "missing.yaml"):
        with pytest.raises(DatasetError) as expected:
            datareel.open_dataset(path)
        for make in (den.get_train_dataset, den.get_val_dataset, den.get_val_datasets):
            with pytest.raises(DatasetError) as got:
                make(str(path), split_part="train", worker_config=config, batch_size=2)
            assert str(got.value) == str(expected.value), make.__name__
    with pytest.raises(DatasetError, match="split"):  # a split the dataset does not have
        den.get_val_dataset(str(texts), split_part="nope", worker_config=config, batch_size=2)


def test_get_val_datasets_gives_one_loader_per_val_dataset(texts, tmp_path):
    yaml_path = val_blend(tmp_path, texts, 5)
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    pairs = den.get_val_datasets(str(yaml_path), worker_config=config, batch_size=4, task_encoder=Keys())
    assert len(pairs) == 2
    keys = [[k for b in den.get_loader(ds, worker_config=config) for k in b] for ds, _source in pairs]
    assert len(keys[0]) == 90 and sorted(keys[1]) == [f"o-{i:02d}" for i in range(5)]
    single = den.get_val_datasets(str(texts), split_part="train", worker_config=config, batch_size=4)
    assert len(single) == 1 and single[0][1].name.startswith("train@")  # its split and content digest
