"""File stores refuse keys they must not read, and leave no temporary directory behind.

- ``SystemFileStore(base_dir)``: a key that leaves the directory (``..``, an absolute path, a URL) is refused,
  naming it (``base_dir / key`` would read any file the process can);
- ``JsonlFileStore``: keys are Energon's (``"<n>.json"``, and datareel's ``"<n>"``), ``n`` written as
  ``str(n)``; ``"-2"``, ``"0_2"``, ``" 2"``, ``"+2"``, ``"02"`` are refused, naming the key;
- ``WebdatasetFileStore``: a key that two samples of the dataset share is refused, naming it (Energon's
  index holds each key once; which sample ``fetchone`` picked was the sqlite plan's choice);
- a remote index downloaded for lookups, and a cache pool's ``cache_<random>`` directory, are removed
  (after close, or when the pool is garbage-collected).
"""

from __future__ import annotations

import gc
import json
import tempfile

import pytest

from datareel.cli.prepare import prepare_jsonl, prepare_webdataset
from datareel.energon.cache import FileStoreCachePool, file_store
from datareel.energon.cache.file_store import JsonlFileStore, SystemFileStore, WebdatasetFileStore
from datareel.errors import DatasetError
from datareel.storage import register_scheme, unregister_scheme
from wds_helpers import write_shard


@pytest.fixture()
def tree(tmp_path):
    (tmp_path / "root" / "sub").mkdir(parents=True)
    (tmp_path / "root" / "sub" / "f.txt").write_bytes(b"inside")
    (tmp_path / "secret.txt").write_bytes(b"outside")
    return tmp_path


def test_f_system_store_reads_inside_its_root(tree):
    store = SystemFileStore(tree / "root")
    assert store["sub/f.txt"][0] == b"inside"
    assert store["sub/./f.txt"][0] == b"inside"
    assert SystemFileStore()[str(tree / "secret.txt")][0] == b"outside"  # no base_dir: absolute paths, as Energon


@pytest.mark.parametrize(
    "key",
    [
        "../secret.txt",
        "sub/../../secret.txt",
        "sub/../sub/f.txt",
        "/etc/passwd",
        "{abs}",
        "file:///etc/passwd",
        "s3://b/k",
        "",
    ],
)
def test_f_system_store_refuses_keys_that_leave_its_root(tree, key):
    key = key.format(abs=tree / "secret.txt")
    store = SystemFileStore(tree / "root")
    with pytest.raises(DatasetError, match="leaves|empty") as err:
        store[key]
    assert repr(key) in str(err.value)


@pytest.fixture()
def jsonl(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(5)))
    prepare_jsonl(path)
    return path


def test_f_jsonl_store_reads_energons_keys(jsonl):
    store = JsonlFileStore(jsonl)
    assert json.loads(store["2.json"][0]) == {"i": 2}
    assert store["2.json"][1].file_names == ("2.json",)
    assert json.loads(store["2"][0]) == {"i": 2}
    assert json.loads(store["0"][0]) == {"i": 0}


@pytest.mark.parametrize("key", ["-2", "0_2", " 2", "2 ", "+2", "02", "-1.json", "1_0.json", "2.txt", "²", "x"])
def test_f_jsonl_store_refuses_other_keys(jsonl, key):
    with pytest.raises(KeyError) as err:
        JsonlFileStore(jsonl)[key]
    assert repr(key) in str(err.value)


def test_f_jsonl_store_refuses_a_line_past_the_end(jsonl):
    with pytest.raises((KeyError, DatasetError), match="'5.json'|5"):
        JsonlFileStore(jsonl)["5.json"]


def test_f_webdataset_store_refuses_a_key_two_samples_share(tmp_path):
    """An index whose ``samples`` table lacks ``UNIQUE(sample_key)`` (older Energon versions wrote such):
    ``k0`` in two shards."""
    import sqlite3

    write_shard(tmp_path / "ds" / "a.tar", [("k0", {"txt": b"first"}), ("k1", {"txt": b"one"})])
    write_shard(tmp_path / "ds" / "b.tar", [("k2", {"txt": b"second"})])
    prepare_webdataset(tmp_path / "ds", split_ratio="1,0,0", progress=False, workers=1)
    db = sqlite3.connect(tmp_path / "ds" / ".nv-meta" / "index.sqlite")
    db.executescript(
        "CREATE TABLE loose AS SELECT * FROM samples; DROP TABLE samples; ALTER TABLE loose RENAME TO samples;"
        "UPDATE samples SET sample_key = 'k0' WHERE sample_key = 'k2';"
    )
    db.commit()
    db.close()
    store = WebdatasetFileStore(tmp_path / "ds")
    assert store["k1.txt"][0] == b"one"
    with pytest.raises(DatasetError, match=r"'k0.txt' is found more than once .*'a.tar', 'b.tar'"):
        store["k0.txt"]


class _Mem:
    """A ``mem://`` store over a dict (what the remote index of a WebdatasetFileStore is downloaded from)."""

    def __init__(self, blobs):
        from datareel.storage import StoreFiles

        class Files(StoreFiles):
            def info(self, path):
                from datareel.errors import NotFound
                from datareel.storage import ObjectInfo

                if path not in blobs:
                    raise NotFound(f"{path} does not exist")
                return ObjectInfo(len(blobs[path]))

            def read_range(self, path, start, stop):
                return blobs[path][start:stop]

        self.files = Files()


def test_f_a_downloaded_index_leaves_no_directory(tmp_path, monkeypatch):
    write_shard(tmp_path / "ds" / "a.tar", [("k0", {"txt": b"zero"}), ("k1", {"txt": b"one"})])
    prepare_webdataset(tmp_path / "ds", split_ratio="1,0,0", progress=False, workers=1)
    blobs = {
        f"mem://b/ds/{p.relative_to(tmp_path / 'ds').as_posix()}": p.read_bytes()
        for p in (tmp_path / "ds").rglob("*")
        if p.is_file()
    }
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(file_store, "epath", lambda path: path)  # the facade's EPath knows no test scheme
    register_scheme("mem", lambda: _Mem(blobs).files)
    try:
        store = WebdatasetFileStore("mem://b/ds")
        assert store["k1.txt"][0] == b"one"
        assert store["k0.txt"][0] == b"zero"
        assert list(temp.iterdir()) == []  # the download is gone once opened: sqlite keeps its file open
        del store
        gc.collect()
        assert list(temp.iterdir()) == []
    finally:
        unregister_scheme("mem")


def test_f_a_closed_pool_leaves_no_directory(tmp_path):
    store = SystemFileStore(tmp_path)
    (tmp_path / "a.txt").write_bytes(b"alpha")
    parent = tmp_path / "cache"
    pool = FileStoreCachePool(parent_cache_dir=parent, num_workers=1)
    lazy = pool.get_lazy(store, "a.txt")
    lazy.entry.send_to_cache_future.result()
    moved = pool.to_cache([1, 2], "moved")
    assert len(list(pool.cache_dir.iterdir())) == 2
    pool.close()
    assert list(parent.iterdir()) == []
    assert lazy.get() == b"alpha"  # read from its store: the cached copy went with the directory
    with pytest.raises(DatasetError, match="moved.*closed"):
        moved.get()


def test_f_a_collected_pool_leaves_no_directory(tmp_path):
    store = SystemFileStore(tmp_path)
    (tmp_path / "a.txt").write_bytes(b"alpha")
    parent = tmp_path / "cache"
    pool = FileStoreCachePool(parent_cache_dir=parent, num_workers=1)
    lazy = pool.get_lazy(store, "a.txt")
    lazy.entry.send_to_cache_future.result()
    assert lazy.get() == b"alpha"
    pool.to_cache({"k": 1}, "unread")
    assert list(parent.iterdir()) != []
    del pool, lazy
    gc.collect()
    assert list(parent.iterdir()) == []
