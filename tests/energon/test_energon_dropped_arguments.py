"""Arguments the facade took and never read (``@stateless(failure_tolerance=)``, the wrappers' ``worker_config=``),
beside megatron.energon 7.4.1: what Energon honours or refuses, the facade honours or refuses by name.

- ``failure_tolerance``: Energon counts consecutive handled failures of a hook per worker process and stops
  with a ``FatalSampleError`` at the tolerance; datareel keeps no such count (it would depend on the number of
  workers), so a hook marked with one (datareel's ``stateless`` or megatron.energon's), an encoder class whose
  ``__default_failure_tolerance__`` is not 100, and ``MapDataset`` / ``BatchDataset(failure_tolerance=)`` other
  than 100 are refused where the dataset is made, naming the hook and the fix.
- ``worker_config`` on ``LimitDataset`` / ``RepeatDataset`` (and ``MapDataset`` / ``BatchDataset``): Energon
  refuses one that is not the dataset's (another rank, world size or worker count); the facade does too, by name,
  and takes an equal one (its own or megatron.energon's).
"""

from __future__ import annotations

import warnings

import pytest

from datareel import OptionError
from datareel import energon as den

me = pytest.importorskip("megatron.energon")


def encoder_class(lib, *, stateless_lib=None, tolerance=None, default=None, fails=False, restore_seeds=False):
    """A task encoder of ``lib`` whose ``encode_sample`` is marked by ``stateless_lib.stateless`` (with
    ``failure_tolerance=tolerance`` when given); ``default``: its ``__default_failure_tolerance__``."""
    marker = (stateless_lib if stateless_lib is not None and stateless_lib is not False else lib).stateless
    mark = marker(failure_tolerance=tolerance) if tolerance is not None else marker
    if restore_seeds:
        mark = marker(restore_seeds=True)
    elif stateless_lib is False:
        mark = lambda fn: fn  # noqa: E731 - not marked

    class Keys(lib.DefaultTaskEncoder):
        @mark
        def encode_sample(self, sample):
            if fails:
                raise ValueError(f"bad sample {sample.__key__}")
            return sample

        def batch(self, samples):
            return [s.__key__ for s in samples]

        def encode_batch(self, batch):
            return batch

    if default is not None:
        Keys.__default_failure_tolerance__ = default
    return Keys


def train(lib, root, encoder, config=None):
    config = config or lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lib.get_train_dataset(
            str(root),
            worker_config=config,
            batch_size=2,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=encoder,
        )


def test_energon_honours_failure_tolerance(texts):
    """The reference: a hook failing on every sample stops Energon's loader after ``failure_tolerance`` failures in
    a row (its default handler logs each), so the argument has a meaning the facade must not drop."""
    encoder = encoder_class(me, tolerance=3, fails=True)()
    with pytest.raises(Exception) as info:
        next(iter(me.get_loader(train(me, texts, encoder))))
    assert type(info.value).__name__ == "FatalSampleError"


@pytest.mark.parametrize("lib", [den, me], ids=["facade-encoder", "megatron-encoder"])
@pytest.mark.parametrize("tolerance", [0, 3, 100])
def test_a_hook_marked_with_a_failure_tolerance_is_refused_by_name(texts, lib, tolerance):
    encoder = encoder_class(lib, tolerance=tolerance)()
    for build in (
        lambda: train(den, texts, encoder),
        lambda: den.get_val_dataset(
            str(texts),
            split_part="train",
            worker_config=den.WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=2,
            task_encoder=encoder,
        ),
    ):
        with pytest.raises(OptionError) as info:
            build()
        message = str(info.value)
        assert f"encode_sample (@stateless(failure_tolerance={tolerance}))" in message, message
        assert "does not count consecutive failures" in message and "Remove failure_tolerance" in message


@pytest.mark.parametrize("lib", [den, me], ids=["facade-encoder", "megatron-encoder"])
def test_a_default_failure_tolerance_other_than_energons_is_refused(texts, lib):
    with pytest.raises(OptionError, match=r"__default_failure_tolerance__ = 5"):
        train(den, texts, encoder_class(lib, default=5)())
    assert train(den, texts, encoder_class(lib, default=100)()) is not None  # Energon's own default: nothing asked


@pytest.mark.parametrize("lib", [den, me], ids=["facade-encoder", "megatron-encoder"])
def test_stateless_without_a_tolerance_still_loads(texts, lib):
    """Plain ``@stateless`` and ``restore_seeds=True`` (megatron.energon 7.4.1 keeps no tolerance on its seed
    wrapper): the same batches as an unmarked encoder."""
    plain = [b for _, b in zip(range(5), den.get_loader(train(den, texts, encoder_class(lib, stateless_lib=False)())))]
    for marked in (encoder_class(lib)(), encoder_class(lib, restore_seeds=True)()):
        assert [b for _, b in zip(range(5), den.get_loader(train(den, texts, marked)))] == plain


@pytest.mark.parametrize("wrapper", ["MapDataset", "BatchDataset"])
def test_a_wrappers_failure_tolerance_other_than_100_is_refused(texts, wrapper):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    base = train(den, texts, None, config)
    if wrapper == "BatchDataset":
        base = den.get_train_dataset(
            str(texts), worker_config=config, batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None
        )

    def wrap(**kw):
        if wrapper == "MapDataset":
            return den.MapDataset(base, lambda x: x, worker_config=config, **kw)
        return den.BatchDataset(base, 2, lambda items: [i.__key__ for i in items], worker_config=config, **kw)

    with pytest.raises(OptionError, match=rf"{wrapper}: failure_tolerance=7 asks for a count"):
        wrap(failure_tolerance=7)
    assert wrap(failure_tolerance=100) is not None and wrap() is not None


OTHERS = [  # a wrapper's worker_config that sits elsewhere than the dataset's (rank 0 of 1, no workers)
    dict(rank=0, world_size=1, num_workers=2),
    dict(rank=1, world_size=2, num_workers=0),
    dict(rank=0, world_size=2, num_workers=0),
]


def val(lib, root, config):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lib.get_val_dataset(
            str(root), split_part="train", worker_config=config, batch_size=7, task_encoder=encoder_class(lib)()
        )


def wrapped(lib, dataset, wrapper, config):
    if wrapper == "LimitDataset":
        return lib.LimitDataset(dataset, 4, worker_config=config)
    return lib.RepeatDataset(dataset, worker_config=config)


@pytest.mark.parametrize("wrapper", ["LimitDataset", "RepeatDataset"])
@pytest.mark.parametrize("other", OTHERS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_a_wrappers_worker_config_must_be_the_datasets_as_in_energon(texts, wrapper, other):
    own = dict(rank=0, world_size=1, num_workers=0)
    with pytest.raises(AssertionError, match="worker configs must match"):  # the reference refuses it
        wrapped(me, val(me, texts, me.WorkerConfig(**own)), wrapper, me.WorkerConfig(**other))
    dataset = val(den, texts, den.WorkerConfig(**own))
    for given in (den.WorkerConfig(**other), me.WorkerConfig(**other)):
        with pytest.raises(OptionError) as info:
            wrapped(den, dataset, wrapper, given)
        message = str(info.value)
        assert message.startswith(f"{wrapper}: worker_config=WorkerConfig(rank={other['rank']}, ") and (
            "is not the dataset's WorkerConfig (WorkerConfig(rank=0, world_size=1, num_workers=0)" in message
        ), message
        assert "pass the same worker_config" in message


@pytest.mark.parametrize("wrapper", ["LimitDataset", "RepeatDataset"])
def test_a_wrapper_with_the_datasets_worker_config_reads_as_energons(texts, wrapper):
    """An equal config (the same object, an equal facade config, megatron.energon's) or none: accepted, and the
    batches of a pass are Energon's."""
    own = dict(rank=0, world_size=1, num_workers=0)
    theirs = wrapped(me, val(me, texts, me.WorkerConfig(**own)), wrapper, me.WorkerConfig(**own))
    expected = [b for _, b in zip(range(20), me.get_loader(theirs))]
    config = den.WorkerConfig(**own)
    dataset = val(den, texts, config)
    for given in (config, den.WorkerConfig(**own), me.WorkerConfig(**own), None):
        got = [b for _, b in zip(range(20), den.get_loader(wrapped(den, dataset, wrapper, given)))]
        assert got == expected


@pytest.mark.parametrize("lib", [den, me], ids=["facade-cooker", "megatron-cooker"])
def test_a_cooker_marked_with_a_failure_tolerance_is_refused_by_name(texts, lib):
    """Energon counts a cooker's failures too (its ``cook`` function's tolerance)."""

    def cook(sample):
        return sample

    class Cooks(lib.DefaultTaskEncoder):
        cookers = [lib.Cooker(lib.stateless(failure_tolerance=2)(cook))]

    with pytest.raises(OptionError, match=r"cooker 'cook' \(failure_tolerance=2\)"):
        train(den, texts, Cooks())
