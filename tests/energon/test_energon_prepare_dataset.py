"""``datareel.energon``'s ``BaseWebdatasetFactory.prepare_dataset`` beside megatron.energon's on the same shards:
the same shard counts, ``.tar.idx`` bytes, sqlite rows, split contents and returned parts; and a dataset
prepared by the facade reads in real Energon with the same samples."""

from __future__ import annotations

import io
import json
import sqlite3
import tarfile
from pathlib import Path

import pytest
import yaml
from braceexpand import braceexpand

from datareel.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory
from datareel.errors import DatasetError, OptionError


def _shards(root: Path, shards: int = 5, per: int = 4) -> None:
    (root / "parts").mkdir(parents=True)
    for s in range(shards):
        with tarfile.open(root / f"parts/data-{s}.tar", "w") as tar:
            for i in range(per):
                for ext, data in (("txt", f"text {s} {i}".encode()), ("json", b'{"a": 1}')):
                    info = tarfile.TarInfo(f"{s:02d}_{i:03d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def _read(root: Path, split_config: str = "split.yaml") -> dict:
    meta = root / ".nv-meta"
    splits = yaml.safe_load((meta / split_config).read_text())["split_parts"]
    with sqlite3.connect(meta / "index.sqlite") as db:
        samples = db.execute("SELECT * FROM samples ORDER BY tar_file_id, sample_index").fetchall()
        parts = db.execute("SELECT * FROM sample_parts ORDER BY tar_file_id, sample_index, part_name").fetchall()
    return {
        "counts": json.loads((meta / ".info.json").read_text())["shard_counts"],
        "splits": {k: [s for p in v for s in braceexpand(p)] for k, v in splits.items()},
        "idx": {p.name: p.read_bytes() for p in sorted((root / "parts").glob("*.idx"))},
        "samples": samples,
        "parts": parts,
    }


CASES = [
    dict(split_parts_ratio=[("train", 1.0)]),
    dict(split_parts_ratio=[("train", 0.6), ("val", 0.2), ("test", 0.2)], shuffle_seed=7),
    dict(split_parts_ratio=[("train", 3), ("val", 1)], shuffle_seed=None),
    dict(split_parts_patterns=[("train", r"parts/data-[0-2]\.tar"), ("val", "parts/data-{3,4}")]),
    dict(split_parts_ratio=[("train", 1.0)], split_config="other.json"),
]


@pytest.mark.workers  # real Energon's prepare starts its indexing processes
@pytest.mark.parametrize("kwargs", CASES)
def test_prepare_matches_energon(tmp_path: Path, kwargs: dict) -> None:
    from megatron.energon.flavors import BaseWebdatasetFactory as EnergonFactory

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    _shards(ours)
    _shards(theirs)
    got = BaseWebdatasetFactory.prepare_dataset(ours, ["parts/data-{0..4}.tar"], workers=2, **kwargs)
    want = EnergonFactory.prepare_dataset(theirs, ["parts/data-{0..4}.tar"], workers=2, **kwargs)
    assert got == want
    split_config = kwargs.get("split_config", "split.yaml")
    if split_config.endswith(".json"):
        for root in (ours, theirs):  # compare as YAML-loadable data (JSON is YAML)
            assert json.loads((root / ".nv-meta" / split_config).read_text())
    assert _read(ours, split_config) == _read(theirs, split_config)
    assert (ours / ".nv-meta" / "index.uuid").is_file()


def test_prepared_by_facade_reads_in_energon(tmp_path: Path) -> None:
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset

    _shards(tmp_path)
    parts = BaseWebdatasetFactory.prepare_dataset(
        tmp_path, ["parts/data-{0..4}.tar"], split_parts_ratio=[("train", 1.0)], workers=1
    )
    assert parts == {"txt", "json"}
    (tmp_path / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: txt\n"
    )
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(
        tmp_path, worker_config=config, batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None
    )
    loader = get_loader(dataset)
    seen = []
    for sample in loader:
        seen.append((type(sample).__name__, sample.__key__, sample.text))
        if len(seen) == 20:
            break
    assert sorted(seen) == sorted(
        ("TextSample", f"{s:02d}_{i:03d}", f"text {s} {i}") for s in range(5) for i in range(4)
    )


def test_reprepare_keeps_dataset_yaml_and_refusals(tmp_path: Path) -> None:
    _shards(tmp_path, shards=2)
    shards = ["parts/data-0.tar", "parts/data-1.tar"]
    BaseWebdatasetFactory.prepare_dataset(tmp_path, shards, split_parts_ratio=[("train", 1.0)])
    (tmp_path / ".nv-meta" / "dataset.yaml").write_text("kept: true\n")
    BaseWebdatasetFactory.prepare_dataset(tmp_path, shards[:1], split_parts_ratio=[("train", 1.0)])
    assert (tmp_path / ".nv-meta" / "dataset.yaml").read_text() == "kept: true\n"
    assert json.loads((tmp_path / ".nv-meta" / ".info.json").read_text())["shard_counts"] == {shards[0]: 4}
    with pytest.raises(OptionError, match="fix_duplicates"):
        BaseWebdatasetFactory.prepare_dataset(tmp_path, shards, split_parts_ratio=[("t", 1)], fix_duplicates=True)
    with pytest.raises(OptionError, match="not both"):
        BaseWebdatasetFactory.prepare_dataset(
            tmp_path, shards, split_parts_ratio=[("t", 1)], split_parts_patterns=[("t", ".*")]
        )
    with pytest.raises(DatasetError, match="does not exist"):
        BaseWebdatasetFactory.prepare_dataset(tmp_path, ["parts/nope.tar"], split_parts_ratio=[("t", 1)])
    with tarfile.open(tmp_path / "parts/data-1.tar", "w") as tar:  # a key of shard 0 again
        info = tarfile.TarInfo("00_000.txt")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(DatasetError, match="duplicate sample key"):
        BaseWebdatasetFactory.prepare_dataset(tmp_path, shards, split_parts_ratio=[("t", 1)])
    assert json.loads((tmp_path / ".nv-meta" / ".info.json").read_text())["shard_counts"] == {shards[0]: 4}


def test_tar_index_only_writes_no_info(tmp_path: Path) -> None:
    _shards(tmp_path, shards=1)
    BaseWebdatasetFactory.prepare_dataset(tmp_path, ["parts/data-0.tar"], tar_index_only=True)
    meta = tmp_path / ".nv-meta"
    assert sorted(p.name for p in meta.iterdir()) == ["index.sqlite", "index.uuid"]
    assert (tmp_path / "parts" / "data-0.tar.idx").stat().st_size == 8 * 5
