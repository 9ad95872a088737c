"""Val loaders re-iterated, beside megatron.energon 7.4.1: the same batches, pass after pass.

Megatron builds its val loaders as ``get_loader(LimitDataset(RepeatDataset(get_val_dataset(...)),
n, reset_after_epoch=True))`` and reads them through a ``cyclic_iter`` (``while True: for x in
loader: yield x``); scripts also loop ``for batch in loader`` once per evaluation.  Each case below
builds the same loader with megatron.energon and with datareel.energon on one prepared dataset,
consumes both the same way and compares the sample keys of every batch of every pass, and ``len``.

A val dataset is read in order, so Energon's batches are deterministic: its samples are cut into
one contiguous slice per (rank, worker), each worker batches its own slice, and the loader takes
the workers' batches in turn.  datareel.energon reproduces that order exactly (ranks simulated in
one process by ``WorkerConfig(rank=r, world_size=W)``, which both libraries accept).

One Energon behaviour is not reproduced, on purpose: ``get_loader`` (not ``get_savable_loader``)
with worker processes drops the batches its workers had prefetched when a ``for`` loop is left
early (``break``) and the loader is iterated again (torch restarts its workers' iteration).
datareel continues where the consumer stopped, as Energon's ``get_savable_loader`` does; the
``break`` cases compare against that.
"""

from __future__ import annotations

import itertools
import warnings

import pytest

from datareel import energon as den
from datareel.errors import StateMismatchError

me = pytest.importorskip("megatron.energon")

BATCH = 7  # 90 samples: every worker's slice ends in a partial batch on most topologies
SMALL, LARGE = 2, 40  # a limit below one pass, and one above every pass here (at most 14 batches)


def _keys_encoder(lib):
    class Keys(lib.DefaultTaskEncoder):
        def batch(self, samples):
            return [s.__key__ for s in samples]

        def encode_batch(self, batch):
            return batch

    return Keys()


def build(lib, root, *, W, rank, workers, limit_arg=None, wraps=(), loader="get_loader", batch_size=BATCH, **kw):
    """A val loader as Megatron builds one: ``wraps`` applied in order (("repeat",), ("limit", n, reset))."""
    config = lib.WorkerConfig(rank=rank, world_size=W, num_workers=workers)
    ds = lib.get_val_dataset(
        str(root),
        split_part="train",
        worker_config=config,
        batch_size=batch_size,
        task_encoder=_keys_encoder(lib),
        limit=limit_arg,
        **kw,
    )
    for wrap in wraps:
        if wrap[0] == "repeat":
            ds = lib.RepeatDataset(ds, worker_config=config, **(wrap[1] if len(wrap) > 1 else {}))
        else:
            ds = lib.LimitDataset(ds, length=wrap[1], reset_after_epoch=wrap[2], worker_config=config)
    return make_loader(lib, loader, ds)


def make_loader(lib, loader, ds):
    """``get_loader`` / ``get_savable_loader``; Energon's without its periodic ``gc.collect()`` and watchdog
    (wrappers that pass every batch through unchanged: they only make its tests slow)."""
    quiet = {"gc_collect_every_n_steps": 0, "watchdog_timeout_seconds": None}
    if lib is me and loader == "get_loader":
        from megatron.energon.savable_loader import BasicDataLoader

        return BasicDataLoader(ds, **quiet)
    return getattr(lib, loader)(ds, **quiet)


def cyclic_iter(loader):
    """Megatron's ``cyclic_iter`` (EnergonDataloader reads val and train loaders through it)."""
    while True:
        for x in loader:  # noqa: UP028 (Megatron's own form)
            yield x


def consume(loader, mode, *, passes=3, take=None, count=None):
    """``for``: ``passes`` loops, each stopped after ``take`` batches if given; ``cyclic``: ``count`` batches."""
    if mode == "cyclic":
        return list(itertools.islice(cyclic_iter(loader), count))
    out = []
    for _ in range(passes):
        got = []
        for batch in loader:
            got.append(batch)
            if take is not None and len(got) >= take:
                break
        out.append(got)
    return out


def both(root, case, mode, *, ranks, **consume_kw):
    """Per rank: (energon, datareel) of (len, what `consume` saw)."""
    out = []
    for rank in ranks:
        pair = []
        for lib in (me, den):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loader = build(lib, root, rank=rank, **case)
                pair.append((len(loader), consume(loader, mode, **consume_kw)))
            del loader
        out.append(pair)
    return out


def _wraps(limit, reset, repeat):
    """The wrapper stack of one case: Megatron's LimitDataset(RepeatDataset(val)) and its variations."""
    wraps = [("repeat",)] if repeat else []
    if limit is not None:
        wraps.append(("limit", limit, reset))
    return tuple(wraps)


CASES = [
    pytest.param(limit, reset, repeat, id=f"limit={limit}-reset={reset}-repeat={repeat}")
    for limit in (None, SMALL, 3, LARGE)
    for reset in ((False,) if limit is None else (False, True))
    for repeat in (False, True)
]
IN_PROCESS = [pytest.param(1, 0, id="W1-N0"), pytest.param(3, 0, id="W3-N0")]
WITH_WORKERS = [
    pytest.param(1, 2, id="W1-N2", marks=pytest.mark.workers),
    pytest.param(2, 2, id="W2-N2", marks=pytest.mark.workers),
]
MODES = [pytest.param("for", id="for"), pytest.param("cyclic", id="cyclic")]


def combine(*params):
    """One pytest.param of several: their values in order, their ids joined by '-', their marks."""
    return pytest.param(
        *[v for p in params for v in p.values],
        id="-".join(p.id for p in params),
        marks=[m for p in params for m in p.marks],
    )


def pairwise(*groups):
    """Every combination of ``groups`` on both in-process topologies, and each on one worker topology in turn,
    so that each worker topology meets every value of every group (a worker topology costs five in-process
    ones; the full grid on both doubled this module's time for no pair it does not already cover)."""
    combos = [[]]
    for group in groups:
        combos = [[*c, p] for c in combos for p in group]
    out = []
    for i, combo in enumerate(combos):
        turn = i + i // 2  # worker topologies in turn 0 1 1 0 0 1 1 ...: neighbouring values (reset, repeat) meet both
        out += [combine(*combo, t) for t in IN_PROCESS] + [combine(*combo, WITH_WORKERS[turn % 2])]
    return out


@pytest.mark.parametrize("mode,limit,reset,repeat,W,workers", pairwise(MODES, CASES))
def test_val_loader_passes_match_energon(texts, W, workers, limit, reset, repeat, mode):
    endless = repeat and limit is None
    # an endless loader's `for` is left early: with workers, as get_savable_loader does (see the module doc)
    loader = "get_savable_loader" if endless and mode == "for" and workers else "get_loader"
    case = dict(W=W, workers=workers, wraps=_wraps(limit, reset, repeat), loader=loader)
    kw = dict(count=45) if mode == "cyclic" else dict(take=20 if endless else None)
    for rank, (energon, ours) in enumerate(both(texts, case, mode, ranks=range(W), **kw)):
        assert ours == energon, f"rank {rank} of {W}"


@pytest.mark.parametrize("limit,W,workers", pairwise([pytest.param(n, id=str(n)) for n in (SMALL, LARGE, 0)]))
def test_get_val_dataset_limit_matches_energon(texts, W, workers, limit):
    """``get_val_dataset(limit=n)``: Energon's own LimitDataset (reset after each pass; 0 means none)."""
    case = dict(W=W, workers=workers, limit_arg=limit)
    for rank, (energon, ours) in enumerate(both(texts, case, "for", ranks=range(W))):
        assert ours == energon, f"rank {rank} of {W}"
    case["wraps"] = (("repeat",),)  # RepeatDataset over the limited val dataset: those batches, endlessly
    for rank, (energon, ours) in enumerate(both(texts, case, "cyclic", ranks=range(W), count=30)):
        assert ours == energon, f"rank {rank} of {W}"


BREAKS = [
    pytest.param(("limit", 4, True), 2, id="limit4-stop2"),  # a limit left half-way: the rest, then an empty pass
    pytest.param(("limit", 4, False), 4, id="limit4-stop4"),  # stopped right at the limit
    pytest.param(("limit", 5, True), 3, id="limit5-stop3"),
    pytest.param(None, 5, id="plain-stop5"),  # a plain val pass left early continues at the next `for`
    pytest.param(None, 13, id="plain-stop-at-end"),
    pytest.param(("repeat",), 8, id="repeat-stop8"),
]


@pytest.mark.parametrize("wrap,take,W,workers", pairwise(BREAKS))
def test_val_loops_left_early_continue_as_energon_savable_loader(texts, W, workers, wrap, take):
    loaders = ["get_savable_loader"] + (["get_loader"] if workers == 0 else [])
    for loader in loaders:
        case = dict(W=W, workers=workers, wraps=() if wrap is None else (wrap,), loader=loader)
        for rank, (energon, ours) in enumerate(both(texts, case, "for", ranks=range(W), passes=4, take=take)):
            assert ours == energon, f"{loader}: rank {rank} of {W}"


COUNTED = [
    ((("repeat", {"repeats": 2}),), {}),
    ((("repeat", {"repeats": 1.5}),), {}),
    ((("repeat", {"repeats": 2, "restart": False}),), {}),
    ((("repeat", {"repeats": 2}), ("limit", 9, True)), {}),
    ((), {"batch_drop_last": True}),
    ((("limit", 3, True), ("repeat",)), {}),  # RepeatDataset(LimitDataset(val)): the limited batches again
]


@pytest.mark.parametrize("W,workers", IN_PROCESS + WITH_WORKERS)
def test_counted_repeats_and_batch_drop_last_match_energon(texts, W, workers):
    # every case on both in-process topologies; with workers, each case on one of the two (pairwise, as above)
    for wraps, kw in COUNTED if not workers else COUNTED[W % 2 :: 2]:
        case = dict(W=W, workers=workers, wraps=wraps, **kw)
        ends = any(w[0] == "repeat" and w[1:] and not w[1].get("restart", True) for w in wraps)
        for rank, (energon, ours) in enumerate(
            [] if ends else both(texts, case, "cyclic", ranks=range(W), count=40)  # a cyclic_iter would spin
        ):
            assert ours == energon, f"{wraps} {kw}: rank {rank} of {W}"
        if workers:  # `for` loops left early (take=25): as get_savable_loader does (see the module doc)
            case["loader"] = "get_savable_loader"
        for rank, (energon, ours) in enumerate(both(texts, case, "for", ranks=range(W), take=25)):
            assert ours == energon, f"{wraps} {kw}: rank {rank} of {W}"


def test_val_datasets_of_a_metadataset_match_energon(texts, tmp_path):
    """Several val datasets concatenated (a metadataset's val split): Energon rotates the worker that
    gets a dataset's extra samples by the samples before it."""
    from wds_helpers import val_blend

    meta = val_blend(tmp_path, texts, 11, "meta.yaml")
    for W in (1, 4):
        for rank in range(W):
            got = []
            for lib in (me, den):
                config = lib.WorkerConfig(rank=rank, world_size=W, num_workers=0)
                ds = lib.get_val_dataset(
                    str(meta), split_part="val", worker_config=config, batch_size=4, task_encoder=_keys_encoder(lib)
                )
                loader = make_loader(lib, "get_loader", ds)
                got.append((len(loader), [list(loader) for _ in range(2)]))
            assert got[1] == got[0], f"rank {rank} of {W}"


def test_the_split_over_ranks_and_workers_is_energons_for_every_small_topology():
    """Which samples each (rank, worker) reads, against Energon's own split, for 1..24 workers in all and
    every rotation (the samples before a dataset in a concatenation)."""
    from megatron.energon.flavors.webdataset.sharder import Sharder

    from datareel.energon.val import worker_slices

    for W in range(1, 7):
        for N in range(5):
            workers = W * max(N, 1)
            for before in range(workers):
                for size in (0, 1, workers - 1, workers, 2 * workers + 3, 97):
                    for rank in range(W):
                        config = me.WorkerConfig(rank=rank, world_size=W, num_workers=N)
                        theirs = Sharder.split_samples_to_workers(before, before + size, config, rotation_offset=before)
                        ours = [
                            [seg for seg in w.segments if seg[0] == 1]
                            for w in worker_slices([before, size], W, rank, N)
                        ]
                        # per worker: (first sample, count) of the second dataset; an empty slice has no segment
                        got = [(before + seg[0][1], seg[0][2]) if seg else (None, 0) for seg in ours]
                        want = [(a if b > a else None, b - a) for a, b in zip(theirs, theirs[1:])]
                        assert got == want, (W, N, before, size, rank)


# -- train loaders: shuffled in another order than Energon's, so the pass structure is compared ---------


def build_train(lib, root, *, workers, wraps=(), virtual=0, loader="get_savable_loader"):
    config = lib.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = lib.get_train_dataset(
        str(root),
        worker_config=config,
        batch_size=3,
        shuffle_buffer_size=10,
        max_samples_per_sequence=5,
        virtual_epoch_length=virtual,
        task_encoder=_keys_encoder(lib),
    )
    for wrap in wraps:
        if wrap[0] == "repeat":
            ds = lib.RepeatDataset(ds, worker_config=config)
        else:
            ds = lib.LimitDataset(ds, length=wrap[1], reset_after_epoch=wrap[2], worker_config=config)
    return make_loader(lib, loader, ds)


def structure(passes):
    """Each pass's length, and which passes hold the same batches (what does not depend on the order)."""
    return [len(p) for p in passes], [[a == b for b in passes] for a in passes]


TRAIN = [
    pytest.param((("limit", 3, False),), 0, None, id="limit3"),  # the same 3 batches every pass (Energon 7.4.1)
    pytest.param((("limit", 3, True),), 0, None, id="limit3-reset"),
    pytest.param((("limit", 4, False),), 0, 2, id="limit4-stop2"),  # left half-way: the rest, then an empty pass
    pytest.param((), 3, None, id="virtual3"),  # virtual epochs continue
    pytest.param((), 4, 4, id="virtual4-stop-at-end"),
    pytest.param((("repeat",), ("limit", 5, True)), 0, None, id="repeat-limit5"),
]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.workers)])
@pytest.mark.parametrize("wraps,virtual,take", TRAIN)
def test_train_loader_pass_structure_matches_energon(texts, workers, wraps, virtual, take):
    got = []
    for lib in (me, den):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = build_train(lib, texts, workers=workers, wraps=wraps, virtual=virtual)
            passes = consume(loader, "for", passes=4, take=take)
            got.append((len(loader), structure(passes)))
        del loader
    assert got[1] == got[0]


SAVES = [
    pytest.param((), 0, id="plain-at-start"),
    pytest.param((), 3, id="plain-mid-pass"),
    pytest.param((), 13, id="plain-at-end"),
    pytest.param((("repeat",),), 17, id="repeat-second-pass"),
    pytest.param((("limit", 4, True),), 2, id="limit4-mid"),
]


@pytest.mark.parametrize("wraps,saved_after,W,workers", pairwise(SAVES))
def test_val_state_saved_mid_pass_continues_as_energons(texts, W, workers, wraps, saved_after):
    """save_state_rank after some batches (a `for` left there), restore_state_rank into a fresh loader of the
    same topology: the rest of that pass, then (without worker processes) the passes after it, as megatron.energon's
    savable loader gives them.  With worker processes Energon's passes after a restore start from another worker
    each time (its savable loader keeps the restored worker rotation), which datareel does not copy: its later
    passes are the val order from the first worker, as a fresh loader's (docs/migrating-from-energon.md)."""
    for rank in range(W):
        seen = []
        for lib in (me, den):
            case = dict(W=W, rank=rank, workers=workers, wraps=wraps, loader="get_savable_loader")
            first = build(lib, texts, **case)
            for taken, _ in enumerate(itertools.chain(*(iter(first) for _ in range(3))), 1):
                if taken >= saved_after:
                    break
            state = first.save_state_rank() if saved_after else build(lib, texts, **case).save_state_rank()
            again = build(lib, texts, **case)
            again.restore_state_rank(state)
            seen.append(consume(again, "for", passes=1, take=20) if workers else consume(again, "cyclic", count=20))
            del first, again
        assert seen[1] == seen[0], f"rank {rank} of {W}"


def test_val_state_is_refused_on_another_topology(texts):
    state = build(den, texts, W=2, rank=0, workers=0, loader="get_savable_loader").save_state_rank()
    other = build(den, texts, W=3, rank=0, workers=0, loader="get_savable_loader")
    with pytest.raises(StateMismatchError, match="world_size: saved 2, now 3"):
        other.restore_state_rank(state)
    train = den.get_savable_loader(
        den.get_train_dataset(
            str(texts),
            worker_config=den.WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=2,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
    )
    with pytest.raises(StateMismatchError, match="val loader"):
        other.restore_state_rank(train.save_state_rank())
