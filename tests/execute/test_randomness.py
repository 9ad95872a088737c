"""I4 at full strength: global RNGs reseeded per sample, sample_rng and a torch generator, per position."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import datareel
from datareel.testing import Topology, check_restore_everywhere, to_python


class GlobalRandomness:
    """Unmodified augmentation code that uses the global generators, plus datareel's own."""

    def encode_sample(self, sample):
        return {
            "id": sample["id"],
            "py": random.random(),
            "np": float(np.random.rand()),
            "torch": float(torch.rand(1)),
            "rng": float(datareel.sample_rng().random()),
            "gen": float(torch.rand(1, generator=datareel.sample_torch_generator())),
        }

    def batch(self, samples):
        return {k: [s[k] for s in samples] for k in samples[0]}


def data(n=37):
    return datareel.from_sequence([{"id": i} for i in range(n)], name="r")


@pytest.mark.workers
@pytest.mark.parametrize(
    "before,after",
    [
        (Topology(4, 0, 1), Topology(2, 2, 1)),
        (Topology(2, 2, 2), Topology(1, 0, 4)),
        (Topology(1, 3, 2), Topology(4, 1, 1)),
    ],
)
def test_identical_per_position_across_topologies_and_restores(before, after):
    report = check_restore_everywhere(
        data(),
        global_batch_size=8,
        before=before,
        after=after,
        global_batches=6,
        seed=11,
        task_encoder=GlobalRandomness(),
        reseed_global_rng=True,
    )
    assert report["restored"] >= 6


@pytest.mark.workers
def test_values_are_a_function_of_seed_and_position_only():
    def first_values(seed, **kw):
        loader = datareel.Loader(
            data(),
            global_batch_size=4,
            micro_batch_size=4,
            seed=seed,
            task_encoder=GlobalRandomness(),
            reseed_global_rng=True,
            **kw,
        )
        return to_python(next(iter(loader)))

    a, b, c = first_values(1), first_values(1, num_workers=2), first_values(2)
    assert a == b and a["py"] != c["py"]
    assert len(set(a["py"])) == 4 and len(set(a["torch"])) == 4  # positions differ, so draws differ
    random.seed(0)
    np.random.seed(0)
    assert first_values(1) == a  # the caller's global state does not leak in


def test_without_reseeding_only_the_keyed_generators_are_deterministic():
    loader = datareel.Loader(data(), global_batch_size=4, micro_batch_size=4, seed=1, task_encoder=GlobalRandomness())
    random.seed(123)
    first = to_python(next(iter(loader)))
    random.seed(456)
    second = to_python(
        next(
            iter(
                datareel.Loader(
                    data(), global_batch_size=4, micro_batch_size=4, seed=1, task_encoder=GlobalRandomness()
                )
            )
        )
    )
    assert first["rng"] == second["rng"] and first["gen"] == second["gen"]
    assert first["py"] != second["py"]


def test_generators_outside_a_sample_are_refused():
    with pytest.raises(datareel.SampleContextError):
        datareel.sample_torch_generator()


def test_reseeding_leaves_the_callers_global_generators_alone():
    loader = datareel.Loader(
        data(), global_batch_size=4, micro_batch_size=4, seed=1, task_encoder=GlobalRandomness(), reseed_global_rng=True
    )  # num_workers=0: samples are encoded in this process
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    next(iter(loader))
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
