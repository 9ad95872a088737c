"""A ``dataset.yaml`` with a ``sample_loader`` (Python in the dataset's ``.nv-meta/``): refused unless the user
passes ``trust_dataset_code=True``, and then read as megatron.energon reads it (the same samples, a renamed
``__key__`` included) in one process, in DataLoader workers and through a metadataset."""

from __future__ import annotations

import megatron.energon as me
import pytest
import torch
import yaml

import datareel
import datareel.energon as den
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import build_shards

LOADER = """
def sample_loader(raw):
    assert "txt" not in raw and "npy" not in raw, sorted(raw)
    return dict(image=raw["png"], caption="<SL>" + str(raw["json"]["i"]))

def renamed(raw):
    return dict(__key__="<K>" + raw["__key__"], image=raw["png"], caption=raw["json"]["tags"][1])

def part_filter(part):
    return part in ("json", "png")
"""
CONFIGS = {
    "by_function": {"sample_loader": "sample_loader.py:sample_loader", "part_filter": "sample_loader.py:part_filter"},
    "default_name": {"sample_loader": "sample_loader.py", "part_filter": ["json", "png"]},
    "renamed_key": {"sample_loader": "sample_loader.py:renamed", "part_filter": ["png", "json"]},
}


@pytest.fixture(scope="module")
def coded(tmp_path_factory):
    root = tmp_path_factory.mktemp("coded")
    build_shards(root, shard_sizes=(4, 3, 5), long_names=False)
    prepare_webdataset(
        root, sample_type="CaptioningSample", field_map={"image": "png", "caption": "txt"}, progress=False
    )
    meta = root / ".nv-meta"
    (meta / "sample_loader.py").write_text(LOADER)
    sample_type = {"__module__": "megatron.energon", "__class__": "CaptioningSample"}
    for name, config in CONFIGS.items():
        (meta / f"{name}.yaml").write_text(yaml.safe_dump({"sample_type": sample_type, **config}))
    return root


def _samples(lib, root, config, num_workers=0, **extra):
    worker_config = lib.WorkerConfig(rank=0, world_size=1, num_workers=num_workers)
    ds = lib.get_val_dataset(
        root, split_part="train", batch_size=1, worker_config=worker_config, dataset_config=config, **extra
    )
    options = {"watchdog_timeout_seconds": None} if lib is den else {}
    out = {}
    for batch in lib.get_loader(ds, **options):
        for key, caption, image in zip(batch.__key__, batch.caption, batch.image):
            out[key] = (caption, torch.as_tensor(image).clone())
    return out


@pytest.mark.workers  # one case reads in two DataLoader workers (each loads the dataset's code itself)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_trusted_sample_loader_reads_what_energon_reads(coded, name):
    theirs = _samples(me, coded, f"{name}.yaml")
    for workers in (0, 2) if name == "by_function" else (0,):
        ours = _samples(den, coded, f"{name}.yaml", num_workers=workers, trust_dataset_code=True)
        assert sorted(ours) == sorted(theirs) and len(ours) == 12
        for key, (caption, image) in theirs.items():
            assert ours[key][0] == caption
            assert torch.equal(ours[key][1], image)


def test_sample_loader_is_refused_unless_trusted(coded):
    with pytest.raises(datareel.DatasetError, match="trust_dataset_code=True"):
        _samples(den, coded, "by_function.yaml")
    with pytest.raises(datareel.DatasetError, match="trust_dataset_code=True"):
        datareel.open_dataset(coded, dataset_config="by_function.yaml")
    with pytest.raises(datareel.OptionError, match="trust_dataset_code='yes'"):
        datareel.open_dataset(coded, dataset_config="by_function.yaml", trust_dataset_code="yes")


def test_trust_reaches_a_metadatasets_datasets(coded, tmp_path):
    doc = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {"train": {"path": str(coded), "dataset_config": "renamed_key.yaml"}},
    }
    path = tmp_path / "meta.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(datareel.DatasetError, match="trust_dataset_code"):
        datareel.open_dataset(path)
    ds = datareel.open_dataset(path, trust_dataset_code=True)
    keys = sorted(ds.read(i).__key__ for i in range(len(ds)))
    assert keys == sorted(f"<K>s{i:05d}" for i in range(12))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"sample_loader": "sample_loader.py:nowhere", "part_filter": ["png"]}, "defines no function 'nowhere'"),
        ({"sample_loader": "missing.py", "part_filter": ["png"]}, "cannot read"),
        ({"sample_loader": "sample_loader.py"}, "needs part_filter"),
        ({"sample_loader": "loader.txt", "part_filter": ["png"]}, "must name a Python file"),
        ({"sample_loader": "sample_loader.py", "part_filter": ["png"], "field_map": {"image": "png"}}, "not both"),
        ({"part_filter": ["png"], "field_map": {"image": "png", "caption": "txt"}}, "goes with a sample_loader"),
    ],
    ids=["no_function", "no_file", "no_filter", "not_python", "both", "filter_alone"],
)
def test_a_broken_sample_loader_config_is_refused_by_name(coded, config, message):
    sample_type = {"__module__": "megatron.energon", "__class__": "CaptioningSample"}
    (coded / ".nv-meta" / "broken.yaml").write_text(yaml.safe_dump({"sample_type": sample_type, **config}))
    with pytest.raises(datareel.DatasetError, match=message):
        ds = datareel.open_dataset(coded, dataset_config="broken.yaml", trust_dataset_code=True)
        ds.read(0)
