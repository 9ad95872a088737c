"""Length-planned packing: exactly-once packs, over-length policies, length index, elastic restore."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import datareel
from datareel import DatareelError, Packing, StateMismatchError
from datareel.cli.prepare import prepare_webdataset
from datareel.plan.pack import first_fit_decreasing, plan_window
from datareel.testing import Topology, check_restore_everywhere
from encoders import Packer, lengths_dataset
from profiles import examples
from wds_helpers import write_shard
from where import HELPERS

TESTS = HELPERS  # length_fns.py


@pytest.mark.parametrize(
    "lengths,cap", [([5, 3, 8, 2, 7, 1], 10), ([10] * 4, 10), ([1] * 25, 7), ([4, 4, 4, 3, 3, 3], 9)]
)
def test_first_fit_decreasing_packs_every_item_once_within_capacity(lengths, cap):
    packs = first_fit_decreasing(np.array(lengths), cap)
    items = sorted(i for p in packs for i in p.tolist())
    assert items == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in p) <= cap for p in packs)
    # FFD is within 11/9 OPT + 1 of the optimum; here at least it is never worse than ceil(total / cap) + 1
    assert len(packs) <= math.ceil(sum(lengths) / cap) + 1


def test_over_length_policies():
    lengths = np.array([3, 12, 4, 15, 2])
    with pytest.raises(DatareelError, match="exceeds max_length=10"):
        plan_window(lengths, 10, "error")
    packs, dropped = plan_window(lengths, 10, "drop")
    assert dropped.tolist() == [1, 3] and sorted(i for p in packs for i in p.tolist()) == [0, 2, 4]
    packs, dropped = plan_window(lengths, 10, "own_pack")
    assert dropped.size == 0 and [1] in [p.tolist() for p in packs] and [3] in [p.tolist() for p in packs]


@settings(max_examples=examples(0.4))
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=300),
    cap=st.integers(10, 40),
    window=st.integers(1, 50),
    policy=st.sampled_from(["own_pack", "drop"]),
)
def test_a_packed_epoch_holds_every_sample_exactly_once(lengths, cap, window, policy):
    data, length = lengths_dataset(lengths)
    loader = datareel.Loader(
        data,
        global_batch_size=3,
        micro_batch_size=3,
        repeat=False,
        seed=1,
        task_encoder=Packer(),
        packing=Packing(max_length=cap, length=length, window=window, over_length=policy),
    )
    seen = [i for batch in loader for pack in batch["ids"] for i in pack]
    over = [i for i, n in enumerate(lengths) if n > cap]
    expected = [i for i in range(len(lengths)) if not (policy == "drop" and i in over)]
    assert sorted(seen) == expected  # none twice, none lost
    assert loader.dropped == (len(over) if policy == "drop" else 0)


def test_dropped_samples_are_reported(caplog):
    data, length = lengths_dataset([3, 50, 4, 60, 2])
    loader = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        repeat=False,
        task_encoder=Packer(),
        packing=Packing(max_length=10, length=length, window=5, over_length="drop"),
    )
    with caplog.at_level(logging.WARNING, logger="datareel"):
        packs = [p for b in loader for p in b["ids"]]
    assert sorted(i for p in packs for i in p) == [0, 2, 4] and loader.dropped == 2
    assert "dropped 2 over-long samples" in caplog.text and "docs[1]" in caplog.text


def test_over_length_error_names_the_sample_and_truncate_calls_the_encoder():
    data, length = lengths_dataset([3, 50, 4])
    loader = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        shuffle=False,
        task_encoder=Packer(),
        packing=Packing(max_length=10, length=length, window=3),
    )
    with pytest.raises(DatareelError, match=r"sample 1 of source 'docs' at reel position 1"):
        next(iter(loader))
    loader = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        shuffle=False,
        task_encoder=Packer(),
        packing=Packing(max_length=10, length=length, window=3, over_length="truncate"),
    )
    totals = {tuple(b["ids"][0]): b["total"][0] for b in itertools_take(loader, 2)}
    assert totals[(1,)] == 10  # truncate_sample cut the 50 to max_length

    class NoTruncate:
        def pack_selected_samples(self, samples):
            return samples

    with pytest.raises(ValueError, match="truncate_sample"):
        datareel.Loader(
            data,
            global_batch_size=1,
            micro_batch_size=1,
            task_encoder=NoTruncate(),
            packing=Packing(max_length=10, length=length, over_length="truncate"),
        )


def itertools_take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_packing_needs_pack_selected_samples_and_valid_options():
    data, length = lengths_dataset([1, 2])
    with pytest.raises(DatareelError, match="pack_selected_samples"):
        datareel.Loader(data, global_batch_size=1, micro_batch_size=1, packing=Packing(max_length=4, length=length))
    with pytest.raises(DatareelError, match="max_length=0"):
        Packing(max_length=0)
    with pytest.raises(DatareelError, match="over_length='cut'"):
        Packing(max_length=4, over_length="cut")
    with pytest.raises(DatareelError, match="length='tokens'"):
        Packing(max_length=4, length="tokens")
    with pytest.raises(DatareelError, match="no byte sizes"):
        next(
            iter(
                datareel.Loader(
                    data,
                    global_batch_size=1,
                    micro_batch_size=1,
                    task_encoder=Packer(),
                    packing=Packing(max_length=4, length="bytes"),
                )
            )
        )


def test_state_carries_window_and_offset_and_refuses_other_packing():
    data, length = lengths_dataset(np.random.default_rng(0).integers(1, 9, 200))
    packing = Packing(max_length=16, length=length, window=20)
    loader = datareel.Loader(data, global_batch_size=4, micro_batch_size=2, task_encoder=Packer(), packing=packing)
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = loader.state_dict()
    assert state["cursor"] == 14 and len(state["pack"]) == 2 and len(json.dumps(state)) < 1024
    other = datareel.Loader(
        data,
        global_batch_size=4,
        micro_batch_size=2,
        task_encoder=Packer(),
        packing=Packing(max_length=32, length=length, window=20),
    )
    with pytest.raises(StateMismatchError, match="packing"):
        other.load_state_dict(state)
    plain = datareel.Loader(data, global_batch_size=4, micro_batch_size=2)
    with pytest.raises(StateMismatchError, match="packing"):
        plain.load_state_dict(state)


@st.composite
def packed_scenarios(draw, max_workers):
    W, W2 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m, m2 = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    G = math.lcm(m * W, m2 * W2) * draw(st.integers(1, 2))
    n = draw(st.integers(3, 60))
    return dict(
        G=G,
        before=Topology(W, draw(st.integers(0, max_workers)), m),
        after=Topology(W2, draw(st.integers(0, max_workers)), m2),
        lengths=draw(st.lists(st.integers(1, 12), min_size=n, max_size=n)),
        cap=draw(st.integers(12, 30)),
        window=draw(st.integers(2, 17)),
        batches=max(2, min(6, 24 // (G // (m * W)))),
        seed=draw(st.integers(0, 2**32)),
    )


def _packed_restore(s):
    data, length = lengths_dataset(s["lengths"])
    report = check_restore_everywhere(
        data,
        global_batch_size=s["G"],
        before=s["before"],
        after=s["after"],
        global_batches=s["batches"],
        seed=s["seed"],
        task_encoder=Packer(),
        packing=Packing(max_length=s["cap"], length=length, window=s["window"]),
    )
    assert report["restored"] >= 1


@settings(max_examples=examples(0.4))
@given(s=packed_scenarios(max_workers=0))
def test_elastic_restore_with_packing(s):
    _packed_restore(s)


@pytest.mark.workers
@settings(max_examples=examples(0.05))
@given(s=packed_scenarios(max_workers=2))
def test_elastic_restore_with_packing_and_worker_processes(s):
    _packed_restore(s)


def test_packed_windows_cross_epochs_and_restore_mid_window():
    # 23 samples, windows of 10: windows straddle epoch boundaries; restore at every micro-step
    data, length = lengths_dataset(np.random.default_rng(3).integers(1, 7, 23))
    report = check_restore_everywhere(
        data,
        global_batch_size=6,
        before=Topology(3, 0, 1),
        after=Topology(1, 0, 3),
        global_batches=12,
        seed=5,
        task_encoder=Packer(),
        packing=Packing(max_length=12, length=length, window=10),
    )
    assert report["restored"] == 24 and report["refused"] == 0  # every micro-step, mid-window ones included


# -- lengths from the dataset: byte sizes and a prepared length index -----------------------------


def _text_shards(root: Path, lengths) -> None:
    write_shard(root / "a.tar", [(f"k{i:03d}", {"txt": b"x" * n}) for i, n in enumerate(lengths)])
    prepare_webdataset(root, progress=False)


def test_length_index_prepare_load_and_stale_refusal(tmp_path):
    lengths = [5, 17, 3, 9, 12, 1, 30, 8]
    _text_shards(tmp_path, lengths)
    env = {"PYTHONPATH": str(TESTS)}
    proc = subprocess.run(
        [sys.executable, "-m", "datareel", "prepare", str(tmp_path), "--lengths", "length_fns:text_length", "--quiet"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / ".nv-meta/lengths.npy").tolist() == lengths

    class TextPacker:
        def pack_selected_samples(self, samples):
            return {"keys": [s["__key__"] for s in samples], "chars": sum(len(s["txt"]) for s in samples)}

        def batch(self, packs):
            return packs

    ds = datareel.open_dataset(tmp_path)
    loader = datareel.Loader(
        ds,
        global_batch_size=1,
        micro_batch_size=1,
        repeat=False,
        task_encoder=TextPacker(),
        packing=Packing(max_length=32, length="index", window=8),
    )
    packs = [p for batch in loader for p in batch]
    assert sorted(k for p in packs for k in p["keys"]) == [f"k{i:03d}" for i in range(8)]
    assert all(p["chars"] <= 32 for p in packs)
    by_bytes = datareel.Loader(
        ds,
        global_batch_size=1,
        micro_batch_size=1,
        repeat=False,
        task_encoder=TextPacker(),
        packing=Packing(max_length=4096, length="bytes", window=8),
    )
    assert len([p for b in by_bytes for p in b]) == 2  # each sample takes >= 1 KiB of tar: four per pack
    write_shard(tmp_path / "a.tar", [(f"k{i:03d}", {"txt": b"y" * (n + 1)}) for i, n in enumerate(lengths)])
    prepare_webdataset(tmp_path, progress=False, overwrite=True)
    from datareel.sources.lengths import forget_index

    forget_index(tmp_path / ".nv-meta/lengths.npy")
    fresh = datareel.Loader(
        datareel.open_dataset(tmp_path),
        global_batch_size=1,
        micro_batch_size=1,
        task_encoder=TextPacker(),
        packing=Packing(max_length=32, length="index"),
    )
    with pytest.raises(DatareelError, match="stale"):
        next(iter(fresh))


def test_length_index_for_jsonl(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": "z" * n}) + "\n" for n in (4, 8, 15)))
    from datareel.cli.lengths import compute_length_index
    from datareel.cli.prepare import prepare_jsonl
    from datareel.sources.lengths import lengths_of

    prepare_jsonl(path)
    sys.path.insert(0, str(TESTS))
    try:
        compute_length_index(path, "length_fns:json_length", workers=1, progress=False)
    finally:
        sys.path.remove(str(TESTS))
    ds = datareel.open_dataset(path)
    assert lengths_of(ds, np.array([2, 0]), "index").tolist() == [15, 4]
    assert lengths_of(ds, np.array([0]), "bytes").tolist() == [len(json.dumps({"text": "zzzz"})) + 1]


# -- regressions: empty packs, double-counted drops, whole-pass planning on restore ----------------


class StrictPacker(Packer):
    """Refuses what no task encoder should ever be handed: an empty pack."""

    def pack_selected_samples(self, samples):
        if not samples:
            raise AssertionError("pack_selected_samples([]) was called")
        return super().pack_selected_samples(samples)


def test_a_window_whose_samples_are_all_dropped_yields_no_pack():
    packs, dropped = plan_window(np.array([31, 40]), 30, "drop")
    assert packs == [] and dropped.tolist() == [0, 1]
    assert first_fit_decreasing(np.zeros(0, dtype=np.int64), 30) == []
    # the example: window 1 holds only the over-long sample
    data, length = lengths_dataset([31] + [10] * 8)
    loader = datareel.Loader(
        data,
        global_batch_size=3,
        micro_batch_size=3,
        repeat=False,
        shuffle=False,
        task_encoder=StrictPacker(),
        packing=Packing(max_length=30, length=length, window=1, over_length="drop"),
    )
    packs = [ids for batch in loader for ids in batch["ids"]]
    assert packs == [[i] for i in range(1, 9)] and loader.dropped == 1


@settings(max_examples=examples(0.6))
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=120),
    cap=st.integers(5, 30),
    window=st.integers(1, 12),
    policy=st.sampled_from(["own_pack", "drop", "truncate"]),
    m=st.integers(1, 3),
    W=st.integers(1, 3),
    repeat=st.booleans(),
)
def test_every_pack_is_non_empty_and_within_max_length(lengths, cap, window, policy, m, W, repeat):
    data, length = lengths_dataset(lengths)
    table = dict(enumerate(lengths))
    loaders = [
        datareel.Loader(
            data,
            global_batch_size=m * W,
            micro_batch_size=m,
            rank=r,
            world_size=W,
            seed=2,
            repeat=repeat,
            task_encoder=StrictPacker(),
            packing=Packing(max_length=cap, length=length, window=window, over_length=policy),
        )
        for r in range(W)
    ]
    if repeat and policy == "drop" and all(n > cap for n in lengths):  # never a pack: refused, not a hang
        with pytest.raises(DatareelError, match="dropped every sample"):
            next(iter(loaders[0]))
        return
    for loader in loaders:
        it = iter(loader)
        for _ in range(40):
            batch = next(it, None)
            if batch is None:
                break
            for ids in batch["ids"]:
                assert ids, "an empty pack was handed out"
                total = sum(min(table[i], cap) if policy == "truncate" else table[i] for i in ids)
                assert total <= cap or (len(ids) == 1 and policy == "own_pack")


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.workers)])
def test_dropped_counts_each_sample_once_when_the_pass_ends_on_a_step_boundary(workers):
    lengths = [50 if i % 10 == 0 else 5 for i in range(200)]
    data, length = lengths_dataset(lengths)
    loader = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        repeat=False,
        num_workers=workers,
        task_encoder=Packer(),
        packing=Packing(max_length=20, length=length, window=10, over_length="drop"),
    )
    seen = sorted(i for batch in loader for ids in batch["ids"] for i in ids)
    assert seen == [i for i in range(200) if i % 10]
    assert loader.dropped == 20
    assert list(loader) == [] and loader.dropped == 20  # a finished pass plans nothing again


def test_restoring_a_finite_packed_loader_plans_one_window(monkeypatch):
    import datareel.reel.packed as packed_module

    lengths = np.random.default_rng(1).integers(1, 9, 400)
    calls, plans = [], []

    def counted(source, indices):
        calls.append(len(indices))
        return lengths[indices]

    real_plan_window = packed_module.plan_window
    monkeypatch.setattr(packed_module, "plan_window", lambda *a: plans.append(1) or real_plan_window(*a))
    data = datareel.from_sequence([{"id": i, "len": int(n)} for i, n in enumerate(lengths)], name="docs")

    def make():
        return datareel.Loader(
            data,
            global_batch_size=2,
            micro_batch_size=2,
            repeat=False,
            task_encoder=Packer(),
            packing=Packing(max_length=16, length=counted, window=10),
        )

    loader = make()
    it = iter(loader)
    for _ in range(30):
        next(it)
    state = loader.state_dict()
    fresh = make()
    calls.clear(), plans.clear()
    fresh.load_state_dict(state)
    assert len(plans) == 1, f"load_state_dict planned {len(plans)} windows"
    # lengths of the cursor's window, and of the first window for the length function's fingerprint digest
    assert sum(calls) <= 20, f"load_state_dict computed {sum(calls)} samples' lengths (a window is 10)"
    calls.clear(), plans.clear()
    batch = next(iter(fresh))
    assert len(plans) <= 1 and batch["__positions__"].tolist() == [60, 61]
    # what a training loop asks after every micro-batch plans nothing beyond the windows it reads
    plans.clear()
    flags = [fresh.at_global_batch_boundary, fresh.global_batch, fresh.accumulation_steps]
    group = next(fresh.global_batches())
    assert flags == [True, 31, 1] and len(list(group)) == 1 and len(plans) <= 1


def test_an_endless_packed_reel_that_can_never_yield_a_pack_raises_instead_of_hanging():
    data, length = lengths_dataset([50, 60, 70])
    loader = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        task_encoder=Packer(),
        packing=Packing(max_length=10, length=length, window=100, over_length="drop"),
    )
    with pytest.raises(DatareelError, match=r"dropped every sample of \d+ consecutive windows.*max_length=10"):
        next(iter(loader))
    finite = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        task_encoder=Packer(),
        repeat=False,
        packing=Packing(max_length=10, length=length, window=2, over_length="drop"),
    )
    assert list(finite) == [] and finite.dropped == 3 and len(finite) == 0


# -- review findings: a finished packed pass, numpy options, the length digest, rare fitting samples ----------


@settings(max_examples=examples(0.3))
@given(
    lengths=st.lists(st.sampled_from([3, 5, 8, 50, 50]), min_size=1, max_size=40),
    window=st.integers(1, 8),
    W=st.integers(1, 3),
    W2=st.integers(1, 3),
    m=st.integers(1, 2),
    m2=st.integers(1, 2),
    shuffle=st.booleans(),
)
@example(lengths=[5, 5, 5, 5, 5, 5, 50, 50, 50, 50, 50, 50], window=4, W=1, W2=1, m=1, m2=2, shuffle=False)
def test_a_finite_packed_pass_restores_everywhere_up_to_its_end(lengths, window, W, W2, m, m2, shuffle):
    """Also when its last windows hold no pack (every sample dropped): the state after the last batch
    is the end of the pass and restores on any topology."""
    data, length = lengths_dataset(lengths)
    G = math.lcm(m * W, m2 * W2)
    report = check_restore_everywhere(
        data,
        global_batch_size=G,
        before=Topology(W, 0, m),
        after=Topology(W2, 0, m2),
        global_batches=len(lengths) + 1,
        repeat=False,
        shuffle=shuffle,
        task_encoder=StrictPacker(),
        packing=Packing(max_length=10, length=length, window=window, over_length="drop"),
    )
    assert report["steps"] >= 0


def test_the_state_after_the_last_batch_of_a_packed_pass_is_its_end():
    lengths = np.array([5, 5, 5, 5, 5, 5, 50, 50, 50, 50, 50, 50])  # windows of 4: window 2 drops all
    data = datareel.from_sequence([{"id": i, "len": int(n)} for i, n in enumerate(lengths)], name="docs")
    loader = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        repeat=False,
        shuffle=False,
        task_encoder=Packer(),
        packing=Packing(max_length=10, length=lambda s, i: lengths[i], window=4, over_length="drop"),
    )
    it = iter(loader)
    batches = [next(it) for _ in range(3)]
    assert [b["ids"] for b in batches] == [[[0, 1]], [[2, 3]], [[4, 5]]]
    assert loader.state_dict()["pack"] == [3, 0]  # the end, before StopIteration is even seen
    assert next(it, None) is None and loader.state_dict()["pack"] == [3, 0]


def test_numpy_integers_in_options_give_a_json_state():
    data, length = lengths_dataset([3, 4, 5, 6])
    loader = datareel.Loader(
        data,
        global_batch_size=np.int64(2),
        micro_batch_size=np.int32(1),
        seed=np.int64(3),
        task_encoder=Packer(),
        packing=Packing(max_length=np.int64(8), length=length, window=np.int64(2)),
    )
    next(iter(loader))
    json.dumps(loader.state_dict())  # raises on a numpy integer
    assert type(loader.packing.max_length) is int and type(loader.layout.global_batch_size) is int


def test_a_changed_length_function_behind_the_same_name_is_refused():
    data = datareel.from_sequence([{"id": i, "len": 3} for i in range(40)], name="docs")

    def make(scale):
        def tokens(source, indices):
            return np.full(len(indices), 3 * scale, dtype=np.int64)

        return datareel.Loader(
            data,
            global_batch_size=2,
            micro_batch_size=2,
            task_encoder=Packer(),
            packing=Packing(max_length=16, length=tokens, window=8),
        )

    loader = make(1)
    next(iter(loader))
    state = loader.state_dict()
    assert state["spec"]["packing"]["length"]["function"].endswith("tokens")
    make(1).load_state_dict(state)  # the same lengths: fine
    with pytest.raises(StateMismatchError, match="packing") as err:
        make(2).load_state_dict(state)  # same qualified name, other lengths (a changed tokenizer)
    assert set(err.value.differences) == {"packing"}


def test_a_repeat_false_packed_state_digest_does_not_depend_on_repeat():
    data, length = lengths_dataset([3, 4, 5])  # smaller than one window
    packing = Packing(max_length=8, length=length, window=16)
    finite = datareel.Loader(
        data, global_batch_size=1, micro_batch_size=1, repeat=False, task_encoder=Packer(), packing=packing
    )
    endless = datareel.Loader(data, global_batch_size=1, micro_batch_size=1, task_encoder=Packer(), packing=packing)
    assert finite.state_dict()["spec"] == endless.state_dict()["spec"]


def test_rare_samples_that_fit_are_waited_for_not_refused():
    bad = datareel.from_sequence([{"id": i, "len": 99} for i in range(20)], name="bad")
    good = datareel.from_sequence([{"id": 1000, "len": 2}], name="good")
    table = {"bad": 99, "good": 2}

    def length(source, indices):
        return np.full(len(indices), table[source.name], dtype=np.int64)

    loader = datareel.Loader(
        datareel.mix([(bad, 1), (good, 0.0005)]),
        global_batch_size=1,
        micro_batch_size=1,
        task_encoder=Packer(),
        packing=Packing(max_length=10, length=length, window=50, over_length="drop"),
    )
    assert next(iter(loader))["ids"] == [[1000]]
