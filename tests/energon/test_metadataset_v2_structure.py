"""datareel.energon's MetadatasetV2.splits beside megatron.energon's on the same files: after load_dataset each
split is Energon's object of the same name (MetadatasetBlend, MetadatasetBlendEpochized, MetadatasetJoin,
DatasetReference and the Blend*/Join* references) with the same fields and values — paths as EPath beside the
file (msc:// and dss:// strings too, as Energon's test_metadataset_v2_dss_path_parsing_str), aux entries as
AuxDatasetReference / AuxFilesystemReference, weights and repetitions as written, subsets, joiners — and
get_datasets / traverse of a split's view read the same as Energon's.  The views are read-only."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from datareel import DatareelError
from datareel.cli.prepare import prepare_webdataset
from datareel.energon import WorkerConfig
from datareel.energon.epathlib import EPath
from datareel.energon.metadataset import load_dataset
from datareel.energon.metadataset import metadataset_v2 as views
from datareel.energon.metadataset.loader import load_metadataset_file
from wds_helpers import write_shard

V2 = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}
PROFILE = "mdsviews"


def join_texts(*samples):
    """The joiner the fixture's joins name (by this module's name, which both libraries find imported)."""
    return samples[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mdsviews")
    for name in ("ds1", "ds2"):
        write_shard(root / name / "part-0.tar", [(f"{i:03d}", {"txt": f"{i}".encode()}) for i in range(8)])
        prepare_webdataset(root / name, split_ratio="1,0,0", progress=False)
        meta = {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
        (root / name / ".nv-meta" / "dataset.yaml").write_text(yaml.safe_dump(meta))
    (root / "media").mkdir()
    (root / "msc.yaml").write_text(
        f"profiles:\n  {PROFILE}:\n    storage_provider:\n      type: file\n      options:\n        base_path: {root}\n"
    )
    inner = {**V2, "splits": {"train": {"blend": [{"path": "ds1"}, {"path": "ds2", "weight": 2}]}}}
    (root / "inner.yaml").write_text(yaml.safe_dump(inner))
    joiner = {"__module__": __name__, "__function__": "join_texts"}
    aux = {"lab": "ds2", "media": "filesystem://media", "remote": f"filesystem+msc://{PROFILE}/media"}
    splits = {
        "train": {
            "subset": {"range": ["10%", "90%"]},
            "blend": [
                {
                    "path": "ds1",
                    "weight": 1,
                    "subflavors": {"a": 1},
                    "split_part": "train",
                    "shuffle_over_epochs_multiplier": 2,
                    "subset": {"range": [0, "end"]},
                    "aux": {**aux, "lab_msc": f"msc://{PROFILE}/ds2"},
                },
                {"path": "inner.yaml", "weight": 2.5, "split_part": "train", "subflavors": {"b": 2}},
            ],
        },
        "epo": {
            "blend_epochized": [
                {"path": "ds1", "repetitions": 2, "split_part": "train"},
                {"path": "ds2", "repetitions": 0.5, "split_part": "train", "subset": {"range": ["0%", "50%"]}},
            ]
        },
        "val": {"path": "ds2", "split_part": "train", "subflavors": {"v": True}},
        "join": {"join": [{"path": "ds1"}, {"path": "ds2", "nonmatch": "skip"}], "joiner": dict(joiner)},
        "joind": {
            "join": {"x": {"path": "ds1"}, "y": {"path": "ds2", "split_part": "train"}},
            "joiner": dict(joiner),
            "split_part": "train",
            "subflavors": {"j": 1},
        },
        "bj": {
            "blend": [
                {"weight": 3, "join": [{"path": "ds1"}, {"path": "ds2"}], "joiner": dict(joiner)},
                {"path": "ds1"},
            ]
        },
    }
    (root / "mds.yaml").write_text(yaml.safe_dump({**V2, "splits": splits}, sort_keys=False))
    return root


@pytest.fixture
def msc(world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSC_CONFIG", str(world / "msc.yaml"))


def plain(value):
    """Either library's objects as plain data: class names, fields, EPaths as (str, url), types by name."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.name == "_dataset":
                if "join" in {f.name for f in dataclasses.fields(value)}:
                    continue  # Energon's JoinDatasetLoader: datareel reads joins through datareel.blend.join
                out[field.name] = None if item is None else (type(item).__name__, str(item.path))
            else:
                out[field.name] = plain(item)
        return type(value).__name__, out
    if type(value).__name__ == "EPath":
        return "EPath", str(value), value.url
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if callable(value):
        return "object", value.__module__, value.__qualname__
    return type(value).__name__, value


def test_splits_as_energon(world: Path, msc: None) -> None:
    from megatron.energon.metadataset.loader import load_dataset as energon_load_dataset

    theirs = energon_load_dataset(world / "mds.yaml")
    ours = load_dataset(world / "mds.yaml")
    assert plain(ours.path) == plain(theirs.path)
    assert list(ours.splits) == list(theirs.splits)
    for name in theirs.splits:
        assert plain(ours.splits[name]) == plain(theirs.splits[name]), name

    train = ours.splits["train"]
    assert isinstance(train, views.MetadatasetBlend) and isinstance(train.blend[0], views.BlendDatasetReference)
    assert isinstance(train.blend[0].path, EPath) and train.blend[0].path == EPath(world / "ds1")
    assert isinstance(train.blend[0].aux["remote"], views.AuxFilesystemReference)
    assert train.blend[0].aux["remote"].fs_path.url == f"msc://{PROFILE}/media"
    assert isinstance(train.blend[0].aux["lab_msc"], views.AuxDatasetReference)
    assert train.blend[1]._dataset.splits["train"].blend[1].weight == 2  # the nested metadataset, loaded
    assert ours.splits["join"].joiner is join_texts
    assert isinstance(ours.splits["bj"].blend[0], views.BlendJoinDatasetReference)
    assert isinstance(ours.splits["epo"].blend_epochized[1].subset, views.Subset)


def test_dss_path_strings_as_energon(world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Energon's test_metadataset_v2_dss_path_parsing_str, on both libraries: a dss:// dataset and a
    filesystem+dss:// aux parse to EPaths that keep their URL and lie under NVDATASET_CACHE_DIR."""
    import megatron.energon.epathlib.epath as energon_epath
    from megatron.energon.metadataset.loader import load_dataset as energon_load_dataset

    import datareel.energon.epathlib.epath as our_epath

    cache = tmp_path / "nvds_cache"
    (cache / "charts_zh").mkdir(parents=True)
    (cache / "charts_zh" / "v0").symlink_to(world / "ds1")
    (cache / "charts" / "v0" / "images").mkdir(parents=True)
    mds = {
        **V2,
        "splits": {
            "train": {
                "blend": [
                    {"path": "dss://charts_zh@v0", "weight": 1, "aux": {"media_source": "filesystem+dss://charts@v0"}}
                ]
            }
        },
    }
    (tmp_path / "dss.yaml").write_text(yaml.safe_dump(mds))
    monkeypatch.setenv("NVDATASET_CACHE_DIR", str(cache))
    monkeypatch.setattr(energon_epath, "NVDATASET_CACHE_DIR", energon_epath.EPath(cache))
    monkeypatch.setattr(our_epath, "NVDATASET_CACHE_DIR", EPath(cache))

    theirs = energon_load_dataset(energon_epath.EPath(tmp_path / "dss.yaml")).splits["train"]
    ours = load_dataset(EPath(tmp_path / "dss.yaml")).splits["train"]
    assert plain(ours) == plain(theirs)
    ref = ours.blend[0]
    assert isinstance(ref.path, EPath) and isinstance(ref.aux["media_source"], views.AuxFilesystemReference)
    assert (ref.path.url, ref.aux["media_source"].fs_path.url) == ("dss://charts_zh@v0", "dss://charts@v0")
    assert ref.path.local_path() == cache / "charts_zh" / "v0" == theirs.blend[0].path.local_path()
    assert ref.aux["media_source"].fs_path.local_path() == cache / "charts" / "v0"


def test_dict_metadataset_as_energon(world: Path) -> None:
    from megatron.energon.metadataset.loader import load_dataset as energon_load_dataset

    config = {
        **V2,
        "splits": {"train": {"blend": [{"path": str(world / "ds1"), "weight": 3}, {"path": str(world / "ds2")}]}},
    }
    theirs = energon_load_dataset(config)
    ours = load_dataset(config)
    assert plain(ours.splits) == plain(theirs.splits)


def _leaves(result) -> tuple:
    leaves = [(d.weight, d.repetitions, dict(d.dataset.subflavors or {})) for d in result.datasets]
    return result.blend_mode.value, leaves


@pytest.mark.parametrize("split", ["train", "epo", "val"])
def test_a_views_walk_reads_as_energons(world: Path, msc: None, split: str) -> None:
    """get_datasets / traverse called on a split's object (and on one entry of it) read as Energon's do."""
    import megatron.energon as energon
    from megatron.energon.metadataset.loader import load_dataset as energon_load_dataset

    theirs_mds = energon_load_dataset(world / "mds.yaml")
    ours_mds = load_dataset(world / "mds.yaml")
    theirs, ours = theirs_mds.splits[split], ours_mds.splits[split]
    common = dict(training=True, split_part=split)
    their_config = energon.WorkerConfig(rank=0, world_size=1, num_workers=0)
    our_config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    assert _leaves(ours.get_datasets(worker_config=our_config, **common)) == _leaves(
        theirs.get_datasets(worker_config=their_config, **common)
    )

    def flat(refs):
        return [(str(r.path), r.split_part, {k: str(v) for k, v in r.aux.items()}, r.subflavors) for r in refs]

    assert flat(ours.traverse(ours_mds.path, split_part=split)) == flat(
        theirs.traverse(theirs_mds.path, split_part=split)
    )
    if split == "train":
        entry = ours.blend[1]  # a nested metadataset's entry, called on its own: its weight is its parent's business
        assert _leaves(entry.get_datasets(worker_config=our_config, **common)) == _leaves(
            theirs.blend[1].get_datasets(worker_config=their_config, **common)
        )


def test_the_views_are_read_only(world: Path, msc: None) -> None:
    mds = load_dataset(world / "mds.yaml")
    with pytest.raises(
        dataclasses.FrozenInstanceError, match=r"splits\.train\.blend\[0\].*change 'weight' in the YAML"
    ):
        mds.splits["train"].blend[0].weight = 5
    with pytest.raises(DatareelError, match="built in code.*write it in a metadataset YAML"):
        views.DatasetReference(path="ds1").get_datasets(training=True, split_part="train", worker_config=None)
    with pytest.raises(DatareelError, match=r"splits\.join\.join\[0\]: a dataset of a join is read by its join only"):
        mds.splits["join"].join[0].get_datasets(training=True, split_part="train", worker_config=None)


def test_views_before_post_initialize_are_as_written(world: Path) -> None:
    """Unchecked (load_metadataset_file, as Energon's object before post_initialize): the values as written."""
    train = load_metadataset_file(world / "mds.yaml").splits["train"]
    assert train.blend[0].path == "ds1" and train.blend[0].aux["media"] == "filesystem://media"
    assert train.blend[0]._dataset is None and train.subset.range == ["10%", "90%"]


def test_a_missing_dataset_is_named_at_load(world: Path, tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    path.write_text(
        yaml.safe_dump({**V2, "splits": {"train": {"blend": [{"path": str(world / "ds1")}, {"path": "nope"}]}}})
    )
    with pytest.raises(DatareelError, match=r"splits\.train\.blend\[1\]\.path='nope': .* does not exist"):
        load_dataset(path)


def test_a_metadataset_at_a_dss_url_names_its_datasets_by_url_as_energon(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file itself at ``dss://``: its entries, and those of the metadataset it includes, keep their URLs in
    ``traverse``, ``get_datasets`` and the views, beside megatron.energon's own ``traverse``."""
    import megatron.energon.epathlib.epath as energon_epath
    from megatron.energon.metadataset.loader import load_dataset as energon_load_dataset

    import datareel.energon.epathlib.epath as our_epath

    cache = tmp_path / "nvds_cache"
    home = cache / "mds" / "v0"
    (home / "sub").mkdir(parents=True)
    (home / "a").symlink_to(world / "ds1")
    (home / "b").symlink_to(world / "ds1")
    blend = [{"path": "a", "weight": 1}, {"path": "sub/n.yaml", "weight": 3}]
    (home / "top.yaml").write_text(yaml.safe_dump({**V2, "splits": {"train": {"blend": blend}}}))
    (home / "sub" / "n.yaml").write_text(yaml.safe_dump({**V2, "splits": {"train": {"path": "../b"}}}))
    monkeypatch.setenv("NVDATASET_CACHE_DIR", str(cache))
    monkeypatch.setattr(energon_epath, "NVDATASET_CACHE_DIR", energon_epath.EPath(cache))
    monkeypatch.setattr(our_epath, "NVDATASET_CACHE_DIR", EPath(cache))

    theirs = energon_load_dataset(energon_epath.EPath("dss://mds@v0/top.yaml"))
    ours = load_dataset(EPath("dss://mds@v0/top.yaml"))
    urls = [r.path.url for r in ours.traverse(split_part="train")]
    assert urls == [r.path.url for r in theirs.traverse(split_part="train")]
    assert urls == ["dss://mds@v0/a", "dss://mds@v0/b"]
    loaded = ours.get_datasets(training=True, split_part="train", worker_config=None)
    assert [str(d.dataset.path) for d in loaded.datasets] == urls
    assert [b.path.url for b in ours.splits["train"].blend] == ["dss://mds@v0/a", "dss://mds@v0/sub/n.yaml"]
