"""Hostile tar bytes (issue 12, first part): every loop over a tar header or a pax record makes progress or
raises a named TarFormatError; real tar files still parse. (Split by layer from test_hardening.py.)"""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datareel.sources.tarparse import TarFormatError, scan_tar
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
