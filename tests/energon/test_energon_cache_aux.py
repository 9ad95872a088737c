"""Auxiliary datasets (a metadataset leaf's ``aux:``) and cookers with file stores, beside megatron.energon.

Both sides read the same two crude datasets (prepared by Energon's own ``prepare_dataset``): Energon
through its metadataset with ``aux:``; the facade through :func:`datareel.blend.aux.attach_aux` and
:func:`datareel.energon.task_encoder.cooking.bind_cookers` (what the metadataset parser and
``get_savable_loader`` call).  Over one epoch every key yields the same cooked type, text and
``__sources__`` records on both sides; the facade's order is datareel's (elastic), so samples are
compared by key.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import datareel
from datareel import energon as den
from datareel.blend.aux import attach_aux
from datareel.energon.task_encoder.cooking import bind_cookers

me = pytest.importorskip("megatron.energon")
wds = pytest.importorskip("webdataset")

N = 12
AUX = {"pkl_source": "ds2", "fs_source": "filesystem://."}


def _dataset(path: Path, offset: int) -> None:
    from megatron.energon.flavors import BaseWebdatasetFactory

    (path / "parts").mkdir(parents=True)
    with wds.ShardWriter(f"{path}/parts/data-%d.tar", maxcount=5, verbose=0) as writer:
        for i in range(N):
            key = f"{i + offset:06d}"
            writer.write({"__key__": key, "txt": str(i + offset).encode(), "pkl": pickle.dumps({"i": i})})
        shards = writer.shard
    BaseWebdatasetFactory.prepare_dataset(
        path, [f"parts/data-{{0..{shards - 1}}}.tar"], split_parts_ratio=[("train", 1.0)], shuffle_seed=None, workers=1
    )
    (path / ".nv-meta" / "dataset.yaml").write_text(
        "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  crude_type: aux\n"
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("aux")
    _dataset(root / "ds1", 0)
    _dataset(root / "ds2", 100)
    (root / "note.txt").write_text("a note beside the datasets")
    lines = ["__module__: megatron.energon", "__class__: MetadatasetV2", "splits:", "  train:", "    path: ds1"]
    lines += ["    aux:", *(f"      {k}: {v}" for k, v in AUX.items())]
    (root / "aux.yaml").write_text("\n".join(lines) + "\n")
    return root


def _cook(sample, pkl_source, fs_source, sample_class, keys):
    partner = pkl_source.get(f"{int(sample['txt']) + 100:06d}.txt", sample)
    note = fs_source.get("note.txt", sample)[:6]  # a .txt file: decoded to str
    return sample_class(**keys(sample), text=f"{sample['txt']}|{partner}|{note}")


def _encoder(lib, cache: bool):
    """A task encoder of ``lib`` (megatron.energon or datareel.energon) whose cooker reads both aux stores
    (and, with ``cache``, the next sample of its own dataset through the loader's cache pool)."""

    @lib.stateless
    def cook(sample, pkl_source, fs_source):
        return _cook(sample, pkl_source, fs_source, lib.TextSample, lib.basic_sample_keys)

    @lib.stateless
    @lib.cooker(need_cache=True, need_primary=True)
    def cook_cached(sample, primary, pkl_source, fs_source, cache):
        out = _cook(sample, pkl_source, fs_source, lib.TextSample, lib.basic_sample_keys)
        lazy = cache.get_lazy(primary, f"{(int(sample['txt']) + 1) % N:06d}.txt")
        return lib.TextSample.derive_from(out, text=f"{out.text}|{lazy.get(out)}")

    class Encoder(lib.DefaultTaskEncoder):
        cookers = [lib.Cooker(cook_cached if cache else cook)]

        def batch(self, samples):
            return samples

    return Encoder()


def _records(sources) -> list[tuple]:
    return [(str(s.dataset_path), s.index, s.shard_name, tuple(s.file_names)) for s in sources]


def _by_key(loader) -> dict[str, tuple]:
    out = {}
    for batch in loader:
        for sample in batch:
            out[sample.__key__] = (type(sample).__name__, sample.text, _records(sample.__sources__))
        if len(out) == N:
            return out
    raise AssertionError(f"the loader ended after {len(out)} samples")


def _energon(root: Path, cache: bool) -> dict[str, tuple]:
    config = me.WorkerConfig(rank=0, world_size=1, num_workers=0)
    pool = me.FileStoreCachePool(parent_cache_dir=root / "cache-e", num_workers=1) if cache else None
    dataset = me.get_train_dataset(
        root / "aux.yaml",
        batch_size=1,
        worker_config=config,
        task_encoder=_encoder(me, cache),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    loader = me.get_savable_loader(dataset, cache_pool=pool)
    try:
        return _by_key(loader)
    finally:
        if pool is not None:
            pool.close()


def _facade(root: Path, cache: bool, workers: int) -> dict[str, tuple]:
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    pool = den.FileStoreCachePool(parent_cache_dir=root / "cache-d", num_workers=1) if cache else None
    encoder = _encoder(den, cache)  # the loader binds its cookers to the stores and cache_pool (bind_cookers)
    source = attach_aux(datareel.open_dataset(str(root / "ds1")), AUX, root)
    loader = den.get_savable_loader(
        den.get_train_dataset(source, batch_size=1, worker_config=config, task_encoder=encoder), cache_pool=pool
    )
    try:
        return _by_key(loader)
    finally:
        loader.close()
        if pool is not None:
            pool.close()


@pytest.mark.parametrize("cache", [False, True])
def test_aux_cookers_match_energon(root: Path, cache: bool) -> None:
    expected = _energon(root, cache)
    got = _facade(root, cache, workers=0)
    assert sorted(got) == sorted(expected) == [f"{i:06d}" for i in range(N)]
    assert got == expected


@pytest.mark.workers
def test_aux_cookers_in_workers_read_the_same(root: Path) -> None:
    """Stores and the cache pool reach forked workers (a pool starts afresh there) and read the same."""
    assert _facade(root, cache=True, workers=2) == _facade(root, cache=True, workers=0)


def test_aux_order_is_the_primary_sources(root: Path) -> None:
    """Attaching aux datasets changes no position of the reel: the same keys in the same order."""
    plain = datareel.open_dataset(str(root / "ds1"))
    with_aux = attach_aux(plain, AUX, root)
    assert len(with_aux) == len(plain)
    assert [with_aux.read(i)["__key__"] for i in range(N)] == [plain.read(i)["__key__"] for i in range(N)]


def test_aux_refusals(root: Path) -> None:
    plain = datareel.open_dataset(str(root / "ds1"))
    with pytest.raises(datareel.OptionError, match="reserved"):
        attach_aux(plain, {"primary": "ds2"}, root)
    with pytest.raises(datareel.DatasetError, match="not a prepared dataset"):
        attach_aux(plain, {"x": "nowhere"}, root)

    @den.cooker(need_cache=True)
    def cook(sample, cache):
        return sample

    class Encoder(den.DefaultTaskEncoder):
        cookers = [den.Cooker(cook)]

    encoder = Encoder()
    bind_cookers(encoder, None)
    with pytest.raises(datareel.OptionError, match="cache_pool="):
        encoder.cookers[0].cook(plain.read(0))
