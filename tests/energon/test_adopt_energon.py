"""Adopting a running megatron.energon job (issue 38): real megatron.energon 7.4.1 trains 2 ranks × 2 workers
(shuffle buffer on, max_samples_per_sequence set) part-way into its epoch and saves each rank's state as
Megatron does; ``datareel.energon`` restores them on 1 × 1, 4 × 0 and 3 × 2.  The samples megatron.energon handed
to training plus the ones datareel serves until the adopted remainder ends must be the epoch, each exactly once
— for one dataset and for a ``blend_epochized`` metadataset of two; and again after a datareel save half-way
through the remainder, restored on yet another topology.  Every refusal names its cause and the fix.
"""

from __future__ import annotations

import collections
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from datareel import energon as den
from datareel.errors import ForeignStateError, StateMismatchError
from energon_text import blend_epochized, prepare_text

me = pytest.importorskip("megatron.energon")
wds = pytest.importorskip("webdataset")

pytestmark = pytest.mark.workers  # megatron.energon's and datareel's DataLoader worker processes

SIZES = {"a": 37, "b": 29}  # not multiples of the 4 old workers: uneven worker shares
BUFFER, PER_SEQUENCE, BATCH = 5, 3, 2


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adopt")
    for prefix, n in SIZES.items():
        prepare_text(root / prefix, prefix, n, per_shard=7)
    meta = blend_epochized(root / "meta.yaml", ["a", "b"])
    return {"single": root / "a", "blend": meta}


def _epoch(kind: str) -> collections.Counter[str]:
    names = ["a"] if kind == "single" else ["a", "b"]
    return collections.Counter(f"{p}{i:05d}" for p in names for i in range(SIZES[p]))


_RUNS: dict[tuple[Any, ...], tuple[list[str], list[Any]]] = {}


def _energon(path: Path, steps: int, world: int = 2, workers: int = 2, **options: Any) -> tuple[list[str], list[Any]]:
    """megatron.energon trains ``steps`` batches on each rank; the keys it handed out and each rank's state (one
    run per arguments in the session: its states are fresh copies each call)."""
    key = (str(path), steps, world, workers, tuple(sorted(options.items())))
    if key not in _RUNS:
        _RUNS[key] = _run_energon(path, steps, world, workers, **options)
    handed, states = _RUNS[key]
    return list(handed), copy.deepcopy(states)


def _run_energon(path: Path, steps: int, world: int, workers: int, **options: Any) -> tuple[list[str], list[Any]]:
    handed, states = [], []
    for rank in range(world):
        config = me.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
        kwargs = {"shuffle_buffer_size": BUFFER, "max_samples_per_sequence": PER_SEQUENCE, **options}
        loader = me.get_savable_loader(me.get_train_dataset(path, batch_size=BATCH, worker_config=config, **kwargs))
        it = iter(loader)
        for _ in range(steps):
            handed += list(next(it).__key__)
        states.append(loader.save_state_rank())
        if getattr(loader, "_iterator", None) is not None:
            loader._iterator._shutdown_workers()  # megatron.energon's workers otherwise take ~10 s to go
    return handed, states


def _facade(path: Path, world: int, workers: int, **options: Any) -> list[Any]:
    loaders = []
    for rank in range(world):
        config = den.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
        kwargs = {"shuffle_buffer_size": BUFFER, "max_samples_per_sequence": PER_SEQUENCE, **options}
        dataset = den.get_train_dataset(path, batch_size=BATCH, worker_config=config, **kwargs)
        loaders.append(den.get_savable_loader(dataset))
    return loaders


def _serve(loaders: list[Any], until: int, steps: int | None = None, start: int = 0) -> dict[int, str]:
    """Positions below ``until`` -> key, from every rank's batches (``steps`` micro-steps, or until the loaders,
    restored at ``start``, have served every position up to ``until``)."""
    its = [iter(loader) for loader in loaders]
    out: dict[int, str] = {}
    done = 0
    while done < steps if steps is not None else not all(p in out for p in range(start, until)):
        for it in its:
            batch = next(it)
            _, start, _ = batch.__restore_key__
            for offset, key in enumerate(batch.__key__):
                out[start + offset] = key
        done += 1
    return {p: k for p, k in out.items() if p < until}


@pytest.mark.parametrize("kind", ["single", "blend"])
def test_adopted_epoch_exactly_once_on_every_topology(data: dict[str, Path], kind: str) -> None:
    handed, states = _energon(data[kind], steps=3)
    epoch = _epoch(kind)
    for world, workers in [(1, 1), (4, 0), (3, 2)]:
        loaders = _facade(data[kind], world, workers)
        for loader in loaders:
            loader.restore_state_global(states)
        remainder = len(loaders[0].loader.dataset.remainder)
        assert remainder == sum(epoch.values()) - len(handed)
        served = _serve(loaders, remainder)
        assert sorted(served) == list(range(remainder)), (world, workers)
        seen = collections.Counter(handed) + collections.Counter(served.values())
        assert seen == epoch, (world, workers, seen - epoch, epoch - seen)
        for loader in loaders:
            loader.close()


def test_one_order_on_every_topology(data: dict[str, Path]) -> None:
    """The remainder's order depends on the old state only: 1 × 0 and 2 × 0 serve the same positions."""
    _, states = _energon(data["single"], steps=2)
    orders = []
    for world in (1, 2):
        loaders = _facade(data["single"], world, 0, global_batch_size=4)
        for loader in loaders:
            loader.restore_state_global(states)
        orders.append(_serve(loaders, 20))
    assert orders[0] == orders[1]


def test_datareel_save_mid_remainder_restores_elsewhere(data: dict[str, Path], tmp_path: Path) -> None:
    handed, states = _energon(data["blend"], steps=4)
    for rank, state in enumerate(states):  # as Megatron writes them; read back without megatron.energon's classes
        torch.save(state, tmp_path / f"train_dataloader_dprank{rank:03d}.pt")
    read = den.read_energon_checkpoint(tmp_path)
    loaders = _facade(data["blend"], 4, 0)
    for loader in loaders:
        loader.restore_state_global(read)
    remainder = len(loaders[0].loader.dataset.remainder)
    first = _serve(loaders, remainder, steps=2)  # two global batches of 8
    saved = loaders[0].save_state_rank()
    assert all(loader.save_state_rank() == saved for loader in loaders)
    assert len(first) == 16 < remainder
    resumed = _facade(data["blend"], 2, 1, global_batch_size=8)
    for loader in resumed:  # each rank restores the state it saved (they are identical)
        loader.restore_state_rank(saved)
    rest = _serve(resumed, remainder, start=16)
    assert set(rest) == set(range(16, remainder))
    seen = collections.Counter(handed) + collections.Counter(first.values()) + collections.Counter(rest.values())
    assert seen == _epoch("blend")
    for loader in loaders + resumed:
        loader.close()


def test_after_the_remainder_the_next_epoch_follows(data: dict[str, Path]) -> None:
    handed, states = _energon(data["single"], steps=3)
    (loader,) = _facade(data["single"], 1, 0)
    loader.restore_state_global(states)
    remainder = len(loader.loader.dataset.remainder)
    after = _serve([loader], remainder + SIZES["a"])
    nxt = collections.Counter(k for p, k in after.items() if p >= remainder)
    assert nxt == _epoch("single")  # datareel's own next epoch, whole


# -- refusals --------------------------------------------------------------------------------------------
def test_refuses_another_configuration(data: dict[str, Path]) -> None:
    _, states = _energon(data["single"], steps=3)
    (loader,) = _facade(data["single"], 1, 0, max_samples_per_sequence=None)
    with pytest.raises(StateMismatchError, match="max_samples_per_sequence"):
        loader.restore_state_global(states)
    (loader,) = _facade(data["single"], 1, 0, shuffle_buffer_size=None)
    with pytest.raises(StateMismatchError, match="shuffle_buffer_size"):
        loader.restore_state_global(states)
    (loader,) = _facade(data["blend"], 1, 0)
    with pytest.raises(StateMismatchError, match="dataset differs"):
        loader.restore_state_global(states)


def test_refuses_a_missing_rank_file(data: dict[str, Path], tmp_path: Path) -> None:
    _, states = _energon(data["single"], steps=1, world=3, workers=0)
    for rank in (0, 2):
        torch.save(states[rank], tmp_path / f"train_dataloader_dprank{rank:03d}.pt")
    with pytest.raises(ForeignStateError, match=r"rank\(s\) \[1\].*dprank001"):
        den.read_energon_checkpoint(tmp_path)
    (loader,) = _facade(data["single"], 1, 0)
    with pytest.raises(StateMismatchError, match="every old rank's state"):  # rank 2 passed as rank 1
        loader.restore_state_global([states[0], states[2]])


def test_refuses_a_weighted_blend(data: dict[str, Path], tmp_path: Path) -> None:
    meta = tmp_path / "weighted.yaml"
    meta.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - weight: 1\n        path: {data['single']}\n"
        f"      - weight: 2\n        path: {data['single'].parent / 'b'}\n"
    )
    _, states = _energon(meta, steps=2)
    (loader,) = _facade(data["blend"], 1, 0)
    with pytest.raises(ForeignStateError, match="weighted blend.*with replacement"):
        loader.restore_state_global(states)
    (loader,) = _facade(meta, 1, 0)  # the same weighted metadataset: refused by name, saying why
    with pytest.raises(ForeignStateError, match="weighted blend.*with replacement.*Start the datareel.energon loader"):
        loader.restore_state_global(states)


def test_refuses_an_unknown_pipeline_and_one_rank_alone(data: dict[str, Path]) -> None:
    _, states = _energon(data["single"], steps=2, world=1, workers=0)
    (state,) = states
    state.worker_states[0]["datasets"][0]["__class__"] = "FutureDataset"
    (loader,) = _facade(data["single"], 1, 0)
    with pytest.raises(ForeignStateError, match="'FutureDataset'.*version or wrapper"):
        loader.restore_state_global([state])
    _, states = _energon(data["single"], steps=2)
    loaders = _facade(data["single"], 2, 0)
    with pytest.raises(ForeignStateError, match="every old rank's.*restore_state_global"):
        loaders[0].restore_state_rank(states[0])


# -- datareel inspect ------------------------------------------------------------------------------------
def test_inspect_reads_a_megatron_checkpoint(data: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    from datareel.cli import main

    handed, states = _energon(data["single"], steps=3)
    for rank, state in enumerate(states):
        torch.save(state, tmp_path / f"train_dataloader_dprank{rank:03d}.pt")
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert (alone["old_world_size"], alone["old_workers"], alone["remainder"]) == (2, 2, None)
    assert sum(sum(r["batches"]) * r["batch_size"] for r in alone["ranks"]) == len(handed)
    args = ["--shuffle-buffer-size", str(BUFFER), "--max-samples-per-sequence", str(PER_SEQUENCE)]
    assert main(["inspect", str(tmp_path), str(data["single"]), *args, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["remainder"]
    assert found == {
        "samples": SIZES["a"] - len(handed),
        "epoch": 0,
        "epoch_length": SIZES["a"],
        "handed_out": len(handed),
    }
    assert main(["inspect", str(tmp_path / "train_dataloader_dprank001.pt"), str(data["single"]), *args]) == 0
    text = capsys.readouterr().out
    assert f"left of epoch 0: {SIZES['a'] - len(handed)} of {SIZES['a']} samples" in text
    assert "continues on any world size and worker count" in text
    (tmp_path / "train_dataloader_dprank000.pt").unlink()
    assert main(["inspect", str(tmp_path)]) != 0
    assert "rank(s) [0]" in capsys.readouterr().err


# -- Megatron's own path: restore_state_rank of each rank's file, in real gloo processes -----------------
def _megatron_rank(rank: int, world: int, path: str, out: str, workers: int) -> None:
    """One rank of a resumed Megatron job: restores its own file if the checkpoint has one (as Megatron does),
    then trains until the adopted remainder is served; writes the keys at each position it received."""
    out_dir = Path(out)
    (loader,) = [_facade(Path(path), world, workers)[rank]]
    mine = out_dir / f"train_dataloader_dprank{rank:03d}.pt"
    if mine.exists():
        loader.restore_state_rank(torch.load(mine, weights_only=False))
    it = iter(loader)  # the first iteration gathers what every rank restored, then adopts
    remainder = len(loader.loader.dataset.remainder)
    got: dict[int, str] = {}
    steps = -(-remainder // loader.loader.layout.step_size)
    for _ in range(steps):
        batch = next(it)
        _, start, _ = batch.__restore_key__
        got.update({start + i: k for i, k in enumerate(batch.__key__)})
    (out_dir / f"served-{world}-{rank}.json").write_text(json.dumps({"remainder": remainder, "got": got}))
    loader.close()


@pytest.mark.slow
@pytest.mark.parametrize("world,workers", [(3, 1), (2, 0)])
def test_megatron_restore_state_rank_in_real_processes(
    data: dict[str, Path], tmp_path: Path, world: int, workers: int
) -> None:
    """Old job 2 ranks × 2 workers; the new job grows to 3 ranks (rank 2 finds no file and takes part in the
    gather) or keeps 2 ranks with other workers: every rank calls restore_state_rank with its own file only."""
    from datareel.testing import run_local

    handed, states = _energon(data["blend"], steps=3)
    for rank, state in enumerate(states):
        torch.save(state, tmp_path / f"train_dataloader_dprank{rank:03d}.pt")
    run_local(_megatron_rank, world, str(data["blend"]), str(tmp_path), workers, timeout=240)
    served: dict[int, str] = {}
    for rank in range(world):
        found = json.loads((tmp_path / f"served-{world}-{rank}.json").read_text())
        remainder = found["remainder"]
        served.update({int(p): k for p, k in found["got"].items() if int(p) < remainder})
    assert sorted(served) == list(range(remainder))
    assert collections.Counter(handed) + collections.Counter(served.values()) == _epoch("blend")


def test_inspect_and_verify_a_datareel_state_saved_mid_remainder(
    data: dict[str, Path], tmp_path: Path, capsys: Any
) -> None:
    from datareel.cli import main

    handed, states = _energon(data["single"], steps=3)
    (loader,) = _facade(data["single"], 1, 0)
    loader.restore_state_global(states)
    it = iter(loader)
    next(it), next(it)
    (tmp_path / "state.json").write_text(json.dumps(loader.save_state_rank()))
    left = SIZES["a"] - len(handed)
    assert main(["inspect", str(tmp_path / "state.json")]) == 0
    assert f"remainder of {left} samples comes first: 4 of them served" in capsys.readouterr().out
    verify = ["verify", str(tmp_path / "state.json"), str(data["single"]), "--world-size", "2"]
    assert main([*verify, "--micro-batch-size", "1"]) == 0  # the remainder restored in front of the dataset
    assert "OK on world_size 2" in capsys.readouterr().out
    loader.close()


def test_refuses_another_buffer_size_order_or_seed(data: dict[str, Path]) -> None:
    _, states = _energon(data["single"], steps=3)
    (loader,) = _facade(data["single"], 1, 0, shuffle_buffer_size=BUFFER * 4)
    with pytest.raises(
        StateMismatchError, match=f"old job's shuffle_buffer_size was {BUFFER}.*pass shuffle_buffer_size"
    ):
        loader.restore_state_global(states)
    (loader,) = _facade(data["single"], 1, 0)
    with pytest.raises(StateMismatchError, match="not seeded for global worker 0.*rank order"):
        loader.restore_state_global(states[::-1])  # the old ranks' states out of order
    (loader,) = _facade(data["single"], 1, 0, shuffle_over_epochs_multiplier=2)
    with pytest.raises(ForeignStateError, match="shuffle_over_epochs_multiplier=2"):
        loader.restore_state_global(states)
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=5)
    other = den.get_savable_loader(
        den.get_train_dataset(
            data["single"],
            batch_size=BATCH,
            worker_config=config,
            shuffle_buffer_size=BUFFER,
            max_samples_per_sequence=PER_SEQUENCE,
        )
    )
    with pytest.raises(StateMismatchError, match="seed_offset"):
        other.restore_state_global(states)


def test_refuses_an_encoder_that_skipped_samples(data: dict[str, Path]) -> None:
    class Skipping(me.DefaultTaskEncoder):
        def encode_sample(self, sample: Any) -> Any:
            if sample.__key__.endswith("3"):
                raise me.SkipSample()
            return sample

    states = []
    for rank in range(2):
        config = me.WorkerConfig(rank=rank, world_size=2, num_workers=0)
        dataset = me.get_train_dataset(
            data["single"],
            batch_size=BATCH,
            worker_config=config,
            task_encoder=Skipping(),
            shuffle_buffer_size=BUFFER,
            max_samples_per_sequence=PER_SEQUENCE,
        )
        loader = me.get_savable_loader(dataset)
        it = iter(loader)
        for _ in range(6):
            next(it)
        states.append(loader.save_state_rank())
    (loader,) = _facade(data["single"], 1, 0)
    with pytest.raises(ForeignStateError, match=r"skipped samples \(SkipSample\)"):
        loader.restore_state_global(states)


def test_a_checkpoint_file_that_names_code_is_refused(tmp_path: Path) -> None:
    class Runs:
        def __reduce__(self) -> Any:
            return (Path.touch, (tmp_path / "ran",))

    state = {"worker_states": [Runs()], "next_worker_id": 0, "micro_batch_size": 2}
    torch.save(state, tmp_path / "train_dataloader_dprank000.pt")
    with pytest.raises(ForeignStateError, match="names .* refusing to load it"):
        den.read_energon_checkpoint(tmp_path)
    assert not (tmp_path / "ran").exists()


def test_excluded_samples_are_refused(tmp_path: Path) -> None:
    prepare_text(tmp_path / "x", "x", 20, per_shard=7)
    split = tmp_path / "x" / ".nv-meta" / "split.yaml"
    split.write_text(split.read_text() + "exclude:\n  - parts/data-0.tar/x00003\n")
    handed, states = _run_energon(tmp_path / "x", 2, 1, 0)
    (loader,) = _facade(tmp_path / "x", 1, 0)
    with pytest.raises(ForeignStateError, match="excludes samples"):
        loader.restore_state_global(states)
