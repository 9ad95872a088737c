"""The dataset-level API and the loader arguments through the facade, beside megatron.energon 7.4.1.

``get_dataset_from_config(...).build()`` wrapped in ``MapDataset`` / ``BatchDataset`` yields Energon's
items in Energon's order (a dataset read with ``training=False``), ``len`` counts as Energon's,
``sample_type=`` is checked as Energon checks it, and the loader's arguments are honoured
(``watchdog_timeout_seconds`` fires, ``cache_pool`` is the encoder's ``self.cache``) or refused.
"""

from __future__ import annotations

import gc
import time
import warnings
from unittest.mock import patch

import numpy as np
import pytest
import torch

from datareel import energon as den
from datareel.energon import dataset_config as den_config
from datareel.energon import savable_loader as _den_savable  # noqa: F401  (den.savable_loader)
from datareel.energon.wrappers.watchdog_dataset import WatchdogDataset
from datareel.errors import OptionError

me = pytest.importorskip("megatron.energon")
from megatron.energon import dataset_config as me_config  # noqa: E402
from megatron.energon import savable_loader as _me_savable  # noqa: E402,F401  (me.savable_loader)
from test_energon_api_types import captions  # noqa: E402,F401  (the prepared dataset fixture)


def _factory(lib, config, root, **kw):
    wc = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
    return config.get_dataset_from_config(str(root), split_part="train", worker_config=wc, **kw), wc


def _loader(lib, ds):
    return lib.get_loader(ds, watchdog_timeout_seconds=None) if lib is me else lib.get_loader(ds)


def _as_bytes(lib, wc):
    def fn(x):
        caption = torch.tensor(np.frombuffer(x.caption.encode(), dtype=np.uint8))
        return lib.CaptioningSample.derive_from(x, image=x.image, caption=caption)

    return fn


@pytest.mark.parametrize("batch_size", [None, 4, 40])
def test_built_dataset_map_and_batch_match_energon(captions, batch_size):  # noqa: F811
    def run(lib, config):
        factory, wc = _factory(lib, config, captions, training=False, sample_type=lib.CaptioningSample)
        ds = lib.MapDataset(factory.build(), _as_bytes(lib, wc), worker_config=wc)
        if batch_size is not None:
            ds = lib.BatchDataset(ds, batch_size=batch_size, batcher=lib.generic_batch, worker_config=wc)
        items = list(_loader(lib, ds))
        shapes = [tuple(x.image.shape) for x in items]
        return len(ds), type(items[0]).__name__, [x.__key__ for x in items], shapes

    assert run(den, den_config) == run(me, me_config)


def test_sample_type_is_checked_as_energon_checks_it(captions):  # noqa: F811
    for base in (den.CaptioningSample, den.Sample):
        _factory(den, den_config, captions, sample_type=base)
        den.get_train_dataset(
            str(captions), worker_config=den.WorkerConfig(rank=0, world_size=1, num_workers=0), batch_size=2,
            sample_type=base,
        )  # fmt: skip
    with pytest.raises(AssertionError):
        _factory(me, me_config, captions, sample_type=me.TextSample)
    with pytest.raises(OptionError, match="sample_type=TextSample does not match .* CaptioningSample"):
        _factory(den, den_config, captions, sample_type=den.TextSample)


class _Slow(den.DefaultTaskEncoder):
    def encode_sample(self, sample):
        if sample.__key__ == "c003" and not getattr(self, "slept", False):
            self.slept = True
            time.sleep(0.6)
        return sample


def test_watchdog_fires_on_a_slow_batch_and_not_when_off(captions):  # noqa: F811
    wc = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    for timeout, fired in ((0.3, True), (None, False)):
        ds = den.get_val_dataset(
            str(captions), split_part="train", worker_config=wc, batch_size=2, task_encoder=_Slow()
        )
        with patch.object(WatchdogDataset, "_watchdog_trigger") as trigger:
            assert len(list(den.get_loader(ds, watchdog_timeout_seconds=timeout, fail_on_timeout=False))) == 12
        assert trigger.called is fired
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        WatchdogDataset(ds, wc, timeout_seconds=3)._watchdog_trigger()
    assert "longer than 3 seconds" in str(caught[0].message)


class _Cached(den.DefaultTaskEncoder):
    def encode_sample(self, sample):
        return den.TextSample.derive_from(sample, text=f"{type(self.cache).__name__}")


def test_cache_pool_is_the_encoders_cache_and_unknown_arguments_are_refused(captions):  # noqa: F811
    wc = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = den.get_val_dataset(str(captions), split_part="train", worker_config=wc, batch_size=2, task_encoder=_Cached())

    class Pool:
        pass

    assert next(iter(den.get_savable_loader(ds, cache_pool=Pool()))).text == ["Pool", "Pool"]
    with pytest.raises(OptionError, match="does not know the arguments \\['speed'\\]"):
        den.get_loader(ds, speed=2)
    with pytest.raises(OptionError, match="watchdog_timeout_seconds=0"):
        den.get_loader(ds, watchdog_timeout_seconds=0)


def test_blend_and_mix_batch_datasets_make_elastic_loaders(captions):  # noqa: F811
    """Batch-granular blends have their own loader (tests/energon/test_batch_blend.py tests it in full)."""
    wc = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    a = den.get_train_dataset(str(captions), worker_config=wc, batch_size=2)
    blend = den.get_loader(den.BlendDataset((a, 1), (a, 2), worker_config=wc), watchdog_timeout_seconds=None)
    assert len(next(iter(blend)).__key__) == 2 and blend.save_state_rank()["unit"] == 1
    mixed = den.get_loader(den.MixBatchDataset((a, 1), (a, 2), batch_size=4, worker_config=wc))
    assert [len(b.__key__) for b in next(iter(mixed))] == [2, 2, 2, 2]


@pytest.mark.parametrize("freeze", [True, False, None])
def test_gc_freeze_at_start_freezes_the_heap_for_a_pass_as_energon_does(texts, freeze):
    """``gc_collect_every_n_steps`` with ``gc_freeze_at_start`` (Energon's default: True): what is alive when a
    pass starts is frozen for the pass (each collection then walks only what the pass made) and unfrozen after;
    False collects the whole heap each time.  Observed in the task encoder (main process, no workers) and after
    the loop, beside megatron.energon's own loader; a value that is not a bool is refused by name."""

    def observed(lib):
        seen = []

        class Frozen(lib.DefaultTaskEncoder):
            def encode_batch(self, batch):
                seen.append(gc.get_freeze_count() > 0)
                return batch

        wc = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = lib.get_train_dataset(
            str(texts), worker_config=wc, batch_size=4, shuffle_buffer_size=None, max_samples_per_sequence=None,
            task_encoder=Frozen(),
        )  # fmt: skip
        kw = {} if freeze is None else {"gc_freeze_at_start": freeze}
        gc.unfreeze()  # the session froze what the earlier tests left (tests/conftest.py)
        loader = lib.savable_loader.BasicDataLoader(ds, gc_collect_every_n_steps=2, watchdog_timeout_seconds=None, **kw)
        for _, _batch in zip(range(6), loader):
            pass
        gc.collect()  # the loop's generator closed: its `finally` ran
        return seen, gc.get_freeze_count() > 0

    theirs, ours = observed(me), observed(den)
    assert ours == theirs
    assert ours[0] == [freeze is not False] * 6 and ours[1] is False
    wc = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = den.get_train_dataset(
        str(texts), worker_config=wc, batch_size=4, shuffle_buffer_size=None, max_samples_per_sequence=None
    )
    with pytest.raises(OptionError, match=r"gc_freeze_at_start='yes' must be True or False"):
        den.get_loader(ds, gc_freeze_at_start="yes")


def test_a_pass_never_undoes_a_freeze_it_did_not_make(texts):
    """gc_freeze_at_start freezes only an unfrozen heap and unfreezes only its own freeze: a user's freeze
    outlives a pass, and a pass ending (a val pass) leaves the freeze of one still running (the train pass)."""

    def loader():
        wc = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = den.get_train_dataset(
            str(texts), worker_config=wc, batch_size=4, shuffle_buffer_size=None, max_samples_per_sequence=None
        )
        return den.savable_loader.BasicDataLoader(ds, gc_collect_every_n_steps=2, watchdog_timeout_seconds=None)

    gc.freeze()  # the user's
    for _, _batch in zip(range(4), loader()):
        pass
    gc.collect()
    assert gc.get_freeze_count() > 0
    gc.unfreeze()
    train = iter(loader())
    next(train)  # the train pass froze the heap
    for _, _batch in zip(range(4), loader()):  # a val pass in between: the heap was frozen, not its freeze
        pass
    gc.collect()
    assert gc.get_freeze_count() > 0  # the train pass's freeze holds
    next(train)
    del train
    gc.collect()
    assert gc.get_freeze_count() == 0  # the train pass's end undid its own freeze
