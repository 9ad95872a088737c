"""Fuzzing every file datareel reads from a dataset, and the states it restores (issue 12).

Each input either works or raises a :class:`datareel.DatareelError` subclass naming what is wrong,
within a time bound (a hang is a failure, not a slow test) and without a huge allocation (a
damaged index that claims terabytes must be refused before reading).  Bounded for CI; run
longer with ``DATAREEL_EXAMPLES=5000 pytest tests/sources/test_fuzz.py``.

The tar header parser's own fuzz tests are in ``test_hardening_tar.py``.
"""

from __future__ import annotations

import io
import shutil
import struct
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import datareel
from datareel import DatareelError
from datareel.cli.prepare import prepare_jsonl, prepare_webdataset
from hangs import bounded
from profiles import examples
from wds_helpers import write_shard

FUZZ = settings(
    max_examples=examples(0.6),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)


def read_everything(path: Path) -> None:
    """Open a dataset and read every sample of it (the work a training pass would do)."""
    dataset = datareel.open_dataset(path, decode=False)
    sources = getattr(dataset, "leaves", lambda: [dataset])()
    for source in sources:
        for i in range(len(source)):
            source.read(i)


def works_or_refuses(path: Path) -> None:
    with bounded():
        try:
            read_everything(path)
        except DatareelError as exc:
            event(f"refused: {type(exc).__name__}")
        else:
            event("read")


# -- datasets to damage -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "wds"
    for s in range(2):
        write_shard(root / f"part-{s}.tar", [(f"k{s}{i}", {"txt": b"x" * (i + 1), "json": b"{}"}) for i in range(3)])
    prepare_webdataset(root, progress=False)
    return root


@pytest.fixture(scope="module")
def pristine_jsonl(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "data.jsonl"
    path.write_text("".join(f'{{"i": {i}, "text": "{"y" * i}"}}\n' for i in range(5)))
    prepare_jsonl(path)
    return path


@pytest.fixture
def copy_of(tmp_path):
    def make(source: Path) -> Path:
        target = tmp_path / f"case-{len(list(tmp_path.iterdir()))}" / source.name
        target.parent.mkdir()
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
        if source.suffix == ".jsonl":
            shutil.copy(f"{source}.idx", f"{target}.idx")
        return target

    return make


def test_the_pristine_datasets_read(pristine, pristine_jsonl):
    """The fuzz targets below start from datasets that read (so a refusal is caused by the damage)."""
    read_everything(pristine)
    read_everything(pristine_jsonl)


# -- offset indices ---------------------------------------------------------------------------------

OFFSET = st.one_of(
    st.integers(0, 4096),
    st.integers(0, 2**64 - 1),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 1 << 40, 1 << 36]),
)


def damage_index(data: bytes, draw) -> bytes:
    """Overwrite offsets with fuzzed ones, or truncate / extend / replace the file."""
    words = list(struct.unpack(f"<{len(data) // 8}Q", data))
    how = draw(st.sampled_from(["offsets", "truncate", "extend", "bytes"]))
    if how == "offsets":
        for _ in range(draw(st.integers(1, 3))):
            words[draw(st.integers(0, len(words) - 1))] = draw(OFFSET)
        return struct.pack(f"<{len(words)}Q", *words)
    if how == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "extend":
        return data + struct.pack("<Q", draw(OFFSET))
    return draw(st.binary(max_size=80))


@FUZZ
@given(data=st.data())
def test_a_damaged_tar_index_reads_or_is_refused(pristine, copy_of, data):
    root = copy_of(pristine)
    index = root / f"part-{data.draw(st.integers(0, 1))}.tar.idx"
    index.write_bytes(damage_index(index.read_bytes(), data.draw))
    works_or_refuses(root)


@FUZZ
@given(data=st.data())
def test_a_damaged_jsonl_index_reads_or_is_refused(pristine_jsonl, copy_of, data):
    path = copy_of(pristine_jsonl)
    index = Path(f"{path}.idx")
    index.write_bytes(damage_index(index.read_bytes(), data.draw))
    works_or_refuses(path)


# -- metadata documents -----------------------------------------------------------------------------

SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["train", "val", "part-0.tar", "part-{0..1}.tar", "part-1.tar/k10", "nan%", "50%", "end"]),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4)
    ),
    max_leaves=12,
)


def mutate(document, draw):
    """Replace one value somewhere in a parsed document with a fuzzed one (or the document itself)."""
    if not isinstance(document, (dict, list)) or not document or draw(st.integers(0, 4)) == 0:
        return draw(VALUE)
    keys = list(document) if isinstance(document, dict) else list(range(len(document)))
    key = draw(st.sampled_from(keys))
    out = dict(document) if isinstance(document, dict) else list(document)
    out[key] = mutate(document[key], draw)
    return out


@FUZZ
@given(data=st.data(), name=st.sampled_from([".info.json", "split.yaml", "dataset.yaml"]))
def test_damaged_dataset_metadata_reads_or_is_refused(pristine, copy_of, data, name):
    root = copy_of(pristine)
    path = root / ".nv-meta" / name
    if data.draw(st.booleans(), label="raw text"):
        text = data.draw(st.text(max_size=200))
    else:
        document = mutate(yaml.safe_load(path.read_text()), data.draw)
        try:
            text = yaml.safe_dump(document) if name.endswith("yaml") else __import__("json").dumps(document)
        except (ValueError, OverflowError):
            return  # not representable in this format
    path.write_text(text)
    works_or_refuses(root)


METADATASET = {
    "__class__": "MetadatasetV2",
    "splits": {
        "train": {
            "blend": [
                {"path": "wds", "weight": 2, "subflavors": {"a": 1}, "subset": {"range": ["10%", "end"]}},
                {"path": "data.jsonl", "weight": 1},
                {
                    "blend_epochized": [{"path": "wds", "repetitions": 2, "split_part": "train"}],
                    "weight": 1,
                },
            ]
        }
    },
}


@FUZZ
@given(data=st.data())
def test_a_damaged_metadataset_opens_or_is_refused(pristine, pristine_jsonl, copy_of, tmp_path, data):
    root = copy_of(pristine).parent
    shutil.copy(pristine_jsonl, root / "data.jsonl")
    shutil.copy(f"{pristine_jsonl}.idx", root / "data.jsonl.idx")
    if data.draw(st.booleans(), label="raw text"):
        text = data.draw(st.text(max_size=300))
    else:
        text = yaml.safe_dump(mutate(METADATASET, data.draw))
    (root / "meta.yaml").write_text(text)
    works_or_refuses(root / "meta.yaml")


def test_the_pristine_metadataset_opens(pristine, pristine_jsonl, copy_of):
    root = copy_of(pristine).parent
    shutil.copy(pristine_jsonl, root / "data.jsonl")
    shutil.copy(f"{pristine_jsonl}.idx", root / "data.jsonl.idx")
    (root / "meta.yaml").write_text(yaml.safe_dump(METADATASET))
    assert len(datareel.open_dataset(root / "meta.yaml").leaves()) == 3


# -- states -----------------------------------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_a_fuzzed_state_restores_or_is_refused(data):
    loader = datareel.Loader(datareel.from_sequence(list(range(20))), global_batch_size=4, micro_batch_size=2)
    state = loader.state_dict()
    fuzzed = data.draw(st.one_of(VALUE, st.builds(lambda s: mutate(s, data.draw), st.just(state))))
    with bounded():
        try:
            loader.load_state_dict(fuzzed)
        except DatareelError:
            return
    next(iter(loader))  # accepted: it must also work


# -- JSONL files: what prepares, reads ----------------------------------------------------------------

LINE = st.sampled_from(
    [
        b'{"a": 1}',
        b'{"b": [1, 2]}',
        b"",
        b"  ",
        b"\t",
        b"\x0c",
        b"\x0b",
        b"\r",
        b"{bad}",
        b'{"a": 1}{"b": 2}',
        b"\xef\xbb\xbf{}",
        b'{"s": "\xff"}',
        b"[1]",
        b"{",
        b"}",
        b'{"x": "\\u00e9"}',
        b" {} ",
    ]
)


@FUZZ
@given(lines=st.lists(LINE, max_size=8), ending=st.sampled_from([b"\n", b"\r\n", b"\r"]), last=st.booleans())
def test_a_jsonl_file_that_prepares_reads_every_sample(tmp_path_factory, lines, ending, last):
    path = tmp_path_factory.mktemp("jsonl") / "f.jsonl"
    path.write_bytes(ending.join(lines) + (ending if last else b""))
    with bounded():
        try:
            count = prepare_jsonl(path)
        except DatareelError:
            return  # refused at prepare: fine
        dataset = datareel.open_dataset(path)
        assert len(dataset) == count
        for i in range(count):
            assert isinstance(dataset.read(i)["json"], dict)  # no failure deferred to training


# -- whole shards: damaged bytes through prepare and reading --------------------------------------------


@pytest.fixture(scope="module")
def shard_bytes(pristine) -> bytes:
    return (pristine / "part-0.tar").read_bytes()


FIELDS = [
    range(0, 100),
    range(100, 124),
    range(124, 136),
    range(136, 148),
    range(156, 157),
    range(257, 265),
    range(345, 500),
]  # name, mode/uid/gid, size, mtime, type flag, magic/version, ustar prefix


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), min_size=1, max_size=6),
    header_edits=st.lists(
        st.tuples(
            st.integers(0, 5), st.sampled_from(FIELDS).flatmap(st.sampled_from), st.binary(min_size=1, max_size=12)
        ),
        max_size=4,
    ),
    fix_checksums=st.booleans(),
    cut=st.one_of(st.none(), st.integers(0, 4096)),
)
def test_a_damaged_shard_prepares_and_reads_or_is_refused(
    tmp_path_factory, shard_bytes, flips, header_edits, fix_checksums, cut
):
    """Edits anywhere in a shard, and in the fields of its member headers (with their checksums made
    valid again, so the parser has to deal with the field itself), and truncation."""
    import tarfile

    from datareel.sources.tarparse import BLOCK

    blob = bytearray(shard_bytes)
    headers = [m.offset for m in tarfile.open(fileobj=io.BytesIO(shard_bytes))]
    for where, value in flips:
        blob[where % len(blob)] = value
    for member, at, data in header_edits:
        start = headers[member % len(headers)] + at
        blob[start : start + len(data)] = data[: BLOCK - at]
        del blob[len(shard_bytes) :]  # keep the length: edits overwrite
    if fix_checksums:
        for h in headers:
            block = blob[h : h + BLOCK]
            block[148:156] = b" " * 8
            blob[h + 148 : h + 156] = f"{sum(block):06o}\0 ".encode()
    if cut is not None:
        blob = blob[:cut]
    root = tmp_path_factory.mktemp("shard")
    (root / "s.tar").write_bytes(bytes(blob))
    with bounded():
        try:
            prepare_webdataset(root, progress=False)
        except DatareelError:
            event("refused by prepare")
            return
    event("prepared")
    works_or_refuses(root)
