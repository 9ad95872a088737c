"""A state saved by megatron.energon's savable loader, handed to datareel.energon's ``restore_state_rank`` /
``restore_state_global``, is adopted where it holds every old rank's state (issue 38) and refused by name where
it cannot be (one rank's state of a larger job); every other object that is not a datareel state is refused by
name — never a bare RuntimeError / TypeError / KeyError.

The megatron.energon states are real: made by megatron.energon's own ``get_savable_loader`` on a small prepared
dataset, per rank (``save_state_rank``, 1 and 2 ranks, 0 and 2 workers), as its global list
(``save_state_global``, and the list of two ranks' states it gathers), after ``torch.save`` / ``torch.load``,
and as plain dicts.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
import torch

import datareel
from datareel import energon as den

me = pytest.importorskip("megatron.energon")
wds = pytest.importorskip("webdataset")

N = 12


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from megatron.energon.flavors import BaseWebdatasetFactory

    root = tmp_path_factory.mktemp("megatron-states")
    (root / "parts").mkdir()
    with wds.ShardWriter(f"{root}/parts/data-%d.tar", maxcount=4, verbose=0) as writer:
        for i in range(N):
            writer.write({"__key__": f"{i:06d}", "txt": f"text {i}".encode()})
        shards = writer.shard
    BaseWebdatasetFactory.prepare_dataset(
        root, [f"parts/data-{{0..{shards - 1}}}.tar"], split_parts_ratio=[("train", 1.0)], shuffle_seed=None, workers=1
    )
    (root / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: txt\n"
    )
    return root


def _energon_loader(root: Path, rank: int, world: int, workers: int):
    config = me.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    dataset = me.get_train_dataset(
        root, batch_size=2, worker_config=config, shuffle_buffer_size=None, max_samples_per_sequence=None
    )
    return me.get_savable_loader(dataset)


def _energon_states(root: Path, workers: int) -> dict[str, object]:
    """What megatron.energon's savable loader saves, each way a Megatron job keeps it."""
    per_rank = []
    for rank in range(2):
        loader = _energon_loader(root, rank, 2, workers)
        it = iter(loader)
        next(it), next(it)
        per_rank.append(loader.save_state_rank())
    single = _energon_loader(root, 0, 1, workers)
    it = iter(single)
    next(it)
    buffer = io.BytesIO()
    torch.save(per_rank, buffer)
    buffer.seek(0)
    return {
        "rank state": per_rank[0],
        "global state of 2 ranks": per_rank,  # what save_state_global gathers on 2 ranks
        "save_state_global of 1 rank": single.save_state_global(global_dst_rank=0),
        "through torch.save / torch.load": torch.load(buffer, weights_only=False),
        "as a dict": {f.name: getattr(per_rank[1], f.name) for f in dataclasses.fields(per_rank[1])},
        "a tuple of rank states": tuple(per_rank),
    }


def _facade(root: Path):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    return den.get_savable_loader(den.get_train_dataset(root, batch_size=2, worker_config=config))


def _restores(loader, state):
    yield "restore_state_rank", lambda: loader.restore_state_rank(state)
    yield "restore_state_global", lambda: loader.restore_state_global(state)


ADOPTED = {
    "global state of 2 ranks",
    "save_state_global of 1 rank",
    "through torch.save / torch.load",
    "a tuple of rank states",
}
"""The forms that hold every old rank's state: adopted (issue 38). One rank's state of the 2-rank job, given
alone to this 1-rank job, is refused by name: its share of the data is not a 1-rank job's."""


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.workers)])
def test_a_megatron_energon_state_is_adopted_or_refused_by_name(root: Path, workers: int) -> None:
    loader = _facade(root)
    for what, state in _energon_states(root, workers).items():
        for call, restore in _restores(loader, state):
            if what in ADOPTED:
                restore()  # the rest of its epoch is served first (tests/energon/test_adopt_energon.py)
                assert len(_take(loader, 1)[0].__key__) == 2, (what, call)
                continue
            with pytest.raises(datareel.StateMismatchError) as caught:
                restore()
            message = str(caught.value)
            assert "every old rank's state" in message, (what, call, message)
    loader.close()


def _take(loader, n: int) -> list:
    it = iter(loader)
    return [next(it) for _ in range(n)]


def _junk(state: dict) -> dict[str, object]:
    return {
        "an int": 42,
        "a string": "state.pt",
        "bytes": b"\x80\x04",
        "a tensor": torch.zeros(3),
        "an object": object(),
        "a dict of another kind": {"a": 1},
        "a dict holding tensors": {"worker": torch.zeros(3)},
        "a list of tensors": [torch.zeros(3), torch.ones(3)],
        "a list of dicts holding tensors": [{"a": torch.zeros(3)}, {"a": torch.ones(3)}],
        "a datareel state beside an int": [state, 42],
        "a datareel state beside a dict holding a tensor": [state, {"a": torch.zeros(2)}],
        "two different datareel states": [state, {**state, "cursor": 0}],
        "an empty list": [],
        "a list of None": [None, None],
    }


def test_what_is_not_a_datareel_state_is_refused_by_name(root: Path) -> None:
    loader = _facade(root)
    _take(loader, 1)
    state = loader.save_state_rank()
    for what, junk in _junk(state).items():
        for call, restore in _restores(loader, junk):
            with pytest.raises(datareel.StateError) as caught:  # ForeignStateError / StateDamagedError / ...
                restore()
            assert len(str(caught.value)) > 30, (what, call, caught.value)
    loader.restore_state_rank([state, state])  # a datareel global state still restores
    loader.restore_state_global([state, None])
    loader.close()
