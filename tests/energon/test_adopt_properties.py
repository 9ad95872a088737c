"""Property tests of adopting a megatron.energon job (issue 38).

1. The replay against the real thing: megatron.energon 7.4.1 trains random old topologies (ranks, workers,
   batch size, shuffle buffer, max_samples_per_sequence, parallel_shard_iters, steps: mid-epoch and past a
   worker's pass) and saves; the samples it handed out plus datareel's remainder are its epoch exactly once
   (where a worker already began its next pass, they cover the epoch and the remainder repeats nothing).
2. The adopted reel: any remainder (a random subset of one or two sources) is served exactly once before the
   next epoch, whole, and every micro-step of it and past its end restores on other topologies with the same
   global batches (:func:`datareel.testing.check_restore_everywhere`).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.blend.adopted import Adopted
from datareel.energon.adopt import Setup, adopt
from datareel.plan.adopted import Remainder
from datareel.testing import Topology, check_restore_everywhere
from energon_text import blend_epochized, prepare_text
from profiles import examples

me = pytest.importorskip("megatron.energon")
wds = pytest.importorskip("webdataset")

SHARDS = {"a": (37, 7), "b": (29, 5)}  # samples, samples per shard


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adopt-properties")
    for prefix in SHARDS:
        prepare_text(root / prefix, prefix, *SHARDS[prefix])
    meta = blend_epochized(root / "meta.yaml", ["a", "b"])
    return {"single": root / "a", "blend": meta}


def _shard_counts(prefix: str) -> np.ndarray:
    n, per = SHARDS[prefix]
    return np.array([per] * (n // per) + ([n % per] if n % per else []), dtype=np.int64)


def _item(key: str) -> tuple[int, int]:
    return "ab".index(key[0]), int(key[1:])


@pytest.mark.workers
@settings(max_examples=examples(0.1))
@given(
    kind=st.sampled_from(["single", "blend"]),
    world=st.integers(1, 3),
    workers=st.integers(0, 2),
    batch=st.integers(1, 3),
    buffer=st.one_of(st.none(), st.integers(1, 8)),
    per_sequence=st.one_of(st.none(), st.integers(1, 6)),
    parallel=st.sampled_from([None, 1, 3]),
    steps=st.integers(1, 14),  # past a worker's pass too (a job with no batch saved None on every rank: refused)
)
def test_replay_matches_megatron_energon(data: dict[str, Path], **s: Any) -> None:
    prefixes = ["a"] if s["kind"] == "single" else ["a", "b"]
    setup = Setup(
        sizes=tuple(SHARDS[p][0] for p in prefixes),
        shard_counts=tuple(_shard_counts(p) for p in prefixes),
        blend=s["kind"] == "blend",
        shuffle_buffer_size=s["buffer"] if s["buffer"] and s["buffer"] > 1 else None,  # Energon's rule
        max_samples_per_sequence=s["per_sequence"],
        parallel_shard_iters=s["parallel"],
        over_epochs=(1,) * len(prefixes),
        epoch_length=sum(SHARDS[p][0] for p in prefixes),
        seed_offset=0,
    )
    # the same job saved with Energon's default checkpoints (each worker's lies batches back: replayed) and with
    # a checkpoint after every batch (the state is the save point itself: nothing to replay)
    handed, states = _train(data[s["kind"]], s, {})
    exact_handed, exact_states = _train(
        data[s["kind"]], s, {"checkpoint_every_sec": 0, "checkpoint_every_min_n_samples": 1}
    )
    assert handed == exact_handed
    adoption, exact = adopt(states, setup), adopt(exact_states, setup)
    rest = list(zip(adoption.remainder.leaves.tolist(), adoption.remainder.indices.tolist()))
    assert rest == list(zip(exact.remainder.leaves.tolist(), exact.remainder.indices.tolist()))
    assert adoption.epoch == exact.epoch
    epoch = collections.Counter((k, i) for k, p in enumerate(prefixes) for i in range(SHARDS[p][0]))
    assert len(set(rest)) == len(rest)
    if adoption.epoch == 0:  # every worker still in its first pass: exactly once
        assert collections.Counter(handed) + collections.Counter(rest) == epoch
    else:  # a worker began its next pass: its rest of that pass; together they still cover the epoch
        assert set(handed) | set(rest) == set(epoch)


def _train(path: Path, s: dict[str, Any], checkpoints: dict[str, Any]) -> tuple[list[tuple[int, int]], list[Any]]:
    """megatron.energon trains ``s["steps"]`` batches on each old rank; what it handed out, and each rank's state."""
    handed: list[tuple[int, int]] = []
    states = []
    for rank in range(s["world"]):
        config = me.WorkerConfig(rank=rank, world_size=s["world"], num_workers=s["workers"])
        options: dict[str, Any] = {"shuffle_buffer_size": s["buffer"], "max_samples_per_sequence": s["per_sequence"]}
        if s["parallel"] is not None:
            options["parallel_shard_iters"] = s["parallel"]
        dataset = me.get_train_dataset(path, batch_size=s["batch"], worker_config=config, **options)
        loader = me.get_savable_loader(dataset, **checkpoints)
        it = iter(loader)
        for _ in range(s["steps"]):
            handed += [_item(k) for k in next(it).__key__]
        states.append(loader.save_state_rank())
        if getattr(loader, "_iterator", None) is not None:
            loader._iterator._shutdown_workers()  # megatron.energon's workers otherwise take ~10 s to go
    return handed, states


@st.composite
def adopted_cases(draw: Any) -> dict[str, Any]:
    sizes = draw(st.lists(st.integers(3, 30), min_size=1, max_size=2))
    masks = [draw(st.lists(st.booleans(), min_size=n, max_size=n)) for n in sizes]
    if not any(any(m) for m in masks):
        masks[0][0] = True
    m = draw(st.integers(1, 3))
    W = draw(st.integers(1, 3))
    A = draw(st.integers(1, 2))
    return {
        "sizes": sizes,
        "masks": masks,
        "G": m * W * A,
        "before": (W, m),
        "seed": draw(st.integers(0, 99)),
        "after": draw(st.sampled_from([(1, m * W * A), (m * W * A, 1), (W, m)])),
        "shuffle": draw(st.booleans()),
    }


@settings(max_examples=examples(0.3))
@given(case=adopted_cases())
def test_adopted_reel_exactly_once_and_elastic(case: dict[str, Any]) -> None:
    sources = [
        datareel.from_sequence([{"id": k * 1000 + i} for i in range(n)], name=f"s{k}")
        for k, n in enumerate(case["sizes"])
    ]
    base = sources[0] if len(sources) == 1 else datareel.mix_epochized([(s, 1) for s in sources])
    leaves = np.concatenate([np.full(sum(m), k, dtype=np.int32) for k, m in enumerate(case["masks"])])
    indices = np.concatenate([np.flatnonzero(m) for m in case["masks"]]).astype(np.int64)
    epoch_length = sum(case["sizes"])
    remainder = Remainder(leaves, indices, key=case["seed"], skip=epoch_length, shuffle=case["shuffle"])
    dataset = Adopted(base, remainder)
    L, G = len(remainder), case["G"]
    loader = datareel.Loader(dataset, global_batch_size=G, micro_batch_size=G, seed=case["seed"])
    ids = []
    it = iter(loader)
    while loader.cursor < L + epoch_length:
        ids += next(it)["id"].tolist()
    wanted = {k * 1000 + int(i) for k, i in zip(leaves, indices)}
    assert len(ids[:L]) == len(set(ids[:L])) and set(ids[:L]) == wanted
    whole = {k * 1000 + i for k, n in enumerate(case["sizes"]) for i in range(n)}
    assert sorted(ids[L : L + epoch_length]) == sorted(whole)  # the next epoch, whole
    start = (L // G) * G if L >= G else 0  # global batches across the remainder's end
    check_restore_everywhere(
        dataset,
        global_batch_size=G,
        before=Topology(case["before"][0], 0, case["before"][1]),
        after=Topology(case["after"][0], 0, case["after"][1]),
        start=max(0, start - G),
        global_batches=3,
        seed=case["seed"],
    )
