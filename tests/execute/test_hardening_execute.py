"""Execution options and a dead worker (issue 12, first part): timeout and prefetch_factor are checked;
after a worker dies a fresh iterator continues the same stream. (Split by layer from test_hardening.py.)"""

from __future__ import annotations

import gc
import os

import pytest

import datareel
from datareel.energon import WorkerConfig, get_savable_loader, get_train_dataset
from datareel.errors import OptionError


def test_timeout_and_prefetch_factor_are_checked():
    with pytest.raises(OptionError, match=r"timeout=-1 must be a number of seconds >= 0"):
        datareel.Loader(range(10), global_batch_size=2, micro_batch_size=2, timeout=-1)
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    spec = get_train_dataset(datareel.from_sequence(range(4)), worker_config=config, batch_size=2)
    with pytest.raises(OptionError, match=r"get_savable_loader\(prefetch_factor=0\) must be a positive integer"):
        get_savable_loader(spec, prefetch_factor=0)


# -- a dead worker -------------------------------------------------------------------------------------


class DiesOnce:
    """An encoder whose worker process dies (os._exit, as the OOM killer would) at one sample, once."""

    def __init__(self, marker, at):
        self.marker, self.at = str(marker), at

    def encode_sample(self, sample):

        if sample == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(9)
        return sample


@pytest.mark.workers
@pytest.mark.parametrize("persistent", [True, False])
def test_after_a_worker_dies_a_fresh_iterator_continues_the_same_stream(tmp_path, persistent):
    data = datareel.from_sequence(list(range(40)))
    options = dict(global_batch_size=4, micro_batch_size=2, seed=5)
    reference = [b.tolist() for _, b in zip(range(12), datareel.Loader(data, **options))]
    loader = datareel.Loader(
        data,
        **options,
        num_workers=2,
        persistent_workers=persistent,
        task_encoder=DiesOnce(tmp_path / "died", at=reference[6][0]),
    )
    got = []
    it = iter(loader)
    with pytest.raises(Exception) as info:  # torch's RuntimeError, or an EOFError from the dead worker's queue
        while len(got) < 12:
            got.append(next(it).tolist())
    notes = getattr(info.value, "__notes__", [])
    assert any("call iter(loader) again to continue from cursor" in note for note in notes), info.value
    del info  # its traceback holds the broken DataLoader iterator
    with pytest.raises(datareel.DatareelError, match=r"call iter\(loader\) again"):
        next(it)  # the broken iterator says what to do
    it = iter(loader)  # fresh workers
    while len(got) < 12:
        got.append(next(it).tolist())
    assert got == reference  # nothing lost, nothing repeated
    loader.close()
    del it
    gc.collect()  # worker processes stop here, not inside a later test
