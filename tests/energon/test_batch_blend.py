"""Energon's batch-granular blends through the facade, elastic: ``BlendDataset`` (each batch from one dataset) and
``MixBatchDataset`` (each slot of a batch from one dataset, then ``batch_mix_fn``).

Which dataset a unit (one global batch of a child) comes from is a keyed function of its index
(datareel.plan.batch_blend), so the children advance in lockstep on every rank and a state saved on one world
size continues on another with the same samples, from the same dataset at every step.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datareel import energon as den
from datareel.energon.savable_loader import SavableDataLoader
from datareel.errors import (
    DatareelError,
    ForeignStateError,
    OptionError,
    SkipSample,
    StateDamagedError,
    StateMismatchError,
    StateVersionError,
    TopologyError,
)
from profiles import examples

ROOT = Path(__file__).resolve().parents[2]


def wc(rank=0, world=1, workers=0, seed=0):
    return den.WorkerConfig(rank=rank, world_size=world, num_workers=workers, seed_offset=seed)


class Tagged(den.DefaultTaskEncoder):
    """Batches as ``{"tag": dataset, "keys": [...]}``: which dataset a batch came from, and its samples."""

    def __init__(self, tag):
        super().__init__()
        self.tag = tag

    def encode_batch(self, batch):
        return {"tag": self.tag, "keys": list(batch.__key__)}


def child(root, tag, m, G, config):
    return den.get_train_dataset(
        str(root), batch_size=m, global_batch_size=G, worker_config=config, task_encoder=Tagged(tag)
    )


def make(root, kind, weights, sizes, config, mix=3):
    """A BlendDataset ("blend") or MixBatchDataset ("mix", ``mix`` slots) of datasets ``d0, d1, ...``, dataset
    ``c`` with micro-batch and global batch sizes ``sizes[c]``."""
    pairs = [(child(root, f"d{c}", m, G, config), w) for c, ((m, G), w) in enumerate(zip(sizes, weights))]
    if kind == "blend":
        return den.BlendDataset(*pairs, worker_config=config)
    return den.MixBatchDataset(*pairs, batch_size=mix, worker_config=config)


def load(dataset):
    return den.get_loader(dataset, watchdog_timeout_seconds=None, gc_collect_every_n_steps=0)


def take(loader, n):
    """The next ``n`` batches, each as ``(dataset, keys)`` (a mixed batch: a list of them)."""
    it = iter(loader)
    return [seen(next(it)) for _ in range(n)]


def seen(batch):
    return [seen(b) for b in batch] if isinstance(batch, list) else (batch["tag"], tuple(batch["keys"]))


def stream(per_rank, kind):
    """The samples of all ranks' batches in reel order: micro-step by micro-step (a mixed batch: slot by slot),
    rank by rank, each as ``(dataset, key)``."""
    out = []
    for step in range(len(per_rank[0])):
        slots = 1 if kind == "blend" else len(per_rank[0][step])
        for i in range(slots):
            for batches in per_rank:
                tag, keys = batches[step] if kind == "blend" else batches[step][i]
                out += [(tag, key) for key in keys]
    return out


def run(root, kind, weights, sizes, world, steps, state=None, mix=3):
    """``steps`` batches on each of ``world`` ranks (simulated in this process) -> (their stream, the state)."""
    per_rank, states = [], []
    for rank in range(world):
        loader = load(make(root, kind, weights, [(m, G) for m, G in sizes], wc(rank, world), mix))
        if state is not None:
            loader.restore_state_rank(state)
        per_rank.append(take(loader, steps))
        states.append(loader.save_state_rank())
        loader.close()
    assert all(s == states[0] for s in states[1:]), "a blend's state is the same on every rank"
    json.dumps(states[0])
    return stream(per_rank, kind), states[0]


# -- (1) Energon's own tests: test_blending, test_mixing_homogeneous, test_mixing_heterogeneous ------------------
def test_blending_draws_whole_batches_by_weight_exactly(texts):
    loader = den.get_loader(
        den.BlendDataset(
            (den.get_train_dataset(str(texts), batch_size=10, worker_config=wc(), shuffle_buffer_size=None), 2),
            (den.get_train_dataset(str(texts), batch_size=20, worker_config=wc(), max_samples_per_sequence=None), 8),
            worker_config=wc(),
        ),
        gc_collect_every_n_steps=0,
    )
    sizes = {10: 0, 20: 0}
    for _, batch in zip(range(200), loader):
        sizes[len(batch.text)] += 1
    assert sizes == {10: 40, 20: 160}  # Energon's test allows 15-25% and 75-85%: datareel's shares are exact


@dataclasses.dataclass
class SourcedBatch(den.Batch):
    text: list
    source: int


@dataclasses.dataclass
class OtherSourcedBatch(SourcedBatch):
    pass


class Sourced(den.TaskEncoder):
    def __init__(self, source, cls=SourcedBatch):
        super().__init__()
        self.source, self.cls = source, cls

    def encode_batch(self, batch):
        return self.cls(**dataclasses.asdict(batch), source=self.source)


@pytest.mark.parametrize("homogeneous", [True, False])
def test_mixing_fills_each_slot_from_one_dataset(texts, homogeneous):
    classes = (SourcedBatch, SourcedBatch) if homogeneous else (SourcedBatch, OtherSourcedBatch)
    pairs = [
        (den.get_train_dataset(str(texts), batch_size=1, worker_config=wc(), task_encoder=Sourced(s, cls)), w)
        for s, (cls, w) in enumerate(zip(classes, (2, 8)))
    ]
    mix = {"batch_mix_fn": den.homogeneous_concat_mix} if homogeneous else {}
    loader = den.get_loader(den.MixBatchDataset(*pairs, batch_size=10, worker_config=wc(), **mix))
    sources = {0: 0, 1: 0}
    for _, batch in zip(range(20), loader):
        if homogeneous:
            assert isinstance(batch, SourcedBatch) and len(batch.text) == 10
            slots = batch.source
        else:
            assert isinstance(batch, list) and len(batch) == 10 and all(len(b.text) == 1 for b in batch)
            assert {type(b) for b in batch} <= {SourcedBatch, OtherSourcedBatch}
            slots = [b.source for b in batch]
        for source in slots:
            sources[source] += 1
    assert sources == {0: 40, 1: 160}


# -- (2) beside megatron.energon on the same data ---------------------------------------------------------------
def test_shares_and_lengths_beside_megatron_energon(texts):
    me = pytest.importorskip("megatron.energon")
    seen = {}
    for lib in (den, me):
        config = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)

        def train(batch_size, source, lib=lib, config=config):
            return lib.get_train_dataset(
                str(texts),
                batch_size=batch_size,
                worker_config=config,
                subflavors={"source": source},
                shuffle_buffer_size=None,
                max_samples_per_sequence=None,
            )

        blend = lib.BlendDataset((train(2, 0), 2), (train(3, 1), 8), worker_config=config)
        loader = lib.get_savable_loader(blend, gc_collect_every_n_steps=0)
        sizes = [len(batch.__key__) for _, batch in zip(range(300), loader)]
        mixed = lib.MixBatchDataset((train(1, 0), 2), (train(1, 1), 8), batch_size=10, worker_config=config)
        mix_loader = lib.get_savable_loader(mixed, gc_collect_every_n_steps=0)
        slots = [slot.__subflavors__[0]["source"] for _, batch in zip(range(30), mix_loader) for slot in batch]
        seen[lib.__name__] = (sizes.count(2), slots.count(0), len(loader), len(mix_loader))
    ours, theirs = seen["datareel.energon"], seen["megatron.energon"]
    assert ours == (60, 60, 75, 18)  # exact shares; len as Energon's: 45 + 30 batches, ceil(2 × 90 / 10)
    assert 0.15 * 300 <= theirs[0] <= 0.25 * 300 and 0.15 * 300 <= theirs[1] <= 0.25 * 300  # Energon's tolerance
    assert ours[2:] == theirs[2:]


# -- (3) elastic: saved on one world size, continued on another ----------------------------------------------
@pytest.mark.parametrize("kind", ["blend", "mix"])
def test_saved_on_one_rank_continues_on_two(texts, kind):
    sizes, weights = [(2, 4), (1, 2)], [1, 3]  # explicit global batch sizes: 2 accumulation steps on one rank
    reference, _ = run(texts, kind, weights, sizes, 1, 40)
    saved, state = run(texts, kind, weights, sizes, 1, 6)
    continued, _ = run(texts, kind, weights, sizes, 2, 5, state)  # ranks 0 and 1 of two
    assert saved + continued == reference[: len(saved) + len(continued)]
    assert {tag for tag, _ in continued} == {"d0", "d1"}


@settings(max_examples=examples(0.1), suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    kind=st.sampled_from(["blend", "mix"]),
    weights=st.lists(st.floats(0.2, 5.0), min_size=1, max_size=3),
    micro=st.lists(st.sampled_from([1, 2]), min_size=3, max_size=3),
    worlds=st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4])),
    steps=st.tuples(st.integers(0, 5), st.integers(1, 4)),
    mix=st.integers(1, 3),
)
def test_any_world_size_continues_the_same_stream(texts, kind, weights, micro, worlds, steps, mix):
    sizes = [(m, 4 * m) for m in micro[: len(weights)]]  # every world size here divides each global batch
    (before, after), (k, n) = worlds, steps
    saved, state = run(texts, kind, weights, sizes, before, k, mix=mix)
    done = [child["cursor"] % G for child, (_, G) in zip(state["children"], sizes)]  # into the current unit
    if any(d and (G - d) % (m * after) for d, (m, G) in zip(done, sizes)):
        with pytest.raises(TopologyError, match="dataset"):  # the child's own rule, named
            run(texts, kind, weights, sizes, after, n, state, mix=mix)
        return
    continued, _ = run(texts, kind, weights, sizes, after, n, state, mix=mix)
    needed = len(saved) + len(continued)  # samples; a step on one rank gives at least one (a mixed batch: mix)
    reference, _ = run(texts, kind, weights, sizes, 1, -(-needed // (mix if kind == "mix" else 1)), mix=mix)
    assert saved + continued == reference[:needed]


def test_without_global_batch_size_another_world_size_is_refused_naming_it(texts):
    pairs = [(den.get_train_dataset(str(texts), batch_size=2, worker_config=wc()), 1)] * 2
    loader = load(den.BlendDataset(*pairs, worker_config=wc()))
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.save_state_rank()
    pairs = [(den.get_train_dataset(str(texts), batch_size=2, worker_config=wc(0, 2)), 1)] * 2
    other = load(den.BlendDataset(*pairs, worker_config=wc(0, 2)))
    with pytest.raises(StateMismatchError, match="dataset 0 of the BlendDataset.*global_batch_size"):
        other.restore_state_rank(state)


# -- the loader's methods --------------------------------------------------------------------------------------
def test_state_methods_and_refused_states(texts):
    sizes, weights = [(2, 2), (1, 1)], [1, 1]
    loader = load(make(texts, "blend", weights, sizes, wc()))
    first = take(loader, 4)
    state = loader.save_state_rank()
    assert loader.save_state_global() == [state] and not loader.can_restore_sample()
    nxt = take(loader, 3)
    loader.restore_state_global([state])
    assert take(loader, 3) == nxt
    old = iter(loader)
    loader.restore_state_rank(state)
    with pytest.raises(DatareelError, match="made before restore_state_rank"):
        next(old)
    plain = den.get_loader(child(texts, "d0", 2, 2, wc()))
    with pytest.raises(ForeignStateError, match="loader over one dataset"):
        loader.restore_state_rank(plain.save_state_rank())
    with pytest.raises(StateVersionError, match="version 7"):
        loader.restore_state_rank({**state, "version": 7})
    with pytest.raises(StateDamagedError, match="do not belong to this unit.*edited"):
        loader.restore_state_rank({**state, "unit": state["unit"] + 1})
    with pytest.raises(ForeignStateError, match="Megatron-Energon's own savable loader"):
        loader.restore_state_rank({"worker_states": [], "next_worker_id": 0})
    reweighed = load(make(texts, "blend", [1, 2], sizes, wc()))
    with pytest.raises(StateMismatchError, match="weights: saved") as refused:
        reweighed.restore_state_rank(state)
    assert set(refused.value.differences) == {"weights"}
    assert take(loader, 3) == nxt  # the refused states left it where it was
    with pytest.raises(OptionError, match="does not make batches again"):
        loader.restore_sample(("Reel", 0, 2))
    assert len(first) == 4 and len(loader) == len(den.get_loader(child(texts, "d0", 2, 2, wc()))) + 90


def test_savable_data_loader_class_and_get_savable_loader_take_a_blend(texts):
    blend = make(texts, "mix", [1, 1], [(1, 1), (1, 1)], wc(), mix=4)
    ours = SavableDataLoader(blend, watchdog_timeout_seconds=None)
    other = den.get_savable_loader(blend, watchdog_timeout_seconds=None)
    assert take(ours, 3) == take(other, 3) and len(blend) == len(ours) == 45


def test_batch_mix_fn_skip_and_failures_follow_energon(texts):
    calls = []

    def mix(slots):
        calls.append(len(calls))
        if len(calls) == 2:
            raise SkipSample()
        if len(calls) == 3:
            raise ValueError("bad mix")
        return slots

    told = []
    config = dataclasses.replace(wc(), global_error_handler=lambda exc, sample, sources: told.append(repr(exc)))
    pairs = [(child(texts, "d0", 1, 1, config), 1)]
    got = take(load(den.MixBatchDataset(*pairs, batch_size=2, batch_mix_fn=mix, worker_config=config)), 2)
    plain = take(load(den.MixBatchDataset(*pairs, batch_size=2, worker_config=config)), 4)
    assert got == [plain[0], plain[3]] and told == ["ValueError('bad mix')"]


class Interrupting(Tagged):
    """Raises KeyboardInterrupt once, at its ``at``-th batch (a next() stopped in the middle of a mixed batch)."""

    def __init__(self, tag, at):
        super().__init__(tag)
        self.at, self.seen = at, 0

    def encode_batch(self, batch):
        self.seen += 1
        if self.seen == self.at:
            raise KeyboardInterrupt
        return super().encode_batch(batch)


def test_a_mixed_batch_interrupted_midway_is_made_whole_and_saved_before_it(texts):
    pairs = [(child(texts, "d0", 1, 1, wc()), 1)]
    reference = take(load(den.MixBatchDataset(*pairs, batch_size=3, worker_config=wc())), 3)
    interrupting = den.get_train_dataset(
        str(texts), batch_size=1, worker_config=wc(), task_encoder=Interrupting("d0", 5)
    )
    loader = load(den.MixBatchDataset((interrupting, 1), batch_size=3, worker_config=wc()))
    assert take(loader, 1) == reference[:1]
    before = loader.save_state_rank()
    with pytest.raises(KeyboardInterrupt):
        take(loader, 1)  # slots 4 and 5 of the stream: interrupted at 5
    assert loader.save_state_rank() == before
    assert take(loader, 2) == reference[1:]


@pytest.mark.workers
def test_children_with_worker_processes_give_the_same_stream(texts):
    sizes, weights = [(2, 2), (1, 1)], [1, 2]
    reference = take(load(make(texts, "blend", weights, sizes, wc())), 8)
    loader = load(make(texts, "blend", weights, sizes, wc(workers=1)))
    try:
        assert take(loader, 8) == reference
    finally:
        loader.close()


# -- (4) bad inputs, refused by name ---------------------------------------------------------------------------
def test_bad_inputs_are_refused_by_name(texts):
    a = child(texts, "d0", 2, None, wc())
    cases = [
        (lambda: den.BlendDataset(worker_config=wc()), "got no datasets"),
        (lambda: den.BlendDataset((a, 0), worker_config=wc()), "dataset 0 has weight 0; each weight must be"),
        (lambda: den.BlendDataset((a, 1), (a, -2), worker_config=wc()), "dataset 1 has weight -2"),
        (lambda: den.BlendDataset((a, float("inf")), worker_config=wc()), "weight inf"),
        (lambda: den.BlendDataset((a, 1), (a, 1e9), worker_config=wc()), "too unequal"),
        (lambda: den.BlendDataset(a, worker_config=wc()), "not a \\(dataset, weight\\) pair"),
        (lambda: den.BlendDataset((str(texts), 1), worker_config=wc()), "dataset 0 is a str, not what"),
        (
            lambda: den.BlendDataset((den.BlendDataset((a, 1), worker_config=wc()), 1), worker_config=wc()),
            "do not nest",
        ),
        (lambda: den.BlendDataset((den.LimitDataset(a, 3), 1), worker_config=wc()), "wrapped in LimitDataset"),
        (
            lambda: den.BlendDataset(
                (den.get_train_dataset(str(texts), batch_size=2, worker_config=wc(), repeat=False), 1),
                worker_config=wc(),
            ),
            "repeat=False",
        ),
        (
            lambda: den.BlendDataset(
                (den.get_val_dataset(str(texts), split_part="train", batch_size=2, worker_config=wc()), 1),
                worker_config=wc(),
            ),
            "val dataset",
        ),
        (lambda: den.BlendDataset((a, 1), worker_config=wc(0, 2)), "is not the dataset's WorkerConfig"),
        (
            lambda: den.BlendDataset((a, 1), (child(texts, "d1", 2, None, wc(1, 2)), 1), worker_config=wc()),
            "dataset 1 was made with WorkerConfig\\(rank=1",
        ),
        (
            lambda: den.get_loader(den.BlendDataset((a, 1), worker_config=wc()), worker_config=wc(workers=2)),
            "leave it out",
        ),
        (lambda: den.MixBatchDataset((a, 1), batch_size=0, worker_config=wc()), "batch_size=0"),
        (lambda: den.MixBatchDataset((a, 1), batch_size=2, batch_mix_fn=3, worker_config=wc()), "not callable"),
        (lambda: den.MixBatchDataset((a, 1), batch_size=2, batch_mix_fn=_gen, worker_config=wc()), "is a generator"),
        (lambda: den.BlendDataset((a, 1), worker_config=wc(seed=-1)), "seed=-1"),
    ]
    for make_it, match in cases:
        with pytest.raises(OptionError, match=match):
            make_it()


def _gen(slots):
    yield slots


# -- per-rank state files on a grown world (real gloo ranks) ------------------------------------------------------
def _grown(rank, world, root, out):
    config = den.WorkerConfig.default_worker_config(num_workers=0)
    loader = load(make(root, "blend", [1, 3], [(2, 4), (1, 2)], config))
    mine = Path(out) / f"state-{rank}.json"
    if mine.exists():  # Megatron restores only where this rank's file exists: rank 1 adopts rank 0's
        loader.restore_state_rank(json.loads(mine.read_text()))
    batches = take(loader, 4)
    saved = loader.save_state_global()
    report = {"batches": batches, "state": loader.save_state_rank(), "global": saved}
    (Path(out) / f"report-{rank}.json").write_text(json.dumps(report))


@pytest.mark.slow
def test_a_rank_without_a_state_file_adopts_the_others(texts, tmp_path):
    from datareel.testing import run_local

    sizes, weights = [(2, 4), (1, 2)], [1, 3]
    reference, _ = run(texts, "blend", weights, sizes, 1, 40)
    saved, state = run(texts, "blend", weights, sizes, 1, 6)
    (tmp_path / "state-0.json").write_text(json.dumps(state))
    run_local(_grown, 2, str(texts), str(tmp_path), timeout=240)
    reports = [json.loads((tmp_path / f"report-{r}.json").read_text()) for r in range(2)]
    assert reports[0]["state"] == reports[1]["state"] and reports[0]["global"] == [reports[0]["state"]] * 2
    assert reports[1]["global"] is None
    continued = stream([[(tag, keys) for tag, keys in r["batches"]] for r in reports], "blend")
    assert saved + continued == reference[: len(saved) + len(continued)]
