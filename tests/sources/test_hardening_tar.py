"""Hostile tar bytes (issue 12, first part): every loop over a tar header or a pax record makes progress or
raises a named TarFormatError; real tar files still parse. (Split by layer from test_hardening.py.)"""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datareel.sources.tarparse import TarFormatError, scan_tar
from encoders import Keys
from hangs import must_return
from profiles import examples
from tar_bits import header, members, pax


@pytest.mark.parametrize(
    "payload", [b"0 path=x\n", b"1 path=x\n", b"x path=x\n", b"99 path=x\n", b"-5 path=x\n"], ids=repr
)
def test_a_pax_record_with_a_bad_length_is_a_named_error_not_a_hang(payload):
    blob = pax(payload) + header(size=0) + b"\0" * 1024
    with pytest.raises(TarFormatError, match="PAX record at byte 0 .* claims length"):
        members(blob)


def test_a_negative_member_size_is_refused_not_looped_on():
    minus_512 = b"\xff" + (-512 % (1 << 88)).to_bytes(11, "big")  # base-256 encoding of -512
    blob = header(size_field=minus_512) + b"\0" * 1024
    with pytest.raises(TarFormatError, match="negative member size"):
        members(blob)
    with must_return(), pytest.raises(TarFormatError, match="negative member size"):
        list(scan_tar(io.BytesIO(blob), "fuzz.tar"))


def test_an_extended_header_claiming_gigabytes_is_refused_before_reading():
    blob = header(b"PaxHeader", kind=b"x", size=4 << 30) + b"\0" * 1024
    with must_return(), pytest.raises(TarFormatError, match="claims 4294967296 bytes"):
        list(scan_tar(io.BytesIO(blob), "fuzz.tar"))


def test_a_well_formed_pax_path_still_names_the_member():
    record = b"path=dir/long-name.txt\n"
    length = len(record) + 3
    blob = pax(f"{length} ".encode() + record) + header(b"ignored.txt", size=3) + b"abc" + b"\0" * (509 + 1024)
    assert [(name, size) for name, _, size in members(blob)] == [("dir/long-name.txt", 3)]


@settings(max_examples=examples(3))
@given(
    size_field=st.binary(min_size=12, max_size=12),
    kind=st.sampled_from([b"0", b"x", b"L", b"5", b"2", b"\0"]),
    payload=st.binary(max_size=600),
)
def test_fuzzed_headers_parse_or_raise_a_tar_format_error(size_field, kind, payload):
    blob = header(size_field=size_field, kind=kind) + payload + b"\0" * 1024
    for parse in (lambda: members(blob), lambda: list(scan_tar(io.BytesIO(blob), "fuzz.tar"))):
        try:
            with must_return():
                parse()
        except TarFormatError:
            pass


@settings(max_examples=examples(2.4))
@given(records=st.lists(st.tuples(st.integers(-3, 40), st.binary(max_size=30)), max_size=5))
def test_fuzzed_pax_records_parse_or_raise_a_tar_format_error(records):
    payload = b"".join(f"{n} ".encode() + body for n, body in records)
    blob = pax(payload) + header(size=0) + b"\0" * 1024
    try:
        members(blob)
    except TarFormatError:
        pass


def test_real_tar_files_still_parse(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((f"{'d/' * 60}k1.txt", b"hello"), ("k2.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    names = [name for name, _, _ in members(buf.getvalue())]
    assert names == [f"{'d/' * 60}k1.txt", "k2.json"]


# -- extended headers as long as tar allows (issue 36, item 11) -----------------------------------------

MiB = 1 << 20


def _shard_with_pax_headers(path, sizes):
    """A shard whose sample ``k{i}`` has a PAX header of about ``sizes[i]`` bytes (a long ``comment`` record),
    written by Python's tarfile. -> {key: {part: bytes}} as written."""
    written = {}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for i, size in enumerate(sizes):
            key = f"k{i}"
            written[key] = {"txt": f"text {i}".encode(), "bin": bytes([i]) * (i * 700)}
            for part, data in written[key].items():
                info = tarfile.TarInfo(f"{key}.{part}")
                info.size = len(data)
                if part == "txt" and size:
                    info.pax_headers = {"comment": "c" * size}
                tar.addfile(info, io.BytesIO(data))
    return written


def _pax_sizes(path):
    """The sizes of the shard's PAX headers, as their tar headers give them."""
    sizes, pos, blob = [], 0, path.read_bytes()
    while blob[pos : pos + 512].strip(b"\0"):
        size = int(blob[pos + 124 : pos + 136].split(b"\0")[0], 8)
        if blob[pos + 156 : pos + 157] == b"x":
            sizes.append(size)
        pos += 512 + (size + 511) // 512 * 512
    return sizes


def test_pax_headers_of_a_mebibyte_and_more_prepare_and_read_as_tarfile_and_webdataset_read_them(tmp_path):
    """No fixed cap on an extended header: sizes either side of 1 MiB (the old cap, whose refusal said "claims
    1048593 bytes (at most 1048576 are read)") and well past it prepare, and the shard reads through
    ``open_dataset`` and the Loader as Python's tarfile and webdataset read it."""
    import webdataset

    import datareel
    from datareel.cli.prepare import prepare_webdataset

    root = tmp_path / "ds"
    root.mkdir()
    written = _shard_with_pax_headers(root / "big.tar", [0, MiB - 64, MiB - 16, MiB, MiB + 1, 3 * MiB, 5])
    assert min(s for s in _pax_sizes(root / "big.tar") if s > MiB) <= MiB + 32  # the 1048593 is among them
    assert max(_pax_sizes(root / "big.tar")) > 3 * MiB
    with tarfile.open(root / "big.tar") as tar:  # Python's reading
        by_tarfile: dict[str, dict[str, bytes]] = {}
        for member in tar:
            key, part = member.name.split(".", 1)
            by_tarfile.setdefault(key, {})[part] = tar.extractfile(member).read()
    by_webdataset = {
        s["__key__"]: {p: v for p, v in s.items() if not p.startswith("__")}
        for s in webdataset.WebDataset(str(root / "big.tar"), shardshuffle=False)
    }
    assert by_tarfile == by_webdataset == written

    report = prepare_webdataset(root, progress=False, workers=1)
    assert report.samples == len(written)
    dataset = datareel.open_dataset(root, decode=False)
    read = {
        s["__key__"]: {p: bytes(v) for p, v in s.items() if p in ("txt", "bin")}
        for s in map(dataset.read, range(len(dataset)))
    }
    assert read == written
    everything = np.arange(len(dataset))
    for block in (1, 4):  # read together (None: left to read), and by blocks of 4
        many = [s if s is not None else dataset.read(i) for i, s in enumerate(dataset.read_many(everything, block))]
        assert {s["__key__"]: bytes(s["bin"]) for s in many} == {k: v["bin"] for k, v in written.items()}
    loader = datareel.Loader(
        dataset, global_batch_size=len(written), micro_batch_size=len(written), shuffle=False, task_encoder=Keys()
    )
    assert sorted(next(iter(loader))) == sorted(written)


def test_an_extended_header_claiming_more_than_the_shard_holds_is_a_named_error_at_prepare(tmp_path):
    import datareel
    from datareel.cli.prepare import prepare_webdataset

    root = tmp_path / "ds"
    root.mkdir()
    _shard_with_pax_headers(root / "ok.tar", [MiB + 1])
    blob = (root / "ok.tar").read_bytes()
    claimed = len(blob)  # the shard's whole size: more than it holds after the header
    fake = header(b"PaxHeader", kind=b"x", size=claimed)
    (root / "ok.tar").write_bytes(fake + blob[512:])
    named = rf"ok\.tar: the extended header at byte 0 claims {claimed} bytes, but the file holds only {claimed - 512} "
    with must_return(), pytest.raises(datareel.DatasetError, match=named + "after it; the shard is truncated"):
        prepare_webdataset(root, progress=False, workers=1)
    assert not (root / ".nv-meta").exists()
