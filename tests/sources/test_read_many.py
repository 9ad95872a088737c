"""Reading a micro-batch's samples together (Source.read_many and the tar fast path) gives exactly what
reading them one by one gives, on every kind of tar member and on damaged data, where it leaves the sample
to read() (which parses it or names the damage); and the loader's batches do not change with it."""

from __future__ import annotations

import os
import tarfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import DatareelError
from datareel.sources.tarparse import BLOCK, TarFormatError, iter_members, plain_members
from datareel.sources.view import SourceView
from datareel.sources.webdataset import WebDatasetSource
from profiles import examples
from tar_bits import header, pax
from wds_helpers import build_shards, sample_parts, write_shard


def plain(name: bytes, data: bytes) -> bytes:
    return header(name, size=len(data)) + data + b"\0" * (-len(data) % BLOCK)


def spaced(name: bytes, data: bytes) -> bytes:
    """A header whose numbers are space-led and space-ended, as some writers make them."""
    h = bytearray(header(name, size_field=f" {len(data):o} ".rjust(11).encode() + b"\0"))
    h[148:156] = b" " * 8
    h[148:156] = f" {sum(h):o}\0".rjust(7).encode() + b" "
    return bytes(h) + data + b"\0" * (-len(data) % BLOCK)


def damaged(member: bytes, at: int) -> bytes:
    out = bytearray(member)
    out[at % len(out)] ^= 0x5A
    return bytes(out)


DATA = st.binary(max_size=1200)
KEY = st.sampled_from([b"a", b"b", b"dir/c", b"__meta__", b"noext"])
PART = st.sampled_from([b".txt", b".bin", b".json", b".x.txt", b""])


@st.composite
def member(draw) -> bytes:
    name, data = draw(KEY) + draw(PART), draw(DATA)
    kind = draw(
        st.sampled_from(
            ["plain", "plain", "plain", "spaced", "pax", "gnu", "prefix", "dir", "damaged", "overlong", "negative"]
        )
    )
    if kind == "plain":
        return plain(name, data)
    if kind == "spaced":
        return spaced(name, data)
    if kind == "pax":
        record = b"path=" + name + b"\n"
        length = len(record) + 3
        return pax(f"{length + (len(str(length)) - 2)} ".encode() + record) + plain(b"PaxName", data)
    if kind == "gnu":
        return header(b"././@LongLink", kind=b"L", size=len(name) + 1) + (name + b"\0").ljust(BLOCK, b"\0")
    if kind == "prefix":
        h = bytearray(header(name, size=len(data)))
        h[345:349] = b"pre/"
        h[148:156] = b" " * 8
        h[148:156] = f"{sum(h):06o}\0 ".encode()
        return bytes(h) + data + b"\0" * (-len(data) % BLOCK)
    if kind == "dir":
        return header(name + b"/", kind=b"5")
    if kind == "overlong":  # a valid header claiming more data than follows: it would swallow the next sample
        return header(name, size=len(data) + draw(st.integers(1, 2000))) + data + b"\0" * (-len(data) % BLOCK)
    if kind == "negative":  # base-8 text with a sign, valid checksum
        return header(name, size_field=b"-0000000001\0")
    return damaged(plain(name, data), draw(st.integers(0, 700)))


SAMPLE = st.one_of(
    st.lists(member(), min_size=1, max_size=4).map(b"".join),
    st.tuples(st.lists(member(), min_size=1, max_size=3).map(b"".join), st.binary(min_size=1, max_size=1100)).map(
        b"".join
    ),  # members, then stray bytes (under a block, or blocks of garbage)
    st.lists(member(), max_size=2).map(lambda ms: b"\0" * BLOCK + b"".join(ms)),  # an end block, then members
    st.binary(max_size=700),  # garbage, truncated
    st.just(b"\0" * 1024),  # end blocks
)


def parse_one_by_one(blob: bytes, start: int):
    try:
        return list(iter_members(blob, "t.tar", start))
    except TarFormatError:
        return "error"


@settings(max_examples=examples(3))
@given(samples=st.lists(SAMPLE, min_size=1, max_size=8), plain_only=st.lists(st.tuples(KEY, DATA), max_size=4))
def test_plain_members_agrees_with_iter_members_or_leaves_the_sample(samples, plain_only):
    every_plain = b"".join(plain(k + b".txt", d) for k, d in plain_only)  # always taken by the fast path
    samples = [*samples, every_plain] if every_plain else samples
    data = b"".join(samples)
    starts = np.cumsum([0] + [len(s) for s in samples])[:-1].tolist()
    stops = [a + len(s) for a, s in zip(starts, samples)]
    fast = plain_members(data, starts, stops)
    assert len(fast) == len(samples)
    for blob, start, got in zip(samples, starts, fast):
        if got is not None:
            assert got == parse_one_by_one(blob, start)  # same names, offsets into data, sizes
    if every_plain:
        assert fast[-1] == parse_one_by_one(every_plain, starts[-1]) and fast[-1] is not None


# -- a prepared dataset with every member kind, read together and one by one --------------------------


@pytest.fixture
def mixed(tmp_path):
    build_shards(tmp_path, shard_sizes=(5, 6, 3))  # PAX format; shard 1: GNU long names and nested keys
    write_shard(
        tmp_path / "parts/data-3.tar",
        [(f"u{i:03d}", {**sample_parts(i), "seg.txt": b"dotted part", "cls": b"7"}) for i in range(4)],
        fmt=tarfile.USTAR_FORMAT,
    )
    prepare_webdataset(tmp_path, progress=False)
    return tmp_path


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "shape"):
        return type(a) is type(b) and np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


@pytest.mark.parametrize("decode", [True, False])
def test_read_many_gives_what_read_gives(mixed, decode):
    source = datareel.open_dataset(mixed, decode=decode)
    n = len(source)
    indices = np.array([*range(n), n - 1, 0, -1, n, n + 5], dtype=np.int64)  # repeats and out of range
    together = source.read_many(indices)
    taken = 0
    for i, sample in zip(indices.tolist(), together):
        if not 0 <= i < n:
            assert sample is None
            continue
        if sample is not None:
            taken += 1
            assert same(sample, source.read(i)), i
    assert taken == n - 6 + 2  # all but shard 1's 6 GNU long names go the fast way, repeats too
    view = SourceView(source, start=2, stop=n - 1)
    through_view = view.read_many(np.arange(-1, len(view) + 1))
    assert (
        through_view[0] is None and through_view[-1] is None and sum(s is not None for s in through_view) == 9
    )  # 2..16 minus 5..10
    assert all(s is None or same(s, view.read(j - 1)) for j, s in enumerate(through_view))


def test_damage_is_left_to_read_which_names_it(mixed):
    shard = mixed / "parts/data-0.tar"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF  # sample 0's first header: its checksum no longer matches
    shard.write_bytes(bytes(data))
    source = WebDatasetSource(mixed)
    got = source.read_many(np.arange(5, dtype=np.int64))
    assert got[0] is None and all(s is not None for s in got[1:])
    with pytest.raises(DatareelError, match="no valid tar header at byte 0"):
        source.read(0)
    idx = mixed / "parts/data-2.tar.idx"
    words = np.fromfile(idx, dtype="<u8")
    words[1] = 1 << 40  # sample 0 of shard 2 now ends past the shard's indexed bytes
    words.tofile(idx)
    fresh = WebDatasetSource(mixed)
    first = int(fresh.starts[2])
    assert fresh.read_many(np.array([first, first + 1]))[0] is None
    with pytest.raises(DatareelError, match="index is damaged"):
        fresh.read(first)


@pytest.mark.parametrize(
    "on_error, decode, stage",
    [("raise", False, None), ("substitute", False, None), ("raise", True, None), ("substitute", True, "windowed")],
)
def test_loader_batches_do_not_change_when_samples_are_read_together(mixed, monkeypatch, on_error, decode, stage):
    if on_error == "substitute":  # a damaged sample, substituted the same way either way
        shard = mixed / "parts/data-0.tar"
        data = bytearray(shard.read_bytes())
        data[10] ^= 0xFF
        shard.write_bytes(bytes(data))

    def batches():
        loader = datareel.Loader(
            datareel.open_dataset(mixed, decode=decode),
            global_batch_size=4,
            micro_batch_size=2,
            world_size=2,
            rank=1,
            seed=3,
            on_error=on_error,
            task_encoder=Twice() if stage else AsList(),  # the windowed planner reads chunks of a window
            stage=datareel.WindowedStage(window=5, background=False) if stage else None,
        )
        return [b for _, b in zip(range(12), loader)]  # 3 passes over 18 samples

    together = batches()
    monkeypatch.setattr(WebDatasetSource, "read_many", lambda self, indices: [None] * len(indices))
    one_by_one = batches()
    assert len(together) == len(one_by_one) == 12
    for a, b in zip(together, one_by_one):
        assert len(a) == len(b) == 2 and all(same(x, y) for x, y in zip(a, b))


class AsList:
    def batch(self, samples):
        return samples


class Twice(AsList):
    """Two outputs per input (a generator encoder): a micro-batch names an input twice."""

    def encode_sample(self, sample):
        yield sample
        yield {**sample, "copy": True}


def test_a_subclass_reading_its_own_way_and_big_samples_are_read_one_by_one(mixed, monkeypatch):
    class Own(WebDatasetSource):
        def read(self, index):
            return {"mine": index}

    assert Own(mixed).read_many(np.arange(3)) == [None] * 3
    source = WebDatasetSource(mixed)
    first = source.read_many(np.arange(5))
    monkeypatch.setattr("datareel.formats.webdataset.reader.READ_MANY_BYTES", 1)  # the first sample, then no more
    capped = source.read_many(np.arange(5))
    assert same(capped[0], first[0]) and capped[1:] == [None] * 4


@pytest.mark.workers
def test_the_workers_result_pipe_holds_a_whole_batch(mixed):
    import fcntl

    from datareel.execute.workers import RESULT_PIPE_BYTES

    loader = datareel.Loader(
        datareel.open_dataset(mixed, decode=False),
        global_batch_size=4,
        micro_batch_size=4,
        num_workers=2,
        task_encoder=AsList(),
    )
    it = iter(loader)
    first = next(it)
    reader = it.inner._worker_result_queue._reader
    ceiling = int(open("/proc/sys/fs/pipe-max-size").read())
    if ceiling < RESULT_PIPE_BYTES and os.geteuid() != 0:
        pytest.skip(f"this host caps pipes at {ceiling} bytes (best effort: left as it is)")
    assert fcntl.fcntl(reader.fileno(), fcntl.F_GETPIPE_SZ) == RESULT_PIPE_BYTES
    assert len(first) == 4
    loader.close()
