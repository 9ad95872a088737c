"""``get_dataset_from_config`` with what a metadataset hands it (``subset=``, ``shuffle_over_epochs=``) and the
factory's ``paths``, beside megatron.energon on the same prepared dataset: the same length, paths, subflavors
and samples (keys and types) over one pass in order."""

from __future__ import annotations

import megatron.energon as me
import pytest
from megatron.energon.dataset_config import get_dataset_from_config as energon_from_config
from megatron.energon.flavors.webdataset.structs import DatasetSubset as EnergonSubset

import datareel
import datareel.energon as den
from datareel.cli.prepare import prepare_webdataset
from datareel.energon.dataset_config import get_dataset_from_config
from datareel.energon.epathlib import EPath
from datareel.energon.metadataset.metadataset_v2 import DatasetSubset
from wds_helpers import build_shards


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    root = tmp_path_factory.mktemp("captions")
    build_shards(root, shard_sizes=(6, 5, 4), long_names=False)
    prepare_webdataset(
        root, sample_type="CaptioningSample", field_map={"image": "png", "caption": "txt"}, progress=False
    )
    return root


def _factory(lib, root, subset, **extra):
    config = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
    from_config = energon_from_config if lib is me else get_dataset_from_config
    return from_config(root, split_part="train", training=False, worker_config=config, subset=subset, **extra)


def _keys(lib, factory):
    options = {"watchdog_timeout_seconds": None} if lib is den else {}
    return [(s.__key__, type(s).__name__) for s in lib.get_loader(factory.build(), **options)]


SUBSETS = [
    dict(range=(0.2, 0.7)),
    dict(absolute_range=(3, 12)),
    dict(absolute_range=(2, None), range=(0.5, 1.0)),
    dict(range=(0.0, 1.0)),
]


@pytest.mark.parametrize("subset", SUBSETS, ids=str)
def test_a_subset_reads_the_samples_energon_reads(captions, subset):
    theirs = _factory(me, captions, EnergonSubset(**{"range": None, **subset}))
    ours = _factory(den, captions, DatasetSubset(**{"range": None, **subset}))
    assert len(ours) == len(theirs)
    assert [p.name for p in ours.paths] == [p.name for p in theirs.paths] == [captions.name]
    assert isinstance(ours.paths[0], EPath)
    assert ours.subflavors == theirs.subflavors
    assert _keys(den, ours) == _keys(me, theirs)


def test_shuffle_over_epochs_is_taken_as_energon_takes_it(captions):
    for k in (2, -1, None):
        ours = _factory(den, captions, None, shuffle_over_epochs=k)
        theirs = _factory(me, captions, None, shuffle_over_epochs=k)
        assert len(ours) == len(theirs) == 15
    with pytest.raises(datareel.OptionError, match="over_epochs"):
        _factory(den, captions, None, shuffle_over_epochs=0)


def test_an_absolute_range_past_the_split_is_refused(captions):
    with pytest.raises(datareel.OptionError, match="absolute_range"):
        _factory(den, captions, DatasetSubset(range=None, absolute_range=(3, 99)))


@pytest.mark.workers  # megatron.energon reads the excluded split's index in a process of its own
@pytest.mark.parametrize(
    ("exclude", "length"), [(["parts/data-1.tar"], 10), (["parts/data-0.tar/s0000{2..4}"], 12), ([], 15)], ids=str
)
def test_split_config_named_in_dataset_yaml_is_read_as_energon_reads_it(tmp_path, exclude, length):
    """``dataset.yaml``'s ``split_config:`` names the split file (both libraries, the same samples), and it wins
    over the caller's default; a value that names no file is refused by name."""
    import yaml

    root = tmp_path / "ds"
    build_shards(root, shard_sizes=(6, 5, 4), long_names=False)
    prepare_webdataset(
        root, sample_type="CaptioningSample", field_map={"image": "png", "caption": "txt"}, progress=False
    )
    meta = root / ".nv-meta"
    split = yaml.safe_load((meta / "split.yaml").read_text())
    (meta / "split2.yaml").write_text(yaml.safe_dump({**split, "exclude": exclude}))
    config = yaml.safe_load((meta / "dataset.yaml").read_text())
    (meta / "dataset_ex.yaml").write_text(yaml.safe_dump({**config, "split_config": "split2.yaml"}))
    ours = _factory(den, root, None, dataset_config="dataset_ex.yaml")
    theirs = _factory(me, root, None, dataset_config="dataset_ex.yaml")
    assert _keys(den, ours) == _keys(me, theirs)
    assert len(ours) == len(_keys(den, ours)) == length  # Energon's len() counts sample excludes' shards whole
    (meta / "dataset_bad.yaml").write_text(yaml.safe_dump({**config, "split_config": 3}))
    with pytest.raises(datareel.DatasetError, match="split_config=3"):
        _factory(den, root, None, dataset_config="dataset_bad.yaml")
