"""A failing ``batch`` / ``encode_batch`` drops its batch and the loader goes on, beside megatron.energon 7.4.1.

Energon's ``BatchDataset`` makes a batch in an error context: ``SkipSample`` drops it silently, another failure
is told to the error handler (by default the worker config's, which logs it) and drops it, a handler that raises
stops the loader, and too many failures in a row are raised.  Each case runs both libraries on the same
prepared dataset (train with ``repeat=False`` and val, in one process) and compares what a pass leaves out.
"""

from __future__ import annotations

import pytest

from datareel import energon as den
from datareel.errors import OptionError
from energon_text import prepare_text

me = pytest.importorskip("megatron.energon")

BAD = "t00008"
N = 37


class _Keys:
    def batch(self, samples):
        if getattr(self, "skip", False) and any(s.__key__ == BAD for s in samples):
            raise self.raised()
        return [s.__key__ for s in samples]

    def encode_batch(self, keys):
        if getattr(self, "late", False) and BAD in keys:
            raise self.raised()
        return keys


def _encoder(lib, raised, late=False):
    cls = type("Keys", (_Keys, lib.DefaultTaskEncoder), {})
    encoder = cls()
    encoder.skip, encoder.late, encoder.raised = not late, late, raised
    return encoder


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch_failures") / "text"
    prepare_text(root, "t", N, 10)
    return root


def _pass(lib, root, encoder, val, handler=None):
    extra = {} if handler is None else {"global_error_handler": handler}
    config = lib.WorkerConfig(rank=0, world_size=1, num_workers=0, **extra)
    if val:
        dataset = lib.get_val_dataset(
            root, split_part="train", worker_config=config, batch_size=4, task_encoder=encoder
        )
    else:
        dataset = lib.get_train_dataset(
            root,
            worker_config=config,
            batch_size=4,
            task_encoder=encoder,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            repeat=False,
        )
    return list(lib.get_loader(dataset, watchdog_timeout_seconds=None))


@pytest.mark.parametrize("val", [False, True], ids=["train", "val"])
@pytest.mark.parametrize("late", [False, True], ids=["batch", "encode_batch"])
@pytest.mark.parametrize("raised", [lambda: ValueError("bad batch"), "skip"], ids=["error", "SkipSample"])
def test_a_failing_batch_is_left_out_and_the_pass_goes_on_as_in_energon(text, val, late, raised):
    for lib in (me, den):
        error = (lambda lib=lib: lib.SkipSample()) if raised == "skip" else raised
        batches = _pass(lib, text, _encoder(lib, error, late), val)
        keys = [key for batch in batches for key in batch]
        assert BAD not in keys and len(keys) == len(set(keys)), lib.__name__
        assert 0 < N - len(keys) <= 4 and len(batches) == -(-N // 4) - 1, lib.__name__  # one batch left out


def test_a_handler_that_raises_stops_both(text):
    def handler(exc, sample, sources=None):
        raise RuntimeError("stop here") from exc

    for lib in (me, den):
        with pytest.raises(RuntimeError, match="stop here"):
            _pass(lib, text, _encoder(lib, lambda: ValueError("bad")), False, handler=handler)


def test_the_handler_is_told_of_the_failed_batch(text):
    told = []
    _pass(den, text, _encoder(den, lambda: ValueError("bad")), False, handler=lambda e, s, src=None: told.append(e))
    assert [str(e) for e in told] == ["bad"]


def test_batches_that_fail_in_a_row_are_raised_after_the_tolerance(text):
    from datareel.energon.batch_failures import TOLERANCE

    class Always(den.DefaultTaskEncoder):
        def batch(self, samples):
            raise ValueError("always")

    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=lambda e, s, src=None: None)
    dataset = den.get_train_dataset(
        text, worker_config=config, batch_size=1, task_encoder=Always(), shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )  # fmt: skip
    with pytest.raises(Exception, match="always") as raised:
        next(iter(den.get_loader(dataset, watchdog_timeout_seconds=None)))
    assert "always" in str(raised.value) and TOLERANCE == 100


@pytest.mark.workers
def test_a_failing_batch_is_left_out_in_worker_processes(text):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=2)
    dataset = den.get_train_dataset(
        text, worker_config=config, batch_size=4, task_encoder=_encoder(den, lambda: ValueError("bad")),
        shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=False,
    )  # fmt: skip
    keys = [key for batch in den.get_loader(dataset, watchdog_timeout_seconds=None) for key in batch]
    assert BAD not in keys and len(keys) == len(set(keys)) and 0 < N - len(keys) <= 4


class _FailsTheSecondTime(den.DefaultTaskEncoder):
    """Makes each batch once; making one again raises (in the training process: no workers)."""

    def __init__(self):
        super().__init__()
        self.made = set()

    def batch(self, samples):
        keys = tuple(s.__key__ for s in samples)
        if keys in self.made:
            raise ValueError("made again")
        self.made.add(keys)
        return samples[0]  # a typed batch of one: its restore key is stamped on it


def test_restore_sample_of_a_batch_that_now_fails_raises_its_error(text):
    dataset = den.get_train_dataset(
        text, worker_config=_config_of(den), batch_size=2, task_encoder=_FailsTheSecondTime(),
        shuffle_buffer_size=None, max_samples_per_sequence=None,
    )  # fmt: skip
    loader = den.get_savable_loader(dataset, watchdog_timeout_seconds=None)
    batch = next(iter(loader))
    with pytest.raises(ValueError, match="made again"):
        loader.restore_sample(batch.__restore_key__)


def _config_of(lib):
    return lib.WorkerConfig(rank=0, world_size=1, num_workers=0)


class _ReseededBatch(me.DefaultTaskEncoder):
    """megatron.energon's own encoder: a ``batch`` under its ``@stateless(restore_seeds=True)``."""

    @me.stateless(restore_seeds=True)
    def batch(self, samples):
        import random

        return [(s.__key__, random.randint(0, 10**9)) for s in samples]


class _GeneratorBatch(den.DefaultTaskEncoder):
    def batch(self, samples):
        yield samples


def _train(encoder, root):
    return den.get_train_dataset(
        root, worker_config=_config_of(den), batch_size=4, task_encoder=encoder,
        shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=False,
    )  # fmt: skip


def test_a_hook_under_energons_restore_seeds_is_read_as_the_loader_reads_it(text):
    """The wrapped hook is unwrapped and reseeded by datareel, not run through Energon's seed wrapper (which
    needs Energon's worker state and would fail every batch); a generator batch is still refused."""
    runs = [list(den.get_loader(_train(_ReseededBatch(), text), watchdog_timeout_seconds=None)) for _ in range(2)]
    keys = [key for batch in runs[0] for key, _ in batch]
    assert sorted(keys) == [f"t{i:05d}" for i in range(N)] and runs[0] == runs[1]
    with pytest.raises(OptionError, match="generator"):
        den.get_loader(_train(_GeneratorBatch(), text), watchdog_timeout_seconds=None)
