"""A micro-batch read as columns (one read per run of adjacent samples, every tar header parsed at once,
the default collate built from the columns) gives the very batch the per-sample path gives, key for key
and value for value; and where it cannot (any member that is not plain, damage, samples that differ in
their parts, a hook that runs per sample), it leaves the micro-batch to that path, which names what is
wrong as before."""

from __future__ import annotations

import gzip
import json
import tarfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import BatchError, TarFormatError
from datareel.execute import batch as batch_module
from datareel.formats.webdataset.columns import plain_columns
from datareel.formats.webdataset.members import group
from datareel.formats.webdataset.tarparse import BLOCK, iter_members
from profiles import examples
from tar_bits import header, pax
from wds_helpers import write_shard

# -- the header parse alone, against the per-sample parser ---------------------------------------------


def member(name: bytes, data: bytes, kind: str) -> bytes:
    if kind == "pax":  # a PAX path record naming the member
        record = b"path=" + name + b"\n"
        length = len(record) + 3
        return pax(f"{length + (len(str(length)) - 2)} ".encode() + record) + member(b"Other.x", data, "plain")
    if kind == "gnu":  # a GNU long name before it
        long = header(b"././@LongLink", kind=b"L", size=len(name) + 1) + (name + b"\0").ljust(BLOCK, b"\0")
        return long + member(name, data, "plain")
    h = bytearray(header(name, size=len(data)))
    if kind == "prefix":
        h[345:349] = b"pre/"
    if kind == "short-size":  # "%o\0" padded with NULs: valid, but not the 11 digits the fast walk reads
        h[124:136] = f"{len(data):o}".encode().ljust(12, b"\0")
    if kind == "dir":
        h[156:157] = b"5"
    if kind == "base-256":  # GNU's binary size: a leading 0x80 byte (valid; not octal digits)
        h[124:136] = b"\x80" + len(data).to_bytes(11, "big")
    if kind == "overlong":  # a size past the sample's bytes
        h[124:136] = f"{len(data) + 600:011o}\0".encode()
    h[148:156] = b" " * 8
    h[148:156] = f"{sum(h):06o}\0 ".encode()
    if kind == "damaged":
        h[20] ^= 0x41
    return bytes(h) + data + b"\0" * (-len(data) % BLOCK)


KIND = st.sampled_from(["plain"] * 8 + ["pax", "gnu", "prefix", "short-size", "dir", "damaged", "base-256", "overlong"])
KEY = st.sampled_from([b"a", b"b2", b"dir/c", b"d.e/f", b"__meta__", b"k\xc3\xa9", b"x\xff"])
PARTS = st.lists(st.sampled_from([b"txt", b"bin", b"x.txt", b"json", b"", b"a/b"]), min_size=1, max_size=3, unique=True)


@st.composite
def sample(draw, parts: list[bytes]) -> bytes:
    key = draw(KEY) + str(draw(st.integers(0, 99))).encode()
    if draw(st.booleans()):
        parts = draw(PARTS)  # this sample's own parts
    out = b""
    for part in parts:
        name = key + (b"." + part if part else b"")
        out += member(name, draw(st.binary(max_size=1100)), draw(KIND))
    if draw(st.integers(0, 9)) == 0:
        out += b"\x01" * draw(st.integers(1, 511))  # stray bytes after the last member
    return out


def one_by_one(blob: bytes, start: int):
    """What the per-sample path makes of one sample: ``(key, {part: bytes})``, or None where it raises."""
    try:
        return group(iter_members(blob, "t.tar", start), blob, start, ("t.tar", 0, start, start + len(blob)))
    except Exception:
        return None


@settings(max_examples=examples(3))
@given(data=st.data(), parts=PARTS, k=st.integers(1, 6))
def test_columns_are_what_each_sample_is_or_none(data, parts, k):
    samples = [data.draw(sample(parts)) for _ in range(k)]
    buffer = b"".join(samples)
    starts = np.cumsum([0, *map(len, samples)])[:-1].tolist()
    stops = [a + len(s) for a, s in zip(starts, samples)]
    got = plain_columns(buffer, starts, stops)
    each = [one_by_one(s, a) for s, a in zip(samples, starts)]
    if got is None:
        return
    for j, _blob in enumerate(samples):
        assert each[j] is not None, "the columns took a sample the per-sample path refuses"
        key, by_part = each[j]
        assert got.keys[j] == key and list(by_part) == list(got.parts)
        for p, part in enumerate(got.parts):
            offset, size = int(got.offsets[j, p]), int(got.sizes[j, p])
            assert buffer[offset : offset + size] == by_part[part]


@settings(max_examples=examples(1))
@given(
    k=st.integers(1, 8),
    parts=st.lists(st.sampled_from(["txt", "bin", "x.txt", "json", "cls"]), min_size=1, max_size=4, unique=True),
    sizes=st.lists(st.integers(0, 2000), min_size=32, max_size=32),
)
def test_plain_samples_sharing_their_parts_are_always_taken(k, parts, sizes):
    samples = [
        b"".join(
            member(f"dir/s{j}-é".encode() + b"." + p.encode(), b"z" * sizes[(j * 5 + i) % 32], "plain")
            for i, p in enumerate(parts)
        )
        for j in range(k)
    ]
    buffer = b"".join(samples)
    starts = np.cumsum([0, *map(len, samples)])[:-1].tolist()
    got = plain_columns(buffer, starts, [a + len(s) for a, s in zip(starts, samples)])
    assert got is not None and got.parts == tuple(parts) and got.keys == [f"dir/s{j}-é" for j in range(k)]


# -- the loader: the same batches with and without columns ----------------------------------------------


def per_sample(monkeypatch):
    """Make every micro-batch sample by sample (the path before columns)."""
    monkeypatch.setattr(batch_module, "batch_from_columns", lambda *a: None)


def same(a, b) -> bool:
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return type(a) is type(b) and a == b


def write_dataset(root, seed: int, shards: int, missing: bool, gz: bool, fmt: int) -> None:
    rng = np.random.default_rng(seed)
    for s in range(shards):
        samples = []
        for j in range(int(rng.integers(1, 9))):
            parts = {
                "txt": f"sample {s}/{j}".encode(),
                "json": json.dumps({"v": int(rng.integers(0, 9))}).encode(),
                "bin": rng.bytes(int(rng.integers(0, 1500))),
                "cls": str(int(rng.integers(0, 5))).encode(),
            }
            if gz:
                parts["txt.gz"] = gzip.compress(parts.pop("txt"), mtime=0)
            if missing and rng.random() < 0.2:
                parts.pop("bin")  # a sample without one part: that batch is the per-sample path's to refuse
            samples.append((f"k{s}-{j:03d}", parts))
        write_shard(root / f"s{s}.tar", samples, fmt)
    prepare_webdataset(root, progress=False, workers=1)


def run(dataset, *, decode, world, micro, shuffle, encoder=None, count=6, workers=0):
    """``count`` global batches' micro-batches of rank ``world - 1`` (exceptions as their type and message)."""
    loader = datareel.Loader(
        dataset,
        global_batch_size=micro * world,
        micro_batch_size=micro,
        world_size=world,
        rank=world - 1,
        seed=5,
        num_workers=workers,
        task_encoder=encoder,
        **({"shuffle": shuffle} if shuffle is not None else {}),
    )
    out = []
    it = iter(loader)
    for _ in range(count):
        try:
            out.append(next(it))
        except BatchError as exc:
            out.append(("error", type(exc).__name__, str(exc).split(":")[0]))
            it = iter(loader)  # as a user restarts: the micro-batch counts as consumed
    return out


@settings(max_examples=examples(0.25))
@given(
    seed=st.integers(0, 10_000),
    shards=st.integers(1, 3),
    missing=st.booleans(),
    gz=st.booleans(),
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    decode=st.booleans(),
    world=st.integers(1, 3),
    micro=st.integers(1, 5),
    blocks=st.sampled_from([None, 1, 4]),
    shape=st.sampled_from(["one", "filtered", "mixed"]),
)
def test_batches_are_the_per_sample_paths(
    tmp_path_factory, monkeypatch_module, seed, shards, missing, gz, fmt, decode, world, micro, blocks, shape
):
    root = tmp_path_factory.mktemp("ds")
    write_dataset(root / "a", seed, shards, missing, gz, fmt)
    write_dataset(root / "b", seed + 1, 1, False, gz, fmt)

    def dataset():
        a = datareel.open_dataset(root / "a", decode=decode, name="a")
        if shape == "filtered":
            return datareel.filter(a, lambda m: m.index % 3 != 1, progress=False)
        if shape == "mixed":
            return datareel.mix([(a, 2), (datareel.open_dataset(root / "b", decode=decode, name="b"), 1)])
        return a

    shuffle = None if blocks is None else datareel.BlockShuffle(block=blocks) if blocks > 1 else True
    columns = run(dataset(), decode=decode, world=world, micro=micro, shuffle=shuffle)
    with monkeypatch_module.context() as patch:
        per_sample(patch)
        samples = run(dataset(), decode=decode, world=world, micro=micro, shuffle=shuffle)
    assert len(columns) == len(samples)
    for a, b in zip(columns, samples):
        assert same(a, b), (a, b)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture
def plain(tmp_path):
    write_dataset(tmp_path, 0, 3, False, False, tarfile.USTAR_FORMAT)
    return tmp_path


def test_the_columns_are_used_and_hooks_turn_them_off(plain, monkeypatch):
    calls = []
    real = batch_module.batch_from_columns
    monkeypatch.setattr(batch_module, "batch_from_columns", lambda *a: calls.append(1) or real(*a))
    made = run(datareel.open_dataset(plain, decode=False), decode=False, world=1, micro=4, shuffle=True, count=2)
    assert len(calls) == 2 and all(isinstance(b, dict) and len(b["__key__"]) == 4 for b in made)
    source = datareel.open_dataset(plain)
    assert source.read_columns(np.arange(4)) is not None  # the default: all of it taken

    class Tagged(datareel.DefaultTaskEncoder):
        def encode_sample(self, sample):
            return {**sample, "tag": 1}

    calls.clear()
    tagged = run(
        datareel.open_dataset(plain, decode=False),
        decode=False,
        world=1,
        micro=4,
        shuffle=True,
        count=2,
        encoder=Tagged(),
    )
    assert not calls and tagged[0]["tag"].tolist() == [1, 1, 1, 1]  # a per-sample hook: sample by sample


def _tagged_sample(self, *args):
    return {**type(self).__mro__[1]._sample(self, *args), "tag": 1}


@pytest.mark.parametrize(
    "hook, override",
    [
        ("read", lambda self, index: {**type(self).__mro__[1].read(self, index), "mark": index}),
        ("_sample", _tagged_sample),
        ("_sources", lambda self, s, local, key, parts: ("custom",)),
        ("locate", lambda self, index: type(self).__mro__[1].locate(self, index)),
    ],
)
def test_a_subclass_with_its_own_per_sample_hook_is_read_sample_by_sample(plain, hook, override):
    source = datareel.open_dataset(plain, decode=False)
    assert source.read_columns(np.arange(4)) is not None
    source.__class__ = type("Own", (type(source),), {hook: override})
    assert source.read_columns(np.arange(4)) is None  # columns would bypass its hook
    batch = run(source, decode=False, world=1, micro=4, shuffle=False, count=1)[0]
    if hook == "_sample":
        assert batch["tag"].tolist() == [1, 1, 1, 1]
    if hook == "_sources":
        assert batch["__sources__"] == [("custom",)] * 4


def test_damage_found_by_the_columns_is_named_by_the_per_sample_path(plain):
    shard = plain / "s0.tar"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF  # the first header's checksum no longer holds
    shard.write_bytes(bytes(data))
    source = datareel.open_dataset(plain, decode=False)
    assert source.read_columns(np.arange(len(source))) is None
    with pytest.raises(TarFormatError, match="no valid tar header at byte 0"):
        source.read(0)
    loader = datareel.Loader(source, global_batch_size=len(source), micro_batch_size=len(source), shuffle=False)
    with pytest.raises(BatchError, match="no valid tar header at byte 0"):
        next(iter(loader))


def test_adjacent_samples_are_one_read(plain, monkeypatch):
    import os

    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: reads.append(n) or real(fd, n, at))
    source = datareel.open_dataset(plain, decode=False)
    first = int(source.starts[1] - source.starts[0])  # the first shard's samples, in order
    source.read(0)  # the shard opened and checked (its own reads)
    reads.clear()
    got = source.read_columns(np.arange(first))
    assert got is not None and len(reads) == 1 and got["__key__"] == [source.key(i) for i in range(first)]
    by_one = [source.read(i) for i in range(first)]
    assert got["bin"] == [s["bin"] for s in by_one] and got["__sources__"] == [s["__sources__"] for s in by_one]


def test_a_micro_batch_over_the_byte_bound_is_read_sample_by_sample(plain, monkeypatch):
    monkeypatch.setattr("datareel.formats.webdataset.column_reads.COLUMN_BYTES", 1)
    assert datareel.open_dataset(plain).read_columns(np.arange(3)) is None


@pytest.mark.workers
def test_workers_give_the_same_batches(plain, monkeypatch):
    columns = run(datareel.open_dataset(plain, decode=False), decode=False, world=2, micro=3, shuffle=True, workers=2)
    per_sample(monkeypatch)
    samples = run(datareel.open_dataset(plain, decode=False), decode=False, world=2, micro=3, shuffle=True)
    assert all(same(a, b) for a, b in zip(columns, samples)) and len(columns) == len(samples)
