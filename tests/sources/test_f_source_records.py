"""The records an error handler is told of a failing sample (``__sources__``): building them must never
replace the sample's own error.  ``source_info_of`` re-reads a WebDataset sample's members to name them;
for a sample whose bytes are what failed, that re-read fails alike: it gives ``None``, never raises.
Records already known (noted on the exception) are taken as they are, with no second read; noting them
works on any exception, a frozen dataclass one included."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass

import pytest

from datareel.cli.prepare import prepare_webdataset
from datareel.formats.webdataset.reader import WebDatasetSource
from datareel.sources.source_info import failure_records, note_records, source_info_of
from wds_helpers import write_shard


@pytest.fixture()
def damaged(tmp_path):
    write_shard(tmp_path / "a.tar", [(f"k{i}", {"txt": b"x" * 8}) for i in range(3)])
    prepare_webdataset(tmp_path, split_ratio="1,0,0", progress=False, workers=1)
    raw = bytearray((tmp_path / "a.tar").read_bytes())
    raw[512 * 2 : 512 * 2 + 100] = b"\xff" * 100  # sample k1's header: its name, mode and size fields
    (tmp_path / "a.tar").write_bytes(bytes(raw))
    return WebDatasetSource(tmp_path, split="train")


def test_f_records_of_a_sample_whose_bytes_fail_are_none(damaged):
    assert source_info_of(damaged, 0)[0].file_names == ("k0.txt",)
    with pytest.raises(Exception) as failed:
        damaged.read(1)
    assert source_info_of(damaged, 1) is None  # the same failure again, not raised inside the error path
    assert failure_records(failed.value, damaged, 1) is None


class Reads:
    """A source counting its reads, whose records come from reading."""

    def __init__(self, base):
        self.base, self.reads = base, 0

    def source_info(self, index):
        self.reads += 1
        return self.base.source_info(index)


def test_f_known_records_are_not_read_again(damaged):
    counting = Reads(damaged)
    exc = ValueError("decode failed")
    records = source_info_of(damaged, 0)
    note_records(exc, records)
    assert failure_records(exc, counting, 0) == records
    assert counting.reads == 0
    assert failure_records(ValueError("other"), counting, 0) == records
    assert counting.reads == 1


@dataclass(frozen=True)
class FrozenError(Exception):
    why: str


def test_f_noting_records_on_a_frozen_exception_does_not_raise(damaged):
    exc = FrozenError("bad")
    with pytest.raises(FrozenInstanceError):
        exc.note = 1  # what `exc.__datareel_sources__ = ...` in an error path would raise
    records = source_info_of(damaged, 0)
    note_records(exc, records)
    assert failure_records(exc, damaged, 2) == records


def test_f_jsonl_records_are_a_tuple_an_energon_handler_can_list(tmp_path):
    """A JSONL reader names its read with one record; the error path hands handlers a tuple of them
    (a bare record made ``list(sources)`` in the Energon handler adapter raise TypeError instead of the
    handler being told of the sample's own error)."""
    from datareel.cli.prepare import prepare_jsonl
    from datareel.energon.worker import datareel_error_handler
    from datareel.formats.jsonl.reader import JsonlSource

    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    prepare_jsonl(path)
    source = JsonlSource(str(path))
    records = source_info_of(source, 1)
    assert isinstance(records, tuple) and records[0].file_names == ("1.json",)
    told = []
    exc = ValueError("encode failed")
    note_records(exc, failure_records(exc, source, 1))
    datareel_error_handler(lambda e, sample, sources: told.append((e, sources)))(exc, "1")
    assert told == [(exc, list(records))]
