"""A val loader's worker lost however torch sees it (issue 36 item 2, in the facade's own val loop).

``get_val_dataset`` keeps Energon's val order in its own DataLoader (:mod:`datareel.energon.val`), which now
starts its iterator through :func:`datareel.execute.workers.start_iterator`, as datareel's Loader does.  A
worker SIGKILLed while it makes a batch of tensors (the batches it sent before are still in the result pipe:
their memory crosses through a socket to the dead worker), or while ``for`` starts the pass's workers: the
loop's ``next()`` raises a ``RuntimeError`` that names the lost worker (never a bare
``ConnectionResetError`` / ``EOFError``, and never from ``iter()``), nothing is left in the temp dir, and the
next ``for`` completes the pass, each pass then the undisturbed run's.
"""

from __future__ import annotations

import gc
import multiprocessing.util
import os
import re
import signal
import tempfile
import time
from pathlib import Path

import pytest
import torch

from datareel import energon as den
from datareel.energon import val as val_module
from hangs import must_return

pytestmark = pytest.mark.workers

BATCH = 7


def number(key: str) -> int:
    shard, index = key[1:].split("-")
    return int(shard) * 100 + int(index)


class Tensors(den.DefaultTaskEncoder):
    """Batches of tensors (the sample numbers, and a larger block that goes through shared memory); the worker
    that reaches sample ``key`` first (marker file ``<directory>/died``) kills itself there."""

    def __init__(self, directory: Path, key: str | None):
        super().__init__()
        self.directory, self.key = str(directory), key

    def encode_sample(self, sample):
        if sample.__key__ == self.key and torch.utils.data.get_worker_info() is not None:
            try:
                os.close(os.open(os.path.join(self.directory, "died"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:  # it died here once already
                return sample
            os.kill(os.getpid(), signal.SIGKILL)
        return sample

    def batch(self, samples):
        numbers = torch.tensor([number(s.__key__) for s in samples])
        return {"n": numbers, "block": numbers.repeat(256, 1)}

    def encode_batch(self, batch):
        return batch


def val_loader(root, encoder, *, workers, savable):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    dataset = den.get_val_dataset(
        str(root), split_part="train", worker_config=config, batch_size=BATCH, task_encoder=encoder
    )
    dataset = den.LimitDataset(den.RepeatDataset(dataset, worker_config=config), 40, reset_after_epoch=True)
    return den.get_savable_loader(dataset) if savable else den.get_loader(dataset)


def passes(loader, count):
    """``count`` passes of ``for batch in loader`` (a failed pass goes on in the next ``for``): the batches'
    sample numbers per pass, and the errors."""
    out, errors = [], []
    with must_return(60):
        for _ in range(count):
            got: list[list[int]] = []
            while True:
                try:
                    for batch in loader:
                        got.append(batch["n"].tolist())
                except Exception as exc:  # the test looks at what it is
                    errors.append(exc)
                    if len(errors) < 3:
                        continue
                break
            out.append(got)
    return out, errors


def slow_pass_start(monkeypatch, seconds=0.3):
    """The val sampler takes ``seconds`` over each pass's second descriptor: torch asks for it while ``iter()``
    primes the workers, so a worker dying at its first sample dies inside the start of the pass."""
    plain = val_module._descriptors

    def descriptors(*args):
        for i, descriptor in enumerate(plain(*args)):
            if i == 1:
                time.sleep(seconds)
            yield descriptor

    monkeypatch.setattr(val_module, "_descriptors", descriptors)


def left_in_temp(before: set[str]) -> list[str]:
    ours = os.path.basename(multiprocessing.util.get_temp_dir())  # this process's, removed when it exits
    return sorted(set(os.listdir(tempfile.gettempdir())) - before - {ours})


CASES = [  # (workers, savable, the sample whose making kills its worker: index in the undisturbed run's pass)
    pytest.param(1, True, 3 * BATCH, id="1worker-savable-mid"),
    pytest.param(2, False, 5 * BATCH, id="2workers-loader-mid"),
    pytest.param(2, True, 9 * BATCH, id="2workers-savable-late"),
    pytest.param(1, False, 0, id="1worker-loader-start"),
    pytest.param(2, True, 1, id="2workers-savable-start"),
]


@pytest.mark.parametrize("workers,savable,dies", CASES)
def test_a_val_worker_killed_is_named_and_costs_no_batch(texts, tmp_path, monkeypatch, workers, savable, dies):
    slow_pass_start(monkeypatch)
    reference, errors = passes(val_loader(texts, Tensors(tmp_path, None), workers=workers, savable=savable), 2)
    assert errors == [] and len(reference[0]) >= 13
    order = [n for batch in reference[0] for n in batch]
    key = f"t{order[dies] // 100}-{order[dies] % 100:03d}"
    before = set(os.listdir(tempfile.gettempdir()))
    loader = val_loader(texts, Tensors(tmp_path, key), workers=workers, savable=savable)
    got, errors = passes(loader, 2)
    loader.close()
    del loader
    gc.collect()
    assert (tmp_path / "died").exists()  # a worker was killed
    assert len(errors) == 1, errors
    error = errors[0]
    assert type(error) is RuntimeError and "DataLoader worker" in str(error), repr(error)
    assert re.search(r"pid(\(s\))? \d+", str(error)), str(error)  # names the lost worker
    assert got == reference  # the failed pass goes on; the next is the undisturbed run's
    assert left_in_temp(before) == []
