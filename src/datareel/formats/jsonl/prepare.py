"""``datareel prepare FILE.jsonl``: write ``FILE.jsonl.idx``, the offsets of its samples (Energon's layout),
after parsing each sample exactly as :class:`~datareel.formats.jsonl.reader.JsonlSource` will."""

from __future__ import annotations

import codecs
import json
import os
import uuid
from array import array
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ...errors import DatasetError
from ...sources.index_files import write_index
from ..metafiles import unparsable
from ..writes import cannot_write


def prepare_jsonl(path: str | os.PathLike) -> int:
    """Write ``path.idx`` for a JSONL file; returns the sample count.

    Blank lines belong to the previous sample's range (leading ones to the
    first); every other line must be one JSON object (``{...}``).  Each sample's
    whole range is parsed here exactly as the reader will parse it, so a file
    that prepares is a file that reads: nothing fails later in training.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"JSONL file {path} does not exist")
    count, pos = 0, 0
    starts = array("Q")  # offsets not yet written to the index file (flushed every CHUNK: memory stays flat)
    sample = bytearray()  # the current sample's range: its line and the blank lines after it
    first = 1  # the current sample's line number
    tmp = Path(f"{path}.idx.tmp-{uuid.uuid4().hex[:8]}")
    fix = (
        f"`datareel prepare` writes the index {path.name}.idx beside {path}: make {path.parent} writable "
        f"(and give it room), or prepare a copy of the file in a writable directory"
    )
    try:
        with open(path, "rb") as f, _created(tmp, path.parent, fix) as out:
            for number, line in enumerate(f, start=1):
                text = line.strip()
                if text:
                    if count:
                        _check_jsonl_sample(path, first, bytes(sample))
                        sample.clear()
                    if not (text.startswith(b"{") and text.endswith(b"}")):
                        try:
                            line.decode("utf-8")
                        except UnicodeDecodeError as exc:  # say so, as the reader does, not "not a JSON object"
                            raise DatasetError(
                                f"{path} line {number}: not valid UTF-8 ({exc.reason} at byte {exc.start} of the "
                                f"line); fix the line, then run `datareel prepare` again"
                            ) from None
                        bom = " (it starts with a UTF-8 byte-order mark: save the file without one)"
                        raise DatasetError(
                            f"{path} line {number}: not a JSON object (must start with '{{' and end with '}}')"
                            + (bom if line.startswith(codecs.BOM_UTF8) else "")
                        )
                    starts.append(pos if count else 0)  # leading blank lines belong to the first sample
                    count += 1
                    first = number
                    if len(starts) == _CHUNK:
                        _write(out, starts, path.parent, fix)
                sample += line
                pos += len(line)
            if not count:
                raise DatasetError(f"{path} holds no JSON lines")
            _check_jsonl_sample(path, first, bytes(sample))
            starts.append(pos)
            _write(out, starts, path.parent, fix)
        try:
            os.replace(tmp, Path(f"{path}.idx"))
        except OSError as exc:
            raise cannot_write(exc, path.parent, fix) from None
    finally:
        tmp.unlink(missing_ok=True)
    return count


_CHUNK = 1 << 16


def _created(tmp: Path, folder: Path, fix: str) -> BinaryIO:
    """``tmp`` opened for writing, or the named refusal (a read-only directory: issue 36)."""
    try:
        return open(tmp, "wb")
    except OSError as exc:
        raise cannot_write(exc, folder, fix) from None


def _write(out: BinaryIO, offsets: array[int], folder: Path, fix: str) -> None:
    try:
        _write_offsets(out, offsets)
    except OSError as exc:  # a full disk, a quota
        raise cannot_write(exc, folder, fix) from None


def _write_offsets(out: BinaryIO, offsets: array[int]) -> None:
    """Append ``offsets`` to an index file being written, and clear it."""
    write_index(out, np.frombuffer(offsets, dtype=np.uint64))
    del offsets[:]


def _check_jsonl_sample(path: Path, number: int, blob: bytes) -> None:
    """Parse one sample's byte range as :class:`~datareel.sources.jsonl.JsonlSource` will."""
    where = f"{path} line {number}"
    try:
        value = json.loads(blob.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start} of the line)") from None
    except json.JSONDecodeError as exc:
        hint = ""
        if b"\r" in blob.rstrip(b"\r\n"):
            hint = "; it holds a carriage return inside the line: convert CR-only line endings to \\n"
        elif any(c in blob for c in b"\x0b\x0c"):
            hint = "; it holds a form feed or vertical tab, which JSON does not allow outside strings"
        elif exc.msg == "Extra data":
            hint = "; each line holds one JSON object (two on one line? split them)"
        raise DatasetError(
            f"{where}: not one valid JSON object: {exc.msg} (line {number + exc.lineno - 1}, column {exc.colno}){hint}"
        ) from None
    except (RecursionError, ValueError) as exc:  # nesting past the stack, an integer past the conversion limit
        raise DatasetError(f"{where}: {unparsable(exc)}; fix the line, then run `datareel prepare` again") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: a JSONL sample is a JSON object, got {type(value).__name__}")
