"""datareel.energon.metadataset beside megatron.energon.metadataset on the same files: load_dataset(...).get_datasets
(blend mode, absolute weights and repetitions, each leaf's subflavors), traverse_metadataset (paths, split parts,
aux paths, hierarchy subflavors), a file without __class__ (the legacy Metadataset, its 'subflavor'), and joins
refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from datareel import DatareelError
from datareel.cli.prepare import prepare_webdataset
from datareel.energon import WorkerConfig
from datareel.energon import metadataset as ours
from wds_helpers import write_shard

V2 = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("mdsloader")
    for name in ("ds1", "ds2"):
        write_shard(root / name / "part-0.tar", [(f"{name}-{i}", {"txt": f"{i}".encode()}) for i in range(12)])
        prepare_webdataset(root / name, split_ratio="1,0,0", progress=False)
        (root / name / ".nv-meta" / "dataset.yaml").write_text(
            yaml.safe_dump(
                {"__module__": "megatron.energon", "__class__": "CrudeWebdataset", "subflavors": {"own": name}}
            )
        )
    inner = {
        **V2,
        "splits": {
            "train": {
                "blend": [
                    {"weight": 1, "path": "ds1", "subflavors": {"source": "inner", "n": 1}},
                    {"weight": 3, "path": "ds2", "subflavors": {"source": "inner", "n": 2}},
                ]
            },
            "val": {"blend": [{"path": "ds1", "split_part": "train"}, {"path": "ds2", "split_part": "train"}]},
            "epo": {
                "blend_epochized": [
                    {"repetitions": 2, "path": "ds1", "split_part": "train"},
                    {"repetitions": 0.5, "path": "ds2", "split_part": "train"},
                ]
            },
        },
    }
    (root / "inner.yaml").write_text(yaml.safe_dump(inner))
    outer = {
        **V2,
        "splits": {
            "train": {
                "blend": [
                    {"weight": 4, "path": "inner.yaml", "split_part": "train", "subflavors": {"source": "outer"}},
                    {"path": "inner.yaml", "split_part": "val", "subflavors": {"mds": "val"}},
                ]
            },
            "epo": {"blend_epochized": [{"repetitions": 3, "path": "inner.yaml", "split_part": "epo"}]},
        },
    }
    (root / "outer.yaml").write_text(yaml.safe_dump(outer))
    legacy = {
        "splits": {"train": {"datasets": [{"weight": 2, "path": "outer.yaml", "subflavor": "legacy"}, {"path": "ds1"}]}}
    }
    (root / "legacy.yaml").write_text(yaml.safe_dump(legacy))
    aux = {**V2, "splits": {"train": {"path": "missing", "aux": {"labels": "lab", "media": "filesystem://media"}}}}
    (root / "aux.yaml").write_text(yaml.safe_dump(aux))
    return root


def loaded(module, path: Path, split: str) -> tuple:
    config = module.WorkerConfig(rank=0, world_size=1, num_workers=0) if hasattr(module, "WorkerConfig") else None
    result = module.load_dataset(path).get_datasets(training=True, split_part=split, worker_config=config)
    leaves = [(d.weight, d.repetitions, {k: v for k, v in d.dataset.subflavors.items()}) for d in result.datasets]
    return result.blend_mode.value, leaves


@pytest.mark.parametrize("name,split", [("outer.yaml", "train"), ("outer.yaml", "epo"), ("legacy.yaml", "train")])
def test_get_datasets_as_energon(world, name, split):
    import megatron.energon as energon

    class Ours:
        load_dataset = staticmethod(ours.load_dataset)
        WorkerConfig = WorkerConfig

    assert loaded(Ours, world / name, split) == loaded(energon, world / name, split)


@pytest.mark.parametrize("name", ["outer.yaml", "legacy.yaml", "aux.yaml"])
def test_traverse_as_energon(world, name):
    from megatron.energon.metadataset.loader import traverse_metadataset

    def flat(refs):
        return [(str(r.path), r.split_part, {k: str(v) for k, v in r.aux.items()}, r.subflavors) for r in refs]

    theirs = flat(traverse_metadataset(world / name, split_part="train"))
    assert flat(ours.traverse_metadataset(world / name, split_part="train")) == theirs
    assert theirs  # the fixture reaches leaves


def test_a_join_without_joiner_is_refused(world):
    path = world / "join.yaml"
    path.write_text(yaml.safe_dump({**V2, "splits": {"train": {"join": [{"path": "ds1"}, {"path": "ds2"}]}}}))
    with pytest.raises(DatareelError, match=r"splits\.train joins datasets but names no joiner"):
        ours.prepare_metadataset(path)
    assert ours.load_dataset(world / "inner.yaml").traverse(split_part="val")[1].path.name == "ds2"
