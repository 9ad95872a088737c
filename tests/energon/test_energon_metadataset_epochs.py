"""Metadataset epochs beside megatron.energon on the same data: blend_epochized's rounding of fractional
repetitions (down, as Energon: 0.7 and 1.5 of 55 samples are 38 + 82 = 120 per meta-epoch) and
shuffle_over_epochs_multiplier (k: each sample k times in a pass of k epochs; -1: with replacement)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

import datareel
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import write_shard

HEADER = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("mdsepochs")
    for name in ("ds1", "ds2"):
        for s in range(6):  # 55 samples in shards of 10
            samples = [
                (f"{name}-{i:03d}", {"txt": f"{name} {i}".encode()}) for i in range(s * 10, min(55, s * 10 + 10))
            ]
            write_shard(root / name / f"part-{s}.tar", samples)
        prepare_webdataset(root / name, split_ratio="1,0,0", progress=False)
    return root


def write(path: Path, train: dict) -> Path:
    path.write_text(yaml.safe_dump({**HEADER, "splits": {"train": train}}, sort_keys=False))
    return path


def energon_keys(path: Path, count: int | None = None, **kwargs) -> list[str]:
    """Keys of Energon's own train stream (one process, no workers), ``repeat=False`` unless ``count``."""
    from megatron.energon import Cooker, DefaultTaskEncoder, WorkerConfig, get_train_dataset, stateless
    from megatron.energon.savable_loader import BasicDataLoader

    class Passthrough(DefaultTaskEncoder):
        cookers = [Cooker(stateless(lambda sample: sample))]

        def batch(self, samples):
            return samples

    dataset = get_train_dataset(
        str(path),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=Passthrough(),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        repeat=count is not None,
        **kwargs,
    )
    out = []
    for sample in BasicDataLoader(dataset, gc_collect_every_n_steps=0, watchdog_timeout_seconds=None):
        out.append(sample["__key__"])
        if len(out) == count:
            break
    return out


def datareel_keys(path: Path, count: int | None = None, **kwargs) -> list[str]:
    loader = datareel.Loader(
        datareel.open_dataset(path, **kwargs),
        global_batch_size=5,
        micro_batch_size=5,
        seed=3,
        repeat=count is not None,
        rank=0,
        world_size=1,
    )
    out: list[str] = []
    for batch in loader:
        out += batch["__key__"]
        if count is not None and len(out) >= count:
            return out[:count]
    return out


def profile(keys: list[str]) -> dict[str, Counter]:
    """Per dataset: how many keys were read how many times."""
    per: dict[str, Counter] = {}
    for key, times in Counter(keys).items():
        per.setdefault(key.split("-")[0], Counter())[times] += 1
    return per


def test_fractional_repetitions_round_down_as_energon(world):
    mds = write(
        world / "frac.yaml",
        {"blend_epochized": [{"repetitions": 0.7, "path": "ds1"}, {"repetitions": 1.5, "path": "ds2"}]},
    )
    ours, theirs = datareel_keys(mds), energon_keys(mds)
    assert len(ours) == len(theirs) == 38 + 55 + 27
    assert profile(ours) == profile(theirs) == {"ds1": Counter({1: 38}), "ds2": Counter({2: 27, 1: 28})}


@pytest.mark.parametrize("where", ["yaml", "argument"])
def test_shuffle_over_two_epochs_as_energon(world, where):
    entry = {"path": "ds1", **({"shuffle_over_epochs_multiplier": 2} if where == "yaml" else {})}
    mds = write(world / f"over-{where}.yaml", {"blend_epochized": [{"repetitions": 1, **entry}]})
    kwargs = {} if where == "yaml" else {"shuffle_over_epochs_multiplier": 2}
    ours, theirs = datareel_keys(mds, 110, **kwargs), energon_keys(mds, 110, **kwargs)
    # two epochs' worth of samples: every key exactly twice, in both
    assert profile(ours) == profile(theirs) == {"ds1": Counter({2: 55})}
    assert max(Counter(ours[:55]).values()) == 2 and max(Counter(theirs[:55]).values()) == 2


def test_with_replacement_as_energon(world):
    mds = write(world / "draw.yaml", {"path": "ds1", "shuffle_over_epochs_multiplier": -1})
    ours, theirs = datareel_keys(mds, 330), energon_keys(mds, 330)
    for keys in (ours, theirs):  # six epochs' worth of draws: repeats inside the first epoch, not 6 of each
        assert set(keys) <= {f"ds1-{i:03d}" for i in range(55)}
        assert len(set(keys[:55])) < 55 and set(Counter(keys).values()) != {6}
