"""Energon-prepared and plain WebDataset datasets: cross-checked against Energon 7.4.1 itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import datareel
from datareel import DatareelError
from datareel.cli.prepare import prepare_webdataset
from datareel.energon import CaptioningSample, VQASample
from datareel.sources.tarparse import split_name
from wds_helpers import build_shards, energon_prepare, energon_samples, sample_parts, write_shard


def ours(path, **kwargs) -> dict[str, dict]:
    ds = datareel.open_dataset(path, **kwargs)
    out = {}
    for i in range(len(ds)):
        sample = ds.read(i)
        out[sample["__key__"] if isinstance(sample, dict) else sample.__key__] = sample
    assert len(out) == len(ds), "keys repeat within the split"
    return out


def assert_same_contents(mine: dict, theirs: dict) -> None:
    assert sorted(mine) == sorted(theirs)
    for key, sample in mine.items():
        other = theirs[key]
        parts = {p for p in sample if not p.startswith("__")}
        assert parts == {p for p in other if not p.startswith("__")}, key
        for part in parts:
            a, b = sample[part], other[part]
            if isinstance(a, (np.ndarray, torch.Tensor)) or isinstance(b, (np.ndarray, torch.Tensor)):
                assert np.array_equal(np.asarray(a), np.asarray(b)), (key, part)
            else:
                assert a == b, (key, part)


@pytest.fixture(scope="module")
def energon_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("energon")
    keys = build_shards(root)
    energon_prepare(root, "--sample-type=CrudeWebdataset")
    return root, keys


def test_energon_prepared_reads_like_energon(energon_dir):
    root, keys = energon_dir
    mine = ours(root)
    assert sorted(mine) == sorted(keys)
    assert_same_contents(mine, energon_samples(root))
    sample = mine["s00000"]
    assert sample["txt"] == "sample number 0 ünïcode" and sample["json"] == {"i": 0, "tags": ["a", "0"]}
    assert sample["png"].shape == (3, 6, 5) and sample["png"].dtype == torch.float32
    assert sample["npy"].shape == (2, 3)


def test_shard_and_sample_excludes_are_honoured(energon_dir, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(energon_dir[0], root)
    keys = energon_dir[1]
    split = yaml.safe_load((root / ".nv-meta/split.yaml").read_text())
    long_key = keys[6]  # in shard 1, with '/' in the key
    split["exclude"] = ["parts/data-{2..2}.tar", "parts/data-0.tar/s00001", f"parts/data-1.tar/{long_key}"]
    (root / ".nv-meta/split.yaml").write_text(yaml.safe_dump(split))
    mine = ours(root)
    expected = set(keys) - {keys[11], "s00001", long_key}  # shard 2 holds sample 11 only
    assert set(mine) == expected
    assert set(energon_samples(root)) == expected
    assert len(datareel.open_dataset(root)) == len(expected)


def test_datareel_prepare_loads_in_energon(tmp_path):
    keys = build_shards(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "datareel", "prepare", str(tmp_path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "4 shards, 17 samples" in proc.stdout
    theirs = energon_samples(tmp_path, train=True)
    assert sorted(theirs) == sorted(ours(tmp_path)) == sorted(keys)
    assert_same_contents(ours(tmp_path), theirs)
    energon_root = tmp_path / "energon"  # the same shards, prepared by Energon
    build_shards(energon_root)
    energon_prepare(energon_root, "--sample-type=CrudeWebdataset")
    for shard in range(4):  # our index files are byte-identical to Energon's
        name = f"parts/data-{shard}.tar.idx"
        assert (tmp_path / name).read_bytes() == (energon_root / name).read_bytes()


@pytest.mark.workers
def test_typed_samples_and_split_ratio(tmp_path):
    build_shards(tmp_path, shard_sizes=(3, 3, 3, 3), long_names=False)
    report = prepare_webdataset(
        tmp_path,
        split_ratio="2,1,1",
        sample_type="CaptioningSample",
        field_map={"image": "png", "caption": "txt"},
        progress=False,
    )
    assert report.splits == {"train": 6, "val": 3, "test": 3}
    train = datareel.open_dataset(tmp_path, split="train", image_decode="pil")
    sample = train.read(4)
    assert isinstance(sample, CaptioningSample) and isinstance(sample, datareel.energon.Sample)
    assert sample.caption == "sample number 4 ünïcode" and sample.image.size == (5, 6)
    shard, local = sample.__restore_key__[1:]
    assert sample.__restore_key__[0] == "Webdataset" and sample.__subflavors__ == {}
    assert train.read(int(train.starts[train.shards.index(shard)]) + local).__key__ == sample.__key__
    theirs = energon_samples(tmp_path, split="val")
    mine = ours(tmp_path, split="val")
    assert sorted(theirs) == sorted(mine)
    for key, s in mine.items():
        assert isinstance(s, CaptioningSample)
        assert s.caption == theirs[key]["caption"]
        assert torch.equal(s.image, theirs[key]["image"])


def test_field_map_nested_access_alternatives_and_subflavors(tmp_path):
    build_shards(tmp_path, shard_sizes=(2,), long_names=False)
    prepare_webdataset(tmp_path, progress=False)
    (tmp_path / ".nv-meta/dataset.yaml").write_text(
        yaml.safe_dump(
            {
                "sample_type": {"__module__": "megatron.energon", "__class__": "VQASample"},
                "field_map": {"image": "jpg,png", "context": "json[tags][1]", "answers": "txt"},
                "subflavors": {"source": "unit"},
            }
        )
    )
    sample = datareel.open_dataset(tmp_path, subflavors={"extra": 1}).read(1)
    assert isinstance(sample, VQASample)
    assert sample.context == "1" and sample.answers.startswith("sample number 1")
    assert sample.__subflavors__ == {"source": "unit", "extra": 1}


def test_jsonl_index_matches_energon_and_reads(tmp_path):
    from megatron.energon.flavors.jsonl.crude_jsonl_dataset import CrudeJsonlDatasetFactory

    text = '\n{"a": 1}\n\n{"a": 2}\n{"a": 3}\n\n'
    mine, theirs = tmp_path / "m.jsonl", tmp_path / "t.jsonl"
    mine.write_text(text)
    theirs.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "datareel", "prepare", str(mine)], capture_output=True, text=True)
    assert proc.returncode == 0 and "3 samples" in proc.stdout, proc.stderr
    CrudeJsonlDatasetFactory.prepare_dataset(theirs)
    assert np.fromfile(f"{mine}.idx", dtype="<u8").tolist() == [0, 11, 20, 30]
    assert Path(f"{mine}.idx").read_bytes() == Path(f"{theirs}.idx").read_bytes()
    ds = datareel.open_dataset(mine)
    assert [ds.read(i) for i in range(3)] == [{"__key__": str(i), "json": {"a": i + 1}} for i in range(3)]


def test_info_command(energon_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "datareel", "info", str(energon_dir[0]), "--json"], capture_output=True, text=True
    )
    info = json.loads(proc.stdout)
    assert info["samples"] == 17 and info["shards"] == 4 and info["splits"]["train"]["samples"] == 17
    assert info["sample_type"] == "CrudeWebdataset" and info["bytes"] > 0
    table = subprocess.run(
        [sys.executable, "-m", "datareel", "info", str(energon_dir[0])], capture_output=True, text=True
    )
    assert "train" in table.stdout and "17" in table.stdout


@pytest.mark.parametrize(
    "name,expected",
    [
        ("s0.detail.json", ("s0", "detail.json")),
        ("dir/s.2.txt", ("dir/s", "2.txt")),
        ("a.b/c.txt", ("a.b/c", "txt")),
        ("noext", None),
        ("dir/.hidden", None),
        ("__meta__/x.txt", None),
        ("__index__", None),
    ],
)
def test_member_names_group_like_energon(name, expected):
    assert split_name(name) == expected


# -- bad input: a clear error that names the file (and key), never a crash deep inside ------------


@pytest.fixture
def prepared(tmp_path):
    build_shards(tmp_path, shard_sizes=(3, 3), long_names=False)
    prepare_webdataset(tmp_path, progress=False)
    return tmp_path


def _fails_on_first_use(prepared, match: str, shard: int, how: str) -> None:
    """Opening reads no shard (constant-time open); the shard's first read, or ``check()``, names the fault."""
    ds = datareel.open_dataset(prepared)
    with pytest.raises(DatareelError, match=match):
        if how == "read":
            ds.read(int(ds.starts[shard]))
        else:
            ds.check()
    if how == "read" and shard == 1:
        ds.read(0)  # the other shard still reads


@pytest.mark.parametrize("how", ["read", "check"])
def test_missing_shard(prepared, how):
    (prepared / "parts/data-1.tar").unlink()
    _fails_on_first_use(prepared, r"shard .*data-1\.tar is missing", 1, how)


@pytest.mark.parametrize("how", ["read", "check"])
def test_truncated_tar(prepared, how):
    shard = prepared / "parts/data-1.tar"
    shard.write_bytes(shard.read_bytes()[:3000])
    _fails_on_first_use(prepared, r"data-1\.tar .*truncated", 1, how)


@pytest.mark.parametrize("how", ["read", "check"])
def test_idx_count_disagrees_with_info(prepared, how):
    idx = prepared / "parts/data-0.tar.idx"
    idx.write_bytes(idx.read_bytes()[:-8])
    _fails_on_first_use(prepared, r"data-0\.tar\.idx holds 2 samples but .* says 3", 0, how)


@pytest.mark.parametrize("how", ["read", "check"])
def test_shard_changed_after_prepare(prepared, how):
    write_shard(prepared / "parts/data-0.tar", [(f"z{i}", sample_parts(i)) for i in range(4)])
    _fails_on_first_use(prepared, r"data-0\.tar .*no longer matches its index", 0, how)


@pytest.mark.parametrize("policy", [dict(on_error="substitute"), dict(error_handler=lambda exc, key: None)])
def test_a_shard_changed_since_prepare_stops_the_run_whatever_the_error_policy(prepared, policy):
    """A vanished or damaged sample may be substituted; a shard that no longer matches its index puts the
    whole dataset in question, so it always stops the run, naming the shard."""
    write_shard(prepared / "parts/data-0.tar", [(f"z{i}", sample_parts(i)) for i in range(4)])
    loader = datareel.Loader(
        datareel.open_dataset(prepared), global_batch_size=6, micro_batch_size=6, shuffle=False, **policy
    )
    with pytest.raises(datareel.BatchError, match=r"data-0\.tar .*no longer matches its index") as info:
        next(iter(loader))
    assert isinstance(info.value.__cause__, datareel.DatasetChangedError)


def test_damaged_header_is_caught_on_read(prepared):
    shard = prepared / "parts/data-0.tar"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF  # the first member's name: its header checksum no longer matches
    shard.write_bytes(bytes(data))
    ds = datareel.open_dataset(prepared, split="train")
    with pytest.raises(DatareelError, match=r"data-0\.tar: no valid tar header at byte 0"):
        ds.read(0)


def test_unknown_sample_type(prepared):
    (prepared / ".nv-meta/dataset.yaml").write_text(
        yaml.safe_dump({"sample_type": {"__class__": "HologramSample"}, "field_map": {"x": "txt"}})
    )
    with pytest.raises(DatareelError, match=r"dataset\.yaml: sample_type 'HologramSample' is not supported"):
        datareel.open_dataset(prepared)


@pytest.mark.workers
def test_field_map_naming_a_missing_part(prepared):
    (prepared / ".nv-meta/dataset.yaml").write_text(
        yaml.safe_dump(
            {"sample_type": {"__class__": "CaptioningSample"}, "field_map": {"image": "jpg", "caption": "txt"}}
        )
    )
    ds = datareel.open_dataset(prepared)
    with pytest.raises(DatareelError, match=r"data-0\.tar key 's00000'.*needs part jpg"):
        ds.read(0)
    with pytest.raises(DatareelError, match="no sample has"):
        prepare_webdataset(
            prepared,
            sample_type="CaptioningSample",
            field_map={"image": "jpg", "caption": "txt"},
            overwrite=True,
            progress=False,
        )


def test_non_utf8_text(tmp_path):
    write_shard(tmp_path / "bad.tar", [("k0", {"txt": b"fine"}), ("k1", {"txt": b"\xff\xfe broken"})])
    prepare_webdataset(tmp_path, progress=False)
    ds = datareel.open_dataset(tmp_path)
    assert ds.read(0)["txt"] == "fine"
    with pytest.raises(DatareelError, match=r"bad\.tar key 'k1': part 'txt' is not valid UTF-8"):
        ds.read(1)
    (tmp_path / "bad.jsonl").write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(DatareelError, match=r"bad\.jsonl line 2: not valid UTF-8"):
        from datareel.cli.prepare import prepare_jsonl

        prepare_jsonl(tmp_path / "bad.jsonl")


def test_prepare_refuses_duplicates_and_leaves_nothing(tmp_path):
    write_shard(tmp_path / "a.tar", [("k0", {"txt": b"a"}), ("k1", {"txt": b"b"})])
    write_shard(tmp_path / "b.tar", [("k2", {"txt": b"c"}), ("k1", {"txt": b"d"})])
    proc = subprocess.run(
        [sys.executable, "-m", "datareel", "prepare", str(tmp_path), "--quiet"], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "duplicate sample key 'k1'" in proc.stderr and "a.tar" in proc.stderr and "b.tar" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar", "b.tar"]  # no .nv-meta, no .idx, no temp


@pytest.mark.workers
def test_prepare_on_truncated_tar_leaves_nothing(tmp_path):
    write_shard(tmp_path / "a.tar", [("k0", {"txt": b"a" * 2000})])
    write_shard(tmp_path / "b.tar", [("k1", {"txt": b"b" * 2000})])
    (tmp_path / "b.tar").write_bytes((tmp_path / "b.tar").read_bytes()[:1500])
    with pytest.raises(DatareelError, match=r"b\.tar.*truncated"):
        prepare_webdataset(tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar", "b.tar"]


def test_not_a_dataset_and_missing_yaml(tmp_path):
    with pytest.raises(DatareelError, match="datareel prepare"):
        datareel.open_dataset(tmp_path)
    with pytest.raises(DatareelError, match=r"metadataset .*mix\.yaml does not exist"):
        datareel.open_dataset(tmp_path / "mix.yaml")
    with pytest.raises(DatareelError, match="does not exist"):
        datareel.open_dataset(tmp_path / "nope")


def test_unknown_split_names_the_choices(prepared):
    with pytest.raises(DatareelError, match=r"split 'dev' is not in .*\['test', 'train', 'val'\]"):
        datareel.open_dataset(prepared, split="dev")


def test_file_handles_open_lazily_per_process(prepared):
    import pickle

    from datareel.sources.handles import handles

    ds = datareel.open_dataset(prepared)
    handles().close_all()
    first = ds.read(0)["__key__"]
    assert str(prepared / "parts/data-0.tar") in handles()._open and len(handles()) == 1  # on first read only
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.read(4)["__key__"] == ds.read(4)["__key__"]
    pid = os.fork()
    if pid == 0:  # a forked child (a DataLoader worker) closes what it inherited and opens its own
        ok = len(handles()) == 0 and ds.read(0)["__key__"] == first and len(handles()) == 1
        os._exit(0 if ok else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert len(handles()) == 2 and ds.read(0)["__key__"] == first  # the parent's are untouched


def test_legacy_info_yaml_and_split_json(prepared):
    meta = prepared / ".nv-meta"
    expected = ours(prepared)
    info = json.loads((meta / ".info.json").read_text())
    (meta / ".info.json").unlink()
    (meta / ".info.yaml").write_text(yaml.safe_dump(info))
    split = yaml.safe_load((meta / "split.yaml").read_text())
    (meta / "split.yaml").unlink()
    (meta / "split.json").write_text(json.dumps(split))
    assert_same_contents(ours(prepared), expected)
