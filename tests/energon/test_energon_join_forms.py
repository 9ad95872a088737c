"""Metadataset joins beside megatron.energon on the same data: the join index each prepares (the same file,
byte for byte, under the same name), and the joined samples each reads (keys, fields, counts) for the
mapping form with a function joiner and an inner join (nonmatch: skip), the list form with a sample class
(Energon's default from_joined) and a left join (nonmatch: none), and excludes in the split files."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import DatasetError
from datareel.sources.typed import TextSample as OurText
from wds_helpers import write_shard

HEADER = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}
TYPED = "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: txt\n"


def energon_join(first, second):
    from megatron.energon import TextSample

    return TextSample.derive_from(first, text=f"{first.text}|{second.text}")


def datareel_join(first, second):
    return OurText.derive_from(first, text=f"{first.text}|{second.text}")


def _energon_pair():
    from megatron.energon import TextSample

    return TextSample


class OurPair(OurText):
    __slots__ = ()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("joins")
    # p: k000..k029 in 3 shards; s: k010..k039 (shuffled across 4 shards): they share k010..k029
    layout = {"p": [list(range(s * 10, s * 10 + 10)) for s in range(3)], "s": [[], [], [], []]}
    for i, k in enumerate([17, 33, 10, 25, 39, 12, 21, 30, 14, 28, 11, 36, 19, 23, 31, 15, 27, 38, 13, 20] * 1):
        layout["s"][i % 4].append(k)
    layout["s"][0] += [16, 18, 22, 24, 26, 29, 32, 34, 35, 37]
    for name, shards in layout.items():
        for s, keys in enumerate(shards):
            samples = [(f"k{k:03d}", {"txt": f"{name}{k}".encode()}) for k in keys]
            write_shard(root / name / f"part-{s}.tar", samples)
        prepare_webdataset(root / name, split_ratio="1,0,0", progress=False)
        (root / name / ".nv-meta" / "dataset.yaml").write_text(TYPED)
    shards = "[part-0.tar, part-1.tar, part-2.tar]"
    (root / "p" / ".nv-meta" / "ex.yaml").write_text(
        f"split_parts:\n  train: {shards}\nexclude: [part-0.tar, part-2.tar/k025]\n"
    )
    return root


def write(world: Path, name: str, train: dict) -> Path:
    path = world / name
    path.write_text(yaml.safe_dump({**HEADER, "splits": {"train": train}}, sort_keys=False))
    return path


def joiner(name: str) -> dict:
    return {"__module__": __name__, "__function__" if name.endswith("join") else "__class__": name}


def energon_samples(path: Path) -> list[tuple]:
    from megatron.energon import WorkerConfig, get_val_dataset
    from megatron.energon.savable_loader import BasicDataLoader

    dataset = get_val_dataset(
        str(path), split_part="train", batch_size=None, worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0)
    )
    loader = BasicDataLoader(dataset, gc_collect_every_n_steps=0, watchdog_timeout_seconds=None)
    return [(s.__key__, s.text, len(s.__sources__ or ())) for s in loader]


def datareel_samples(path: Path) -> list[tuple]:
    source = datareel.open_dataset(path)
    samples = [source.read(i) for i in range(len(source))]
    return [(s.__key__, s.text, len(s.__sources__ or ())) for s in samples]


def both_prepare(path: Path) -> Path:
    """Energon prepares, then datareel prepares afresh: the same file, the same bytes. -> its path  (One sample
    exclude at most: Energon hashes several in a set's order, which changes from process to process.)"""
    from megatron.energon.epathlib import EPath
    from megatron.energon.metadataset.loader import prepare_metadataset as theirs

    from datareel.energon.metadataset.loader import prepare_metadataset as ours

    cache = path.with_name(path.name + ".cache")
    shutil.rmtree(cache, ignore_errors=True)
    theirs(EPath(path))
    (energon_file,) = cache.iterdir()
    expected = energon_file.read_bytes()
    shutil.rmtree(cache)
    ours(path)
    (our_file,) = cache.iterdir()
    assert our_file.name == energon_file.name
    assert our_file.read_bytes() == expected
    return our_file


def test_mapping_form_inner_join_with_a_function_joiner(world):
    def train(fn):
        return {"join": {"first": {"path": "p"}, "second": {"path": "s", "nonmatch": "skip"}}, "joiner": joiner(fn)}

    both_prepare(write(world, "inner.yaml", train("energon_join")))
    theirs = energon_samples(world / "inner.yaml")
    ours = datareel_samples(write(world, "inner.yaml", train("datareel_join")))
    assert sorted(ours) == sorted(theirs)
    assert [k for k, _, _ in ours] == [f"k{k:03d}" for k in range(10, 30)]  # the primary's order
    assert ("k017", "p17|s17", 1) in ours


def test_list_form_with_a_sample_class(world):
    def train(cls):
        return {"join": [{"path": "p"}, {"path": "s", "nonmatch": "skip"}], "joiner": joiner(cls)}

    sys.modules[__name__].EnergonPair = _energon_pair()
    both_prepare(write(world, "pair.yaml", train("EnergonPair")))
    theirs = energon_samples(world / "pair.yaml")
    ours = datareel_samples(write(world, "pair.yaml", train("OurPair")))
    assert sorted(ours) == sorted(theirs)
    assert ("k015", "s15", 3) in ours  # the later sample's fields win; __sources__ as Energon's (primary twice)


def test_left_join_keeps_every_primary_sample(world):
    """nonmatch: none: both write the same index (a row of -1 where s has no match); Energon 7.4.1 then fails
    reading such a row, datareel joins None."""
    train = {"join": [{"path": "p"}, {"path": "s", "nonmatch": "none"}], "joiner": joiner("left_join")}
    both_prepare(write(world, "left.yaml", train))
    with pytest.raises(ValueError, match="No valid files found"):
        energon_samples(world / "left.yaml")
    ours = datareel_samples(world / "left.yaml")
    assert [k for k, _, _ in ours] == [f"k{k:03d}" for k in range(30)]
    assert ours[5][1] == "p5|None" and ours[15][1] == "p15|s15"


def left_join(first, second):
    cls = OurText if isinstance(first, OurText) else _energon_pair()
    return cls.derive_from(first, text=f"{first.text}|{second.text if second is not None else None}")


def test_excludes_in_the_split_file(world):
    def train(fn):
        return {
            "join": [{"path": "p", "split_config": "ex.yaml"}, {"path": "s", "nonmatch": "skip"}],
            "joiner": joiner(fn),
        }

    both_prepare(write(world, "ex.yaml", train("energon_join")))
    theirs = energon_samples(world / "ex.yaml")
    ours = datareel_samples(write(world, "ex.yaml", train("datareel_join")))
    assert sorted(ours) == sorted(theirs)
    assert [k for k, _, _ in ours] == [f"k{k:03d}" for k in range(10, 30) if k != 25]


def test_a_missing_match_without_nonmatch_is_refused_by_both(world):
    from megatron.energon.epathlib import EPath
    from megatron.energon.metadataset.loader import prepare_metadataset as theirs

    from datareel.energon.metadataset.loader import prepare_metadataset as ours

    path = write(world, "strict.yaml", {"join": [{"path": "p"}, {"path": "s"}], "joiner": joiner("energon_join")})
    with pytest.raises(ValueError, match="missing sample"):
        theirs(EPath(path))
    shutil.rmtree(path.with_name(path.name + ".cache"))  # Energon leaves the file it was writing
    with pytest.raises(DatasetError, match=r"sample key 'k000' .* has no match in .*nonmatch: skip"):
        ours(path)


def test_unprepared_joins_and_unimported_joiners_are_refused(world):
    from datareel.blend.metadataset import load_metadataset
    from datareel.energon.metadataset.loader import prepare_metadataset

    train = {"join": [{"path": "p"}, {"path": "s", "nonmatch": "skip"}], "joiner": joiner("datareel_join")}
    with pytest.raises(DatasetError, match="join index .* does not exist: prepare the metadataset"):
        datareel.open_dataset(write(world, "unprepared.yaml", train))
    gone = {"__module__": "not_imported_anywhere", "__function__": "join"}
    path = write(world, "gone.yaml", {**train, "joiner": gone})
    prepare_metadataset(path)  # prepare resolves no joiner (Energon mocks them)
    with pytest.raises(DatasetError, match="module 'not_imported_anywhere' is not imported; datareel never imports"):
        datareel.open_dataset(path)
    assert "not_imported_anywhere" not in sys.modules
    source = load_metadataset(path, joiners={"not_imported_anywhere.join": datareel_join})
    assert source.read(0).text == "p10|s10"


def test_a_join_is_an_ordinary_source_of_the_reel(world):
    import pickle

    train = {
        "join": {"first": {"path": "p"}, "second": {"path": "s", "nonmatch": "skip"}},
        "joiner": joiner("datareel_join"),
    }
    path = write(world, "reel.yaml", {**train, "subset": {"range": ["0%", "50%"]}})
    from datareel.energon.metadataset.loader import prepare_metadataset

    prepare_metadataset(path)
    source = pickle.loads(pickle.dumps(datareel.open_dataset(path)))  # what a DataLoader worker gets
    assert len(source) == 10  # the subset is of the join's rows: a static range, fixed before the shuffle
    loader = datareel.Loader(
        source, global_batch_size=5, micro_batch_size=5, seed=1, repeat=False, world_size=1, rank=0
    )
    keys = [k for batch in loader for k in batch["__key__"]]
    assert sorted(keys) == [f"k{k:03d}" for k in range(10, 20)]
