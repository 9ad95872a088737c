"""Batch grouping (``batch_group_criterion``) through datareel.energon: batches of one bucket each, every sample of
a pass once, restored on any topology; beside megatron.energon 7.4.1 on the same data and criterion.

The core runs it as online packing (each grouped batch one unit of the window reel,
:mod:`datareel.energon.grouping`), so ``check_restore_everywhere`` checks it at every micro-step over random
world sizes, worker counts and windows; the facade's own loaders are checked beside Energon's."""

from __future__ import annotations

import math

import megatron.energon as me
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
import datareel.energon as den
from datareel import OptionError, WindowedStage
from datareel.energon.grouping import Grouped
from datareel.testing import Topology, check_restore_everywhere
from energon_text import prepare_text
from profiles import examples

N = 37


class Buckets:
    """Dict samples in three buckets by ``id % 3``, of sizes 2, 3 and 4; each sample draws from its RNG."""

    def encode_sample(self, sample):
        return {"id": sample["id"], "noise": int(datareel.sample_rng().integers(0, 1000))}

    def batch_group_criterion(self, sample):
        return sample["id"] % 3, 2 + sample["id"] % 3

    def batch(self, samples):
        return {"ids": [s["id"] for s in samples], "noise": [s["noise"] for s in samples]}


class _AsDicts(Grouped):
    """Grouped batches handed out as dicts with one row per grouped batch (the core adds ``__positions__``), so the
    restore check runs at any micro-batch size."""

    def batch(self, units):
        return {k: [tuple(u[k]) for u in units] for k in units[0]}

    def encode_batch(self, batch):
        return batch


@settings(max_examples=examples(0.3), deadline=None)
@given(
    W=st.integers(1, 3),
    W2=st.integers(1, 3),
    window=st.integers(1, 15),
    n=st.integers(4, 40),
    repeat=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_grouped_batches_restore_at_every_micro_step(W, W2, window, n, repeat, seed):
    G = math.lcm(W, W2)
    report = check_restore_everywhere(
        datareel.from_sequence([{"id": i} for i in range(n)], name="records"),
        global_batch_size=G,
        before=Topology(W, 0, 1),
        after=Topology(W2, 0, 1),
        global_batches=4,
        seed=seed,
        repeat=repeat,
        task_encoder=_AsDicts(Buckets(), None),
        stage=WindowedStage(window=window, pack=True, background=False),
    )
    assert report["restored"] >= 1


def test_buckets_fill_in_reel_order_and_the_rest_ends_the_window():
    grouped = Grouped(Buckets(), None)
    samples = [{"id": i} for i in (0, 3, 1, 6, 4, 7, 9, 2)]
    batches = grouped._buckets(samples)
    assert [[s["id"] for s in b] for b in batches] == [[0, 3], [1, 4, 7], [6, 9], [2]]  # as each fills; then the rest


class _Bad(Buckets):
    def __init__(self, answer):
        self.answer = answer

    def batch_group_criterion(self, sample):
        return self.answer(sample)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda s: "a", "return \\(bucket key, batch size or None\\)"),
        (lambda s: ("a", 0), "batch size 0"),
        (lambda s: ("a", None), "None with a batch_size"),
        (lambda s: ("a", 2 + s["id"]), "must not change"),
    ],
    ids=["not_a_pair", "zero", "none_without_batch_size", "changing"],
)
def test_a_bad_criterion_is_refused_by_name(answer, message):
    with pytest.raises(OptionError, match=message):
        Grouped(_Bad(answer), None)._buckets([{"id": i} for i in range(3)])


def test_the_core_loader_refuses_a_criterion_it_does_not_run():
    class Energonish(den.DefaultTaskEncoder):
        def batch_group_criterion(self, sample):
            return 0, 2

    with pytest.raises(OptionError, match="batch_group_criterion"):
        datareel.Loader(datareel.from_sequence([{"id": 0}]), global_batch_size=1, micro_batch_size=1,
                        task_encoder=Energonish())  # fmt: skip


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    root = tmp_path_factory.mktemp("grouping") / "texts"
    prepare_text(root, "t", N, 9)
    return root


def _encoder(lib):
    class ByLength(lib.DefaultTaskEncoder):
        """Buckets by the last digit's parity: 2-sample batches of even, 3-sample batches of odd samples."""

        def batch_group_criterion(self, sample):
            odd = int(sample.text.split()[-1]) % 2
            return odd, 2 + odd

    return ByLength()


def _batches(lib, root, rank=0, world_size=1, repeat=False, count=None, state=None, encoder_lib=None):
    ds = lib.get_train_dataset(
        str(root),
        worker_config=lib.WorkerConfig(rank=rank, world_size=world_size, num_workers=0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=repeat,
        task_encoder=_encoder(encoder_lib or lib),
        **({"global_batch_size": 2} if lib is den else {}),  # grouped batches per optimizer step, on any W
    )
    loader = lib.get_savable_loader(ds) if lib is den else lib.get_savable_loader(ds, watchdog_timeout_seconds=None)
    if state is not None:
        loader.restore_state_rank(state)
    out = []
    for batch in loader:
        out.append([int(t.split()[-1]) for t in batch.text])
        if count is not None and len(out) == count:
            break
    return out, loader


def _check_pass(batches):
    seen = sorted(i for b in batches for i in b)
    assert seen == list(range(N))  # every sample of the pass once
    for b in batches:
        assert len({i % 2 for i in b}) == 1  # one bucket per batch
        assert len(b) <= 2 + b[0] % 2


@pytest.mark.workers  # the facade plans grouped windows in a planning process
def test_a_pass_is_grouped_like_energons(texts):
    ours, _ = _batches(den, texts)
    theirs, _ = _batches(me, texts)
    _check_pass(ours)
    _check_pass(theirs)
    # a task encoder written against megatron.energon itself groups through the facade the same way
    assert _batches(den, texts, encoder_lib=me)[0] == ours
    full = [b for b in ours if len(b) == 2 + b[0] % 2]
    assert len(full) >= len(ours) - 2  # within one window, only each bucket's last batch is short


@pytest.mark.workers
def test_grouped_batches_continue_on_another_world_size(texts):
    whole, _ = _batches(den, texts, repeat=True, count=10)
    _, first = _batches(den, texts, repeat=True, count=4)
    state = first.save_state_rank()
    rest = [_batches(den, texts, rank=r, world_size=2, repeat=True, count=3, state=state)[0] for r in (0, 1)]
    assert [b for step in zip(*rest) for b in step] == whole[4:10]
