"""A URL scheme registered from a test module alone (issue 26, item 4): ``mem://`` over a dict of bytes.

A prepared WebDataset (its shards, ``.tar.idx`` files and ``.nv-meta/``, as ``datareel prepare`` writes
them) and an indexed JSONL file are copied into the dict; ``datareel.open_dataset("mem://...")`` opens
each, reads the same samples as from the local copy, and a Loader over them hands out the same batches,
in this process and in DataLoader workers.  Nothing under ``src/`` knows the scheme: the store below is
the whole of it.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import datareel
from datareel.cli.prepare import prepare_jsonl, prepare_webdataset
from datareel.errors import DatasetError, NotFound
from datareel.storage import ObjectInfo, StoreFiles, register_scheme, unregister_scheme
from wds_helpers import build_shards


class MemFiles(StoreFiles):
    """A store over a dict ``{url: bytes}``: ``info`` and ``read_range`` are all a scheme needs to be read."""

    def __init__(self, blobs: dict[str, bytes], prefetches: bool = False):
        self.blobs = blobs
        self.prefetches = prefetches
        self.calls: list[tuple[str, ...]] = []  # what was asked of the store, in order

    def info(self, path: str) -> ObjectInfo:
        self.calls.append(("info", path))
        if path not in self.blobs:
            raise NotFound(f"{path} does not exist")
        return ObjectInfo(len(self.blobs[path]))

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        self.calls.append(("read_range", path))
        data = self.blobs.get(path)
        if data is None:
            raise NotFound(f"{path} does not exist")
        if stop > len(data):
            raise DatasetError(f"{path}: bytes [{start}, {stop}) asked of {len(data)}")
        return data[start:stop]

    def read_ranges(self, wanted):
        self.calls.append(("read_ranges", str(len(wanted))))
        return super().read_ranges(wanted)


def copy_in(blobs: dict[str, bytes], local: Path, url: str) -> None:
    """Every file under ``local`` (or the file itself) into ``blobs`` under ``url``."""
    files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
    for path in files:
        relative = path.name if local.is_file() else path.relative_to(local).as_posix()
        blobs[f"{url}/{relative}"] = path.read_bytes()


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """One prepared WebDataset, one indexed JSONL file and a metadataset blending them, locally and in
    ``mem://lake``; the scheme is registered for the module. -> (local root, the store)"""
    root = tmp_path_factory.mktemp("mem")
    build_shards(root / "wds")
    prepare_webdataset(root / "wds", progress=False)
    jsonl = root / "text.jsonl"
    jsonl.write_text("".join(f'{{"i": {i}, "text": "line {i}"}}\n' for i in range(23)))
    prepare_jsonl(jsonl)
    (root / "mix.yaml").write_text(
        "__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - {path: wds, weight: 2}\n      - {path: text.jsonl, weight: 1}\n"
    )
    blobs: dict[str, bytes] = {}
    copy_in(blobs, root / "wds", "mem://lake/wds")
    for name in ("text.jsonl", "text.jsonl.idx", "mix.yaml"):
        copy_in(blobs, root / name, "mem://lake")
    store = MemFiles(blobs)
    register_scheme("mem", lambda: store)
    yield root, store
    unregister_scheme("mem")


def records(dataset) -> list[dict]:
    out = []
    for source in getattr(dataset, "leaves", lambda: [dataset])():
        for i in range(len(source)):
            sample = dict(source.read(i))
            sample.pop("__sources__", None)  # names the dataset by its URL, which differs from its local copy's
            out.append({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in sample.items()})
    return out


def batches(loader, count: int) -> list[list[str]]:
    """The keys of the first ``count`` micro-batches ``loader`` hands out (a blend is endless)."""
    return [batch["key"] for batch in itertools.islice(loader, count)]


class Keys:
    """Each sample as its source and key (a blend of two formats collates)."""

    def encode_sample(self, sample):
        return {"key": f"{sample['__source__']}/{sample['__key__']}"}


@pytest.mark.parametrize("name", ["wds", "text.jsonl", "mix.yaml"])
def test_a_registered_scheme_opens_a_dataset_with_the_samples_of_its_local_copy(lake, name):
    root, store = lake
    remote, local = datareel.open_dataset(f"mem://lake/{name}"), datareel.open_dataset(root / name)
    got, expected = records(remote), records(local)
    assert len(got) == len(expected) > 0
    assert got == expected
    assert any(path.startswith(f"mem://lake/{name}") for _, path, *_ in store.calls)  # read through the store


@pytest.mark.parametrize("name", ["wds", "text.jsonl", "mix.yaml"])
def test_a_loader_over_a_registered_scheme_gives_the_batches_of_the_local_copy(lake, name):
    root, _ = lake
    options = dict(global_batch_size=4, micro_batch_size=2, seed=7, task_encoder=Keys())
    got = batches(datareel.Loader(datareel.open_dataset(f"mem://lake/{name}"), **options), 12)
    assert got == batches(datareel.Loader(datareel.open_dataset(root / name), **options), 12)


@pytest.mark.workers
def test_dataloader_workers_read_a_registered_scheme(lake):
    root, _ = lake
    options = dict(global_batch_size=4, micro_batch_size=2, seed=3, task_encoder=Keys())
    got = batches(datareel.Loader(datareel.open_dataset("mem://lake/mix.yaml"), num_workers=2, **options), 10)
    assert got == batches(datareel.Loader(datareel.open_dataset(root / "mix.yaml"), **options), 10)


def test_a_store_that_prefetches_gets_a_micro_batchs_ranges_together(lake):
    """A store that says it gains by prefetching (``prefetches = True``) is asked for each micro-batch's
    ranges in one ``read_ranges`` call; the batches are the same."""
    root, store = lake
    eager = MemFiles({k.replace("mem://", "mem-eager://"): v for k, v in store.blobs.items()}, prefetches=True)
    register_scheme("mem-eager", lambda: eager)
    try:
        options = dict(global_batch_size=4, micro_batch_size=4, seed=1, repeat=False, task_encoder=Keys())
        dataset = datareel.open_dataset("mem-eager://lake/wds")
        got = [b["key"] for b in datareel.Loader(dataset, **options)]
        expected = [b["key"] for b in datareel.Loader(datareel.open_dataset(root / "wds"), **options)]
        assert got == expected
        asked = [call for call in eager.calls if call[0] == "read_ranges"]
        assert [int(n) for _, n in asked] == [len(batch) for batch in got]  # one call per micro-batch
    finally:
        unregister_scheme("mem-eager")


def test_a_missing_shard_in_a_registered_store_is_named_and_asked_for_once(lake):
    _, store = lake
    blobs = {k.replace("mem://lake/", "mem-holes://holes/"): v for k, v in store.blobs.items()}
    del blobs["mem-holes://holes/wds/parts/data-1.tar"]
    holes = MemFiles(blobs)
    register_scheme("mem-holes", lambda: holes)
    try:
        dataset = datareel.open_dataset("mem-holes://holes/wds")
        first = int(dataset.starts[1])
        for i in range(first, first + 3):
            before = len(holes.calls)
            with pytest.raises(datareel.errors.StorageError, match=r"shard mem-holes://holes/wds/parts/data-1\.tar"):
                dataset.read(i)
            assert len(holes.calls) - before == (1 if i == first else 0)  # remembered after the first answer
    finally:
        unregister_scheme("mem-holes")


class WritableMemFiles(MemFiles):
    """A store that also lists, writes and deletes: ``datareel prepare`` can index shards inside it."""

    def list(self, prefix: str) -> list[str]:
        return sorted(url for url in self.blobs if url.startswith(prefix.rstrip("/") + "/"))

    def write(self, path: str, data: bytes) -> None:
        self.blobs[path] = bytes(data)

    def delete(self, path: str) -> None:
        self.blobs.pop(path, None)


def test_prepare_indexes_shards_inside_a_registered_store(tmp_path):
    """`datareel prepare mem-raw://...` on shards only the store holds writes the metadata a local prepare
    writes (its .idx files byte for byte), and the dataset then reads as the local copy does."""
    from datareel.cli import main

    build_shards(tmp_path / "raw")
    blobs: dict[str, bytes] = {}
    copy_in(blobs, tmp_path / "raw", "mem-raw://lake/raw")
    register_scheme("mem-raw", lambda: WritableMemFiles(blobs))
    try:
        assert main(["prepare", "mem-raw://lake/raw", "--quiet"]) == 0
        prepare_webdataset(tmp_path / "raw", workers=1, progress=False)  # in this process
        for shard in sorted((tmp_path / "raw").rglob("*.tar")):
            relative = shard.relative_to(tmp_path / "raw").as_posix()
            assert blobs[f"mem-raw://lake/raw/{relative}.idx"] == Path(f"{shard}.idx").read_bytes()
        assert records(datareel.open_dataset("mem-raw://lake/raw")) == records(datareel.open_dataset(tmp_path / "raw"))
        assert main(["prepare", "mem-raw://lake/raw", "--quiet"]) == 1  # prepared already: --overwrite to redo
    finally:
        unregister_scheme("mem-raw")


def test_an_unregistered_scheme_is_refused_naming_how_to_register_one():
    with pytest.raises(DatasetError, match=r"no store is registered for URL scheme nowhere://.*register_scheme"):
        datareel.open_dataset("nowhere://lake/wds")
    with pytest.raises(datareel.OptionError, match="registered already"):
        register_scheme("s3", lambda: None)


def test_file_urls_are_local_paths(lake):
    root, _ = lake
    local = datareel.open_dataset(root / "wds")
    assert len(datareel.open_dataset(f"file://{root / 'wds'}")) == len(local)
    np.testing.assert_array_equal(
        datareel.open_dataset(f"file://{root / 'text.jsonl'}").byte_sizes(np.arange(3)),
        datareel.open_dataset(root / "text.jsonl").byte_sizes(np.arange(3)),
    )


def test_a_refused_register_format_leaves_the_registry_as_it_was():
    import dataclasses

    from datareel import formats

    before = list(formats.FORMATS)
    with pytest.raises(datareel.OptionError, match="before='nope'"):
        formats.register_format(dataclasses.replace(formats.JSONL), before="nope")
    assert formats.FORMATS == before
