"""The shipped restore-everywhere checker passes a deterministic pipeline and catches broken ones."""

from __future__ import annotations

import random

import pytest

import datareel
from datareel.testing import Topology, check_restore_everywhere

DATA = datareel.from_sequence([{"id": i} for i in range(23)], name="ids")


class Augment:
    def encode_sample(self, sample):
        return {**sample, "noise": int(datareel.sample_rng().integers(0, 1000))}


class Leaky:
    """Draws from the process-wide generator: differs between the reference and a restored run."""

    def encode_sample(self, sample):
        return {**sample, "noise": random.randrange(1_000_000)}


def test_a_deterministic_pipeline_restores_everywhere():
    report = check_restore_everywhere(
        DATA,
        global_batch_size=6,
        before=Topology(3, 0, 1),
        after=Topology(1, 0, 3),
        global_batches=5,
        task_encoder=Augment(),
    )
    assert report == {"restored": 10, "refused": 0, "steps": 10, "end": 30}


def test_restores_that_the_layout_cannot_split_are_counted_as_refused():
    report = check_restore_everywhere(
        DATA, global_batch_size=6, before=Topology(3, 0, 1), after=Topology(1, 0, 2), global_batches=2
    )
    assert report["refused"] == 2 and report["restored"] == 2  # cursors 3 and 9 are not multiples of 2


def test_a_pipeline_with_unkeyed_randomness_fails_the_check():
    random.seed(0)
    with pytest.raises(AssertionError, match="differs from the single-rank reference"):
        check_restore_everywhere(
            DATA, global_batch_size=4, before=Topology(2, 0, 1), after=Topology(1, 0, 2), task_encoder=Leaky()
        )


def test_a_start_that_is_not_a_global_batch_boundary_is_refused():
    with pytest.raises(datareel.OptionError, match="start=3"):
        check_restore_everywhere(DATA, global_batch_size=4, before=Topology(1, 0, 1), after=Topology(1, 0, 1), start=3)


class WorkerSide:
    """Gives other samples in a DataLoader worker than in the main process: the batch is not a function of
    its descriptor alone, which only a run through real worker processes can show."""

    def encode_sample(self, sample):
        import torch.utils.data

        return {**sample, "in_worker": torch.utils.data.get_worker_info() is not None}


@pytest.mark.workers
def test_a_pipeline_whose_batches_depend_on_the_worker_fails_the_worker_check():
    with pytest.raises(AssertionError, match=r"restore at cursor \d+ on .* \(its worker processes\) differs"):
        check_restore_everywhere(
            DATA, global_batch_size=4, before=Topology(2, 0, 1), after=Topology(1, 1, 2), task_encoder=WorkerSide()
        )


@pytest.mark.workers
def test_restores_into_worker_processes_pass_for_a_deterministic_pipeline():
    report = check_restore_everywhere(
        DATA, global_batch_size=6, before=Topology(3, 1, 1), after=Topology(2, 2, 1), task_encoder=Augment()
    )
    assert report == {"restored": 4, "refused": 4, "steps": 8, "end": 24}  # cursors 3, 9, 15, 21: m W = 2
