"""File stores and cache pools (``datareel.energon.cache``) beside megatron.energon's: the same calls on the
same data give the same values, ``__sources__`` records, reference counts and cache-directory contents."""

from __future__ import annotations

import gc
import pickle
from pathlib import Path
from typing import Any

import pytest

import datareel
from datareel import energon as den
from datareel.energon import cache as dcache

me = pytest.importorskip("megatron.energon")
mcache = pytest.importorskip("megatron.energon.cache")
DATA = {"a.txt": b"alpha", "b.txt": b"beta", "big.bin": b"x" * 1000}


def _libs():
    from megatron.energon.flavors.webdataset.sample_decoder import SampleDecoder as MeDecoder
    from megatron.energon.source_info import SourceInfo as MeInfo

    from datareel.energon.flavors.webdataset.sample_decoder import SampleDecoder as DrDecoder
    from datareel.energon.source_info import SourceInfo as DrInfo

    return [(mcache, MeInfo, MeDecoder), (dcache, DrInfo, DrDecoder)]


def _store(cache: Any, info: Any) -> Any:
    class Store(cache.FileStore):
        def __getitem__(self, key: str):
            return DATA[key], info(dataset_path="mem", index=None, shard_name=None, file_names=(key,))

        def get_path(self) -> str:
            return "mem"

    return Store()


def _records(sample: dict) -> list[tuple]:
    return [(str(s.dataset_path), s.index, s.shard_name, tuple(s.file_names)) for s in sample["__sources__"]]


def _run(cache: Any, info: Any, decoder_cls: Any, tmp: Path, method: str) -> list[Any]:
    out: list[Any] = []
    raw = _store(cache, info)

    class Decoder(decoder_cls):
        def decode(self, fname: str, data: bytes) -> Any:
            return f"{fname}={data.decode()}"

    decoded = cache.DecodeFileStore(raw, decoder=Decoder())
    pool = cache.FileStoreCachePool(parent_cache_dir=tmp, num_workers=1, method=method)
    try:
        sample: dict = {"__sources__": []}
        out.append((pool.get(raw, "a.txt", sample), pool.get(decoded, "b.txt", sample), _records(sample)))
        first, second = pool.get_lazy(decoded, "a.txt"), pool.get_lazy(decoded, "a.txt")
        out.append((first.entry is second.entry, first.entry.refcount))
        first.entry.send_to_cache_future.result()
        out.append(len(list(pool.cache_dir.glob("*"))))
        sample = {"__sources__": ()}
        out.append((first.get(sample), first.entry.refcount, second.get(sample), second.entry.refcount))
        out.append((_records(sample), len(list(pool.cache_dir.glob("*"))), pool.current_cache_count))
        unread = pool.get_lazy(raw, "big.bin")
        unread.entry.send_to_cache_future.result()
        out.append((pool.current_cache_size, pool.current_cache_count))
        del unread
        gc.collect()
        out.append((pool.current_cache_size, pool.current_cache_count, list(pool.cache_dir.glob("*"))))
        moved = pool.to_cache({"k": [1, 2]}, "moved")
        path = moved.cache_path
        out.append((path.parent == pool.cache_dir, moved.get(), moved.get(), moved.cache_path, path.exists()))
    finally:
        pool.close()
    nocache = cache.NoCachePool()
    sample = {"__sources__": None}
    lazy = nocache.get_lazy(decoded, "b.txt")
    out.append((type(lazy).__name__, lazy.get(sample), nocache.to_cache(3, "n").get(), _records(sample)))
    primary = cache.PrimaryFileStore(raw, current_key="a")
    out.append((primary.get(".txt"), primary.get_path(), primary["b.txt"][0]))
    return out


@pytest.mark.parametrize("method", ["raw", "pickle"])
def test_cache_pool_matches_energon(tmp_path: Path, method: str) -> None:
    (energon, facade) = (_run(*lib, tmp_path / name, method) for lib, name in zip(_libs(), ("e", "d")))
    assert facade == energon


def test_system_file_store_matches_energon(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.txt").write_bytes(b"hello")
    results = []
    for cache in (mcache, dcache):
        store = cache.SystemFileStore(tmp_path)
        sample: dict = {"__sources__": None}
        results.append((store.get("sub/f.txt", sample), store.get_path(), _records(sample)))
    assert results[1] == results[0]


def test_sample_decoder_matches_energon() -> None:
    from megatron.energon.flavors.webdataset.sample_decoder import SampleDecoder as MeDecoder

    from datareel.energon.flavors.webdataset.sample_decoder import SampleDecoder as DrDecoder

    files = {"k.txt": b"text", "k.json": b'{"a": [1]}', "k.cls": b"7", "k.bin": b"\x00\x01"}
    for name, raw in files.items():
        assert DrDecoder().decode(name, raw) == MeDecoder().decode(name, raw), name
    assert DrDecoder(image_decode="pil").config() == MeDecoder(image_decode="pil").config()
    with pytest.raises(datareel.OptionError, match="image_decode"):
        DrDecoder(image_decode="jpeg-please")


def test_cache_pool_crosses_to_a_worker(tmp_path: Path) -> None:
    """An unpickled pool (a spawned worker's) starts afresh: its own cache directory, nothing pending."""
    pool = dcache.FileStoreCachePool(parent_cache_dir=tmp_path, num_workers=1, max_cache_count=3)
    pool.max_cache_size = 4096
    copy = pickle.loads(pickle.dumps(pool))
    try:
        assert (copy.max_cache_size, copy.max_cache_count, copy.current_cache_count) == (4096, 3, 0)
        assert copy.cache_dir != pool.cache_dir and copy.cache_dir.parent == pool.cache_dir.parent
        lazy = copy.get_lazy(_store(dcache, den.SourceInfo), "a.txt")
        assert lazy.get() == b"alpha"
    finally:
        copy.close()
        pool.close()
