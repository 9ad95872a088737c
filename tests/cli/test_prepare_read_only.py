"""Every write of ``datareel prepare`` refused by the file system is a named error: the path and the fix
(issue 36, item 9). WebDataset's prepare, JSONL's, the length index, remote prepare's local temporary
directory, and the CLI's one line. Read-only directories are made by :mod:`read_only` (chmod does not stop
root, who runs CI). And a directory named like a shard is named, not skipped (item 10)."""

from __future__ import annotations

import tempfile

import pytest

import datareel
from datareel.cli import main
from datareel.cli.lengths import compute_length_index
from datareel.cli.prepare import prepare_jsonl, prepare_webdataset
from datareel.storage import ObjectInfo, StoreFiles, register_scheme, unregister_scheme
from read_only import read_only
from wds_helpers import write_shard


def _shards(root, folders=("",)):
    for i, folder in enumerate(folders):
        write_shard(root / folder / f"part-{i}.tar", [(f"k{i}-{j}", {"txt": b"x" * j}) for j in range(3)])
    return root


def _listing(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_jsonl_into_a_read_only_directory_names_the_directory_and_the_fix(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    with read_only(tmp_path), pytest.raises(datareel.DatasetError) as caught:
        prepare_jsonl(path)
    message = str(caught.value)
    assert message.startswith(f"cannot write into {tmp_path}: Permission denied; ")
    assert "writes the index d.jsonl.idx beside" in message and f"make {tmp_path} writable" in message
    assert _listing(tmp_path) == ["d.jsonl"]  # no d.jsonl.idx.tmp-... left


@pytest.mark.parametrize("where", ["the dataset directory", "a shard's subdirectory"])
def test_webdataset_into_a_read_only_directory_is_refused_before_the_scan(tmp_path, monkeypatch, where):
    from datareel.formats.webdataset import prepare

    root = _shards(tmp_path / "ds", ["", "sub"])
    before = _listing(root)
    locked = root if where == "the dataset directory" else root / "sub"
    scanned = []
    monkeypatch.setattr(prepare, "scan_shard", lambda *a: scanned.append(a))  # never reached
    with read_only(locked), pytest.raises(datareel.DatasetError) as caught:
        prepare_webdataset(root, progress=False, workers=1)
    assert str(caught.value).startswith(f"cannot write into {locked}: Permission denied; ")
    assert "writes one .idx beside each shard" in str(caught.value) and f"make {locked} writable" in str(caught.value)
    assert scanned == [] and _listing(root) == before


def test_a_write_refused_after_the_scan_names_the_file_and_leaves_nothing(tmp_path):
    """The shard's directory took the probe, then refuses the index's rename (a full disk, a remount)."""
    from datareel.formats.webdataset import prepare

    root = _shards(tmp_path / "ds")
    before = _listing(root)
    real = prepare._put_in_place

    def remounted(*args):
        with read_only(root / "part-0.tar.idx"):
            real(*args)

    prepare._put_in_place = remounted
    try:
        with pytest.raises(datareel.DatasetError, match=rf"cannot write into {root}/.*: Permission denied; .*make"):
            prepare_webdataset(root, progress=False, workers=1)
    finally:
        prepare._put_in_place = real
    assert _listing(root) == before  # the staging directory went too


def test_the_length_index_into_a_read_only_metadata_directory_is_refused_before_computing(tmp_path, monkeypatch):
    root = _shards(tmp_path / "ds")
    prepare_webdataset(root, progress=False, workers=1)
    calls = []
    monkeypatch.setattr("length_fns.count_calls", lambda sample: calls.append(1) or 1, raising=False)
    with read_only(root / ".nv-meta"), pytest.raises(datareel.DatasetError) as caught:
        compute_length_index(root, "length_fns:count_calls", workers=1, progress=False)
    assert str(caught.value).startswith(f"cannot write into {root / '.nv-meta'}: Permission denied; ")
    assert "writes lengths.npy there" in str(caught.value) and calls == []


class _Bucket(StoreFiles):
    def __init__(self, blobs):
        self.blobs = blobs

    def info(self, path):
        return ObjectInfo(len(self.blobs[path]))

    def read_range(self, path, start, stop):
        return self.blobs[path][start:stop]

    def exists(self, path):
        return path in self.blobs

    def list(self, prefix):
        return sorted(p for p in self.blobs if p.startswith(prefix + "/"))

    def write(self, path, data):
        self.blobs[path] = bytes(data)


def test_remote_prepare_with_a_read_only_temp_dir_names_it_and_tmpdir(tmp_path):
    from datareel.cli.prepare_remote import prepare_remote_webdataset

    root = _shards(tmp_path / "ds")
    blobs = {f"rotmp://b/ds/{p.name}": p.read_bytes() for p in root.glob("*.tar")}
    register_scheme("rotmp", lambda: _Bucket(blobs))
    try:
        with read_only(tempfile.gettempdir()), pytest.raises(datareel.DatasetError) as caught:
            prepare_remote_webdataset("rotmp://b/ds", progress=False, workers=1)
        assert str(caught.value).startswith(f"cannot write into {tempfile.gettempdir()}: Permission denied; ")
        assert "on a URL" in str(caught.value) and "set TMPDIR to a writable directory" in str(caught.value)
        assert sorted(blobs) == sorted(f"rotmp://b/ds/{p.name}" for p in root.glob("*.tar"))  # nothing uploaded
        prepare_remote_webdataset("rotmp://b/ds", progress=False, workers=1)  # writable again: it prepares
        assert "rotmp://b/ds/.nv-meta/.info.json" in blobs
    finally:
        unregister_scheme("rotmp")


@pytest.mark.parametrize("kind", ["jsonl", "webdataset"])
def test_the_cli_prints_the_refusal_in_one_line(tmp_path, capsys, kind):
    if kind == "jsonl":
        target = tmp_path / "d.jsonl"
        target.write_text('{"a": 1}\n')
    else:
        target = _shards(tmp_path / "ds")
    with read_only(tmp_path):
        assert main(["prepare", str(target), "--quiet", "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"datareel prepare: error: cannot write into {tmp_path}") and "writable" in err, err
    assert len(err.strip().splitlines()) == 1 and "--debug" not in err  # a named error, not a bare OSError


# -- item 10: a directory named like a shard ------------------------------------------------------------


@pytest.mark.parametrize("name", ["unpacked.tar", "sub/unpacked.tar"])
def test_a_directory_named_like_a_shard_is_named_not_skipped(tmp_path, name):
    root = _shards(tmp_path / "ds")
    (root / name).mkdir(parents=True)
    (root / name / "k.txt").write_text("lost without a word")
    with pytest.raises(datareel.DatasetError, match=rf"{root / name} is a directory, not a tar shard: .*pack its"):
        prepare_webdataset(root, progress=False, workers=1)
    assert not (root / ".nv-meta").exists()


def test_a_folder_of_shards_named_like_a_shard_is_still_a_folder_of_shards(tmp_path):
    root = _shards(tmp_path / "ds", ["", "train.tar"])
    report = prepare_webdataset(root, progress=False, workers=1)
    assert report.shards == 2 and len(datareel.open_dataset(root)) == 6
