"""A lost worker through the Energon facade skips nothing and repeats nothing, on every facade loader.

A loop over a facade loader (``get_train_dataset`` / ``get_val_dataset`` through ``get_savable_loader``,
``RepeatDataset``, ``LimitDataset``) whose DataLoader worker dies (SIGKILL, SIGTERM, ``os._exit``, a crash,
or killed from outside by pid while it makes a batch) gets the error from ``next()``; the next ``for``
over the loader (or a new ``cyclic_iter`` over it, as Megatron's ``EnergonDataloader`` makes one) then
goes on with fresh workers.  What the loop sees, the error left out, is exactly what an uninterrupted
run sees: the same batches, each once, in the same passes.

The choice, where a pass fails: **a pass that failed is a pass left early**.  The next ``for`` yields
the rest of the interrupted pass, from the batch after the last one handed out (the batch that was
being made is made again), and the passes after it are those of the uninterrupted run: a virtual epoch
(``virtual_epoch_length``) still has its length, a ``LimitDataset`` / ``get_val_dataset(limit=)`` pass
its limit, a val pass every batch once.  It is what Energon's ``get_savable_loader`` does for a pass
left by ``break`` (tests/energon/test_energon_val_loops.py), so nothing about a failure is special to a
training loop: the counters (limits, virtual epochs, the datareel cursor, ``save_state_rank()``) count
only batches handed out.

Other failures of a ``next()`` follow the same rule: ``KeyboardInterrupt`` (or a signal handler that
raises) inside the making of a batch costs nothing either.  A :class:`~datareel.BatchError` (a batch
that fails in the making, a property of the batch) counts as consumed, as for datareel's own Loader:
the next ``for`` goes on after it, and it counts towards the pass's limit or virtual epoch.
"""

from __future__ import annotations

import gc
import itertools
import os
import signal
import time
from pathlib import Path

import pytest
import torch.utils.data

from datareel import energon as den
from hangs import Hung, must_return
from procs import die, wait_until_ended

BATCH = 7  # the val dataset's 90 samples: 13 batches per pass with one worker, 14 with two


class DiesAt(den.DefaultTaskEncoder):
    """Batches of sample keys; the DataLoader worker that reaches sample ``key`` the ``occurrence``-th time
    (counted in the file ``marker.seen``) waits for the file ``marker.go`` (the loop has received the
    batch before), writes its pid into ``marker`` and ends (``how``; ``"external"``: it waits to be
    killed from outside).  ``key=None``: never (the uninterrupted run)."""

    def __init__(self, marker: Path, key: str | None, how: str = "SIGKILL", occurrence: int = 1):
        super().__init__()
        self.marker, self.key, self.how, self.occurrence = str(marker), key, how, occurrence

    def encode_sample(self, sample):
        if sample.__key__ == self.key and torch.utils.data.get_worker_info() is not None:  # a DataLoader worker
            with open(self.marker + ".seen", "a") as seen:
                seen.write("x")
            if os.path.getsize(self.marker + ".seen") == self.occurrence:
                deadline = time.monotonic() + 30
                while not os.path.exists(self.marker + ".go") and time.monotonic() < deadline:
                    time.sleep(0.01)
                Path(self.marker).write_text(str(os.getpid()))
                die(self.how if self.how != "external" else "wait")  # "wait": sleeps until killed
        return sample

    def batch(self, samples):
        return [s.__key__ for s in samples]

    def encode_batch(self, batch):
        return batch


class GeneratorDiesAt(DiesAt):
    """:class:`DiesAt` as a generator ``encode_sample``: a val loader then reads in datareel's windowed stage
    (in datareel's order, through a datareel Loader), not in Energon's val order."""

    def encode_sample(self, sample):
        yield super().encode_sample(sample)


class FailsAt(DiesAt):
    """In the training process (no workers): at sample ``key``, once, raises ``KeyboardInterrupt``
    (``how="interrupt"``: not the batch's fault) or ``ValueError`` (``"error"``: a :class:`BatchError`)."""

    def encode_sample(self, sample):
        if sample.__key__ == self.key and not os.path.exists(self.marker):
            Path(self.marker).write_text("x")
            raise KeyboardInterrupt if self.how == "interrupt" else ValueError(f"bad sample {self.key}")
        return sample


def train_loader(root, encoder, *, workers, virtual=0):
    config = den.WorkerConfig(
        rank=0, world_size=1, num_workers=workers, global_error_handler=None
    )  # no handler: BatchError
    dataset = den.get_train_dataset(
        str(root),
        worker_config=config,
        batch_size=3,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        virtual_epoch_length=virtual,
        task_encoder=encoder,
    )
    return den.get_savable_loader(dataset)


def val_loader(root, encoder, *, workers, case):
    """``case``: "plain" (one pass, every batch), "limit" (``get_val_dataset(limit=4)``) or "megatron"
    (``LimitDataset(RepeatDataset(val), 5, reset_after_epoch=True)``, as Megatron builds its val loaders)."""
    config = den.WorkerConfig(
        rank=0, world_size=1, num_workers=workers, global_error_handler=None
    )  # no handler: BatchError
    dataset = den.get_val_dataset(
        str(root),
        split_part="train",
        worker_config=config,
        batch_size=BATCH,
        task_encoder=encoder,
        limit=4 if case == "limit" else None,
    )
    if case == "megatron":
        dataset = den.LimitDataset(
            den.RepeatDataset(dataset, worker_config=config), 5, reset_after_epoch=True, worker_config=config
        )
    return den.get_loader(dataset)


def cyclic_iter(loader):
    """Megatron's ``cyclic_iter`` (its EnergonDataloader reads val and train loaders through it), which
    spins for ever over a loader whose passes are empty: here two empty passes in a row end the test."""
    empty = 0
    while True:
        empty += 1
        for x in loader:
            empty = 0
            yield x
        if empty >= 2:
            raise Hung("two passes in a row yielded nothing: Megatron's cyclic_iter would spin for ever")


class Loop:
    """Consumes a loader as a training or evaluation loop does: ``pattern`` "for" (``passes`` loops, each
    left after ``take`` batches if given) or "cyclic" (``count`` batches of a ``cyclic_iter``). After a
    failing ``next()`` it starts again as a user does (the next ``for``, a new ``cyclic_iter``), and a pass
    that failed goes on in that ``for`` (one pass in :attr:`passes`).  ``step(n)`` runs after ``n``
    batches were handed out (the training step)."""

    def __init__(self, loader, *, step=None, saves=False):
        self.loader, self.step, self.saves = loader, step or (lambda n: None), saves
        self.passes: list[list] = []
        self.failures: list[tuple] = []  # (where: "next" | "step", batches handed out, exception type)
        self.states: list = [loader.save_state_rank()] if saves else []  # after 0, 1, 2, ... batches
        self.at_failure: list = []  # save_state_rank() right after each failure

    @property
    def handed(self) -> int:
        return sum(len(p) for p in self.passes)

    def _took(self, got, batch) -> bool:
        got.append(batch)
        if self.saves:
            self.states.append(self.loader.save_state_rank())
        try:
            self.step(self.handed)
        except Exception as exc:  # raised in the step: the batch was handed out, the step lost it
            self.failures.append(("step", self.handed, type(exc).__name__))
            return False
        return True

    def _failed(self, exc) -> bool:
        self.failures.append(("next", self.handed, type(exc).__name__))
        if self.saves:
            self.at_failure.append(self.loader.save_state_rank())
        return len(self.failures) < 3  # a loader that fails for ever fails the test, never hangs it

    def run(self, pattern, *, passes=3, take=None, count=None, catch=(Exception,)):
        with must_return(60):
            if pattern == "cyclic":
                got: list = []
                self.passes.append(got)
                while len(got) < count:
                    try:
                        for batch in cyclic_iter(self.loader):
                            if not self._took(got, batch) or len(got) >= count:
                                break
                    except catch as exc:
                        if not self._failed(exc):
                            break
            else:
                for _ in range(passes):
                    got = []
                    self.passes.append(got)
                    while True:
                        try:
                            for batch in self.loader:
                                if not self._took(got, batch) or (take is not None and len(got) >= take):
                                    break
                        except catch as exc:
                            if self._failed(exc):
                                continue  # the next `for` goes on with the pass that failed
                        break
        self.loader.close()
        del self.loader
        gc.collect()  # the broken iterators' workers stop here, not inside a later test
        return self


def kills_at(marker: Path, n: int, how: str):
    """The training step after batch ``n``: lets the worker making the next batch die (or kills it, for
    ``how="external"``) and waits, busy in Python, until it has ended."""

    def step(handed):
        if handed != n or os.path.exists(str(marker) + ".go"):
            return
        Path(str(marker) + ".go").touch()
        deadline = time.monotonic() + 30
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline, "the worker never reached the sample"
            time.sleep(0.01)
        pid = int(marker.read_text())
        if how == "external":
            os.kill(pid, signal.SIGKILL)
        wait_until_ended(pid)

    return step


def first_key(passes, n):
    """The first sample key of batch ``n`` (counting every batch of every pass)."""
    return list(itertools.chain.from_iterable(passes))[n][0]


def without(passes, n):
    """``passes`` with batch ``n`` (counting every batch of every pass) left out."""
    out, seen = [], 0
    for p in passes:
        out.append([b for i, b in enumerate(p, seen) if i != n])
        seen += len(p)
    return out


# -- worker processes killed (real processes) -----------------------------------------------------------

TRAIN = [  # (virtual_epoch_length, pattern, consume arguments, the batch whose making the death interrupts)
    pytest.param(5, "for", dict(passes=4), 7, id="virtual5-for"),  # the 3rd batch of the 2nd virtual epoch
    pytest.param(5, "cyclic", dict(count=14), 7, id="virtual5-cyclic"),
    pytest.param(0, "for", dict(passes=4, take=4), 6, id="plain-for-take4"),  # an endless pass left early
    pytest.param(0, "cyclic", dict(count=12), 6, id="plain-cyclic"),
]


@pytest.mark.workers
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("virtual,pattern,consume,dies", TRAIN)
def test_a_train_worker_killed_costs_no_batch(texts, tmp_path, workers, virtual, pattern, consume, dies):
    """get_train_dataset + get_savable_loader, with and without virtual epochs: the error comes from
    ``next()``, the batches of the following ``for`` loops complete the run's, and ``save_state_rank()``
    after the failure is the uninterrupted run's after as many batches."""
    reference = Loop(
        train_loader(texts, DiesAt(tmp_path / "never", None), workers=workers, virtual=virtual), saves=True
    )
    reference.run(pattern, **consume)
    marker = tmp_path / "died"
    encoder = DiesAt(marker, first_key(reference.passes, dies))
    loop = Loop(
        train_loader(texts, encoder, workers=workers, virtual=virtual),
        step=kills_at(marker, dies, "SIGKILL"),
        saves=True,
    )
    loop.run(pattern, **consume)
    assert loop.failures == [("next", dies, "RuntimeError")]  # from next(), never in the step
    assert loop.at_failure == [reference.states[dies]]  # the cursor counts only batches handed out
    assert loop.passes == reference.passes  # none skipped, none repeated, the same passes
    assert loop.states == reference.states


VAL = [  # (case, pattern, consume arguments, the batch whose making the death interrupts)
    pytest.param("plain", "for", dict(passes=3), 5, id="plain-for"),
    pytest.param("plain", "cyclic", dict(count=33), 5, id="plain-cyclic"),
    pytest.param("limit", "for", dict(passes=3), 2, id="limit4-for"),
    pytest.param("limit", "cyclic", dict(count=10), 2, id="limit4-cyclic"),
    pytest.param("megatron", "for", dict(passes=3), 3, id="megatron-for"),
    pytest.param("megatron", "cyclic", dict(count=12), 3, id="megatron-cyclic"),
]


@pytest.mark.workers
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("case,pattern,consume,dies", VAL)
def test_a_val_worker_killed_costs_no_batch(texts, tmp_path, workers, case, pattern, consume, dies):
    """get_val_dataset (Energon's val order, its own DataLoader), with and without limits: the pass that
    failed goes on in the next ``for`` with the batch being made, and every later pass is the
    uninterrupted run's."""
    reference = Loop(val_loader(texts, DiesAt(tmp_path / "never", None), workers=workers, case=case))
    reference.run(pattern, **consume)
    marker = tmp_path / "died"
    loop = Loop(
        val_loader(texts, DiesAt(marker, first_key(reference.passes, dies)), workers=workers, case=case),
        step=kills_at(marker, dies, "SIGKILL"),
    )
    loop.run(pattern, **consume)
    assert loop.failures == [("next", dies, "RuntimeError")]
    assert loop.passes == reference.passes


@pytest.mark.workers
@pytest.mark.parametrize("how", ["SIGTERM", "os._exit", "segfault", "external"])
@pytest.mark.parametrize("kind", ["train", "val"])
def test_every_way_a_worker_ends_costs_no_batch(texts, tmp_path, kind, how):
    """The worker ends by SIGTERM, ``os._exit``, a crash, or a SIGKILL from outside while it makes a batch;
    the val worker in the second pass, when the persistent workers were reused."""
    if kind == "train":
        build, consume, dies = (lambda enc: train_loader(texts, enc, workers=2, virtual=5)), dict(passes=4), 7
    else:
        build, consume, dies = (lambda enc: val_loader(texts, enc, workers=2, case="plain")), dict(passes=3), 17
    reference = Loop(build(DiesAt(tmp_path / "never", None))).run("for", **consume)
    marker = tmp_path / "died"
    occurrence = 2 if kind == "val" else 1  # each val pass reads the sample again
    encoder = DiesAt(marker, first_key(reference.passes, dies), how, occurrence=occurrence)
    loop = Loop(build(encoder), step=kills_at(marker, dies, how)).run("for", **consume)
    assert loop.failures == [("next", dies, "RuntimeError")]
    assert loop.passes == reference.passes


@pytest.mark.workers
@pytest.mark.parametrize("case,dies", [("plain", 5), ("limit", 2)])
def test_a_val_worker_killed_in_datareels_order_costs_no_batch(texts, tmp_path, case, dies):
    """A val loader that cannot keep Energon's val order (a generator ``encode_sample``) reads through a
    datareel Loader: the same rule."""
    build = lambda enc: val_loader(texts, enc, workers=2, case=case)  # noqa: E731
    reference = Loop(build(GeneratorDiesAt(tmp_path / "never", None))).run("for", passes=3)
    marker = tmp_path / "died"
    loop = Loop(
        build(GeneratorDiesAt(marker, first_key(reference.passes, dies))), step=kills_at(marker, dies, "SIGKILL")
    )
    loop.run("for", passes=3)
    assert loop.failures == [("next", dies, "RuntimeError")]
    assert loop.passes == reference.passes


def kills_a_persistent_worker(loader, n: int):
    """The step after batch ``n``: SIGKILLs a worker of the loader's persistent DataLoader."""

    def step(handed):
        if handed == n:
            dataloader = loader.loader._driver.dataloader if loader.loader is not None else loader._val._dataloader
            victim = dataloader._iterator._workers[0].pid
            os.kill(victim, signal.SIGKILL)
            wait_until_ended(victim)

    return step


@pytest.mark.workers
@pytest.mark.parametrize("kind", ["train", "val"])
def test_a_persistent_worker_killed_at_the_end_of_a_pass_costs_no_batch(texts, tmp_path, kind):
    """Killed from outside after a pass's last batch: a train loader's iteration goes on across virtual
    epochs, so its next ``next()`` reports the death; a val pass had ended, so the next pass starts fresh
    workers instead of failing on the dead one (as datareel's Loader replaces a persistent DataLoader)."""
    keys = DiesAt(tmp_path / "never", None)
    if kind == "train":
        build, consume, at, failures = (lambda: train_loader(texts, keys, workers=2, virtual=5)), 4, 5, [5]
    else:
        build, consume, at, failures = (lambda: val_loader(texts, keys, workers=2, case="plain")), 3, 14, []
    reference = Loop(build()).run("for", passes=consume)
    loader = build()
    loop = Loop(loader, step=kills_a_persistent_worker(loader, at))
    del loader
    loop.run("for", passes=consume)
    assert loop.failures == [("next", n, "RuntimeError") for n in failures]
    assert loop.passes == reference.passes


# -- failures in the training process (no workers: fast) --------------------------------------------------


@pytest.mark.parametrize("how", ["interrupt", "error"])
@pytest.mark.parametrize(
    "kind,consume,fails",
    [
        pytest.param(("train", 5), dict(passes=4), 7, id="train-virtual5"),
        pytest.param(("train", 0), dict(passes=3, take=4), 6, id="train-plain-take4"),
        pytest.param(("val", "plain"), dict(passes=3), 5, id="val-plain"),
        pytest.param(("val", "limit"), dict(passes=3), 2, id="val-limit4"),
        pytest.param(("val", "megatron"), dict(passes=3), 3, id="val-megatron"),
    ],
)
def test_a_next_that_fails_in_the_training_process_costs_no_batch(texts, tmp_path, kind, consume, fails, how):
    """``KeyboardInterrupt`` inside the making of a batch: the next ``for`` makes that batch again.  A
    :class:`~datareel.BatchError` counts as consumed: the next ``for`` goes on after it, and it counts
    towards the pass (the passes are the uninterrupted run's with that batch left out)."""
    if kind[0] == "train":
        build = lambda enc: train_loader(texts, enc, workers=0, virtual=kind[1])  # noqa: E731
    else:
        build = lambda enc: val_loader(texts, enc, workers=0, case=kind[1])  # noqa: E731
    saves = kind[0] == "train"
    reference = Loop(build(FailsAt(tmp_path / "never", None)), saves=saves).run("for", **consume)
    encoder = FailsAt(tmp_path / "failed", first_key(reference.passes, fails), how)
    loop = Loop(build(encoder), saves=saves).run("for", **consume, catch=(Exception, KeyboardInterrupt))
    if how == "interrupt":
        assert loop.failures == [("next", fails, "KeyboardInterrupt")]
        assert loop.passes == reference.passes
        assert loop.at_failure == (reference.states[fails : fails + 1] if saves else [])
    else:
        assert loop.failures == [("next", fails, "BatchError")]
        if "take" in consume:  # passes the loop ends (`break`): the same batches, the failed one left out
            flat = list(itertools.chain.from_iterable(loop.passes))
            assert flat[:-1] == list(itertools.chain.from_iterable(without(reference.passes, fails)))
        else:
            assert loop.passes == without(reference.passes, fails)
        assert loop.at_failure == (reference.states[fails + 1 : fails + 2] if saves else [])


def test_the_facade_error_says_where_the_loop_goes_on(texts, tmp_path):
    """A failed ``next()`` of a val pass says that the next ``for`` continues the pass (Python 3.11+ notes)."""
    encoder = FailsAt(tmp_path / "failed", "t0-014", "interrupt")  # the 3rd batch of the val pass
    loader = val_loader(texts, encoder, workers=0, case="plain")
    got = []
    with pytest.raises(KeyboardInterrupt) as info:
        for batch in loader:
            got.append(batch)
    notes = " ".join(getattr(info.value, "__notes__", []))
    if hasattr(info.value, "add_note"):
        assert "the next `for` over the loader continues this pass after the 2 batches handed out" in notes, notes
    del info
    got += list(loader)
    assert len(got) == 13 and len({k for b in got for k in b}) == 90


class FailsAtOccurrence(FailsAt):
    """:class:`FailsAt` at the ``occurrence``-th time sample ``key`` is encoded (counted in ``marker.seen``)."""

    def encode_sample(self, sample):
        if sample.__key__ == self.key and not os.path.exists(self.marker):
            with open(self.marker + ".seen", "a") as seen:
                seen.write("x")
            if os.path.getsize(self.marker + ".seen") == self.occurrence:
                Path(self.marker).write_text("x")
                raise KeyboardInterrupt if self.how == "interrupt" else ValueError(f"bad sample {self.key}")
        return sample


AFTER_PARTIAL = 13  # one stream: the first batch of the val pass's second repetition, right after the first
# repetition's partial last batch (90 samples in batches of 7: 12 full, then 6)


def repeated_val_loader(root, encoder, *, workers):
    """A val loader whose pass is the val data twice (``RepeatDataset(val, repeats=2)``)."""
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=workers, global_error_handler=None)
    dataset = den.get_val_dataset(
        str(root), split_part="train", worker_config=config, batch_size=BATCH, task_encoder=encoder
    )
    return den.get_loader(den.RepeatDataset(dataset, repeats=2, worker_config=config))


@pytest.mark.parametrize("how", ["interrupt", "error", pytest.param("SIGKILL", marks=pytest.mark.workers)])
def test_a_val_pass_that_fails_right_after_a_partial_last_batch_goes_on_where_it_failed(texts, tmp_path, how):
    """The wrapped stream has started its next repetition when the batch after a partial last batch fails: the
    next ``for`` makes that batch again (or, for a BatchError, goes on after it), not a repetition more or less."""
    workers = 1 if how == "SIGKILL" else 0
    reference = Loop(repeated_val_loader(texts, DiesAt(tmp_path / "never", None), workers=workers))
    reference.run("for", passes=2)
    assert [len(p) for p in reference.passes] == [26, 26]
    key = first_key(reference.passes, AFTER_PARTIAL)  # also the first key of batch 0
    marker = tmp_path / "failed"
    if how == "SIGKILL":
        loader = repeated_val_loader(texts, DiesAt(marker, key, occurrence=2), workers=1)
        loop = Loop(loader, step=kills_at(marker, AFTER_PARTIAL, how))
    else:
        loop = Loop(repeated_val_loader(texts, FailsAtOccurrence(marker, key, how, occurrence=2), workers=0))
    loop.run("for", passes=2, catch=(Exception, KeyboardInterrupt))
    failed = {"interrupt": "KeyboardInterrupt", "error": "BatchError", "SIGKILL": "RuntimeError"}[how]
    assert loop.failures == [("next", AFTER_PARTIAL, failed)]
    assert loop.passes == (without(reference.passes, AFTER_PARTIAL) if how == "error" else reference.passes)
