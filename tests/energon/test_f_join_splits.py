"""A train and a val join over the same two datasets: Energon 7.4.1 names a join index by the datasets'
uuids, excludes and nonmatch only (not the split), so both would share one file and val would read
train's rows.  datareel keeps Energon's name where no other join of the file clashes with it, and names
each of a clashing group by what it reads; an index Energon wrote for such a group is refused, naming both."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import DatasetError
from datareel.sources.typed import TextSample
from wds_helpers import write_shard

HEADER = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}
TYPED = "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: txt\n"
SHARDS = [range(0, 10), range(10, 20), range(20, 32), range(32, 44)]
SPLIT = "split_parts:\n  train: [part-0.tar, part-1.tar]\n  val: [part-2.tar, part-3.tar]\n"


def f_join(first, second):
    return TextSample.derive_from(first, text=f"{first.text}|{second.text}")


@pytest.fixture()
def world(tmp_path):
    # p and s alike; train reads shards 0-1 (k000..k019), val 2-3 (k020..k043): as many shards each, so
    # train's index fits val's shards and val would silently read 20 rows (the first ten of each shard)
    for name in ("p", "s"):
        for s, keys in enumerate(SHARDS):
            samples = [(f"k{k:03d}", {"txt": f"{name}{k}".encode()}) for k in keys]
            write_shard(tmp_path / name / f"part-{s}.tar", samples)
        prepare_webdataset(tmp_path / name, split_ratio="1,0,0", progress=False, workers=1)
        (tmp_path / name / ".nv-meta" / "dataset.yaml").write_text(TYPED)
        (tmp_path / name / ".nv-meta" / "split.yaml").write_text(SPLIT)
    join = {"join": [{"path": "p"}, {"path": "s"}], "joiner": {"__module__": __name__, "__function__": "f_join"}}
    path = tmp_path / "tv.yaml"
    path.write_text(yaml.safe_dump({**HEADER, "splits": {"train": join, "val": join}}, sort_keys=False))
    return path


def texts(path: Path, split: str) -> list[str]:
    source = datareel.open_dataset(path, split=split)
    return [source.read(i).text for i in range(len(source))]


def test_f_train_and_val_joins_over_the_same_datasets_read_their_own_rows(world):
    from datareel.energon.metadataset.loader import prepare_metadataset

    prepare_metadataset(world)
    assert texts(world, "train") == [f"p{k}|s{k}" for k in range(20)]
    assert texts(world, "val") == [f"p{k}|s{k}" for k in range(20, 44)]
    cache = world.with_name(world.name + ".cache")
    assert len(list(cache.iterdir())) == 2  # one index per split, none under Energon's shared name


def test_f_preparing_one_split_names_its_index_as_preparing_all(world):
    from datareel.energon.metadataset.loader import load_metadataset_file

    loaded = load_metadataset_file(world)
    loaded.post_initialize()
    loaded.prepare(split_part="val")
    assert texts(world, "val") == [f"p{k}|s{k}" for k in range(20, 44)]
    with pytest.raises(DatasetError, match="does not exist: prepare the metadataset"):
        datareel.open_dataset(world, split="train")


def test_f_an_index_under_energons_shared_name_is_refused_for_a_clashing_join(world):
    """What Energon's prepare leaves for such a file: one index, under the shared name, of one split's rows."""
    from datareel.blend.join import columns_of
    from datareel.formats.join import prepare_join
    from datareel.formats.join.index import index_name

    node = yaml.safe_load(world.read_text())["splits"]["train"]
    columns = columns_of(node, world, "train", "splits.train")
    path, _ = prepare_join(world.with_name(world.name + ".cache"), columns)  # alone: Energon's name
    energon = index_name([(c.files()[0], c.files()[1], c.nonmatch) for c in columns])
    assert path.name == energon
    with pytest.raises(DatasetError, match=r"splits\.val and splits\.train .*" + energon.replace(".", r"\.")) as err:
        datareel.open_dataset(world, split="val")
    assert "prepare_metadataset" in str(err.value)


def test_f_a_single_join_keeps_energons_name(world):
    from datareel.energon.metadataset.loader import prepare_metadataset
    from datareel.formats.join.index import index_name

    config = yaml.safe_load(world.read_text())
    del config["splits"]["val"]
    world.write_text(yaml.safe_dump(config, sort_keys=False))
    prepare_metadataset(world)
    from datareel.blend.join import columns_of

    columns = columns_of(config["splits"]["train"], world, "train", "splits.train")
    energon = index_name([(c.files()[0], c.files()[1], c.nonmatch) for c in columns])
    assert [p.name for p in world.with_name(world.name + ".cache").iterdir()] == [energon]
    assert texts(world, "train") == [f"p{k}|s{k}" for k in range(20)]
