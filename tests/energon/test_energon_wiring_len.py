"""``len()`` of an endless weighted blend as megatron.energon gives it (each rank's workers' shares of every
blended dataset, weights aside, cut into batches), beside it on the same prepared datasets, for several
topologies; datareel's own numbers (single datasets, repetitions) are unchanged."""

from __future__ import annotations

import json

import megatron.energon as me
import pytest

import datareel.energon as den
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import write_shard


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    root = tmp_path_factory.mktemp("blend")
    parts = []
    for name, size, weight in (("a", 23, 3), ("b", 17, 1), ("c", 6, 2)):
        write_shard(root / name / "p.tar", [(f"{name}{i:03d}", {"txt": f"{name} {i}".encode()}) for i in range(size)])
        prepare_webdataset(root / name, sample_type="TextSample", field_map={"text": "txt"}, progress=False)
        parts.append({"weight": weight, "path": str(root / name), "split_part": "train"})
    meta = {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": {"train": {"blend": parts}}}
    (root / "blend.yaml").write_text(json.dumps(meta))
    return root / "blend.yaml"


def _len(lib, path, world_size, rank, workers, batch_size):
    config = lib.WorkerConfig(rank=rank, world_size=world_size, num_workers=workers)
    dataset = lib.get_train_dataset(
        str(path), worker_config=config, batch_size=batch_size, shuffle_buffer_size=None, max_samples_per_sequence=None
    )
    return len(dataset)


@pytest.mark.parametrize(
    "world_size, workers, batch_size", [(1, 0, 1), (1, 2, 3), (2, 3, 4), (3, 1, 2), (4, 5, 1), (2, 2, 100)]
)
def test_a_weighted_blends_len_is_energons(blend, world_size, workers, batch_size):
    for rank in range(world_size):
        theirs = _len(me, blend, world_size, rank, workers, batch_size)
        assert _len(den, blend, world_size, rank, workers, batch_size) == theirs, (world_size, rank)


def test_the_loader_has_the_same_length_and_stays_endless(blend):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = den.get_train_dataset(str(blend), worker_config=config, batch_size=2)
    loader = den.get_loader(dataset, watchdog_timeout_seconds=None)
    assert len(loader) == len(dataset) == 23  # (23 + 17 + 6) samples in batches of 2
    assert len([b for _, b in zip(range(60), loader)]) == 60  # a number to report; the pass goes on


def _packer(lib):
    class Packer(lib.DefaultTaskEncoder):
        def select_samples_to_pack(self, samples):
            return [samples[i : i + 3] for i in range(0, len(samples), 3)]

        @lib.stateless
        def pack_selected_samples(self, samples):
            return lib.TextSample.derive_from(samples[0], text="|".join(s.text for s in samples))

        def batch(self, samples):
            return samples

    return Packer()


@pytest.mark.workers  # online packing plans its windows in a planning process
@pytest.mark.parametrize("workers", [0, 2])
def test_a_packed_loaders_len_is_energons_estimate_from_its_inputs(blend, workers):
    path = blend.parent / "a"
    got = {}
    for lib in (me, den):
        config = lib.WorkerConfig(rank=0, world_size=1, num_workers=workers)
        dataset = lib.get_val_dataset(
            str(path),
            split_part="train",
            worker_config=config,
            batch_size=2,
            packing_buffer_size=6,
            task_encoder=_packer(lib),
        )
        got[lib.__name__] = len(dataset)
    assert got["datareel.energon"] == got["megatron.energon"] == 12  # 23 inputs in batches of 2, packs aside
