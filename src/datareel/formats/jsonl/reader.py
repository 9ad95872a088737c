"""JSONL datasets: ``foo.jsonl`` with its ``foo.jsonl.idx`` offsets (Energon's layout).

Sample ``i`` is the ``i``-th non-blank line: ``{"__key__": str(i), "json": <object>}``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DatasetChangedError, DatasetError
from ...sources.base import Sample, Source, file_check
from ...sources.index_files import read_index, sample_range
from ...sources.source_info import SourceInfo, jsonl_source_info
from ...storage import Files, HandleCache, files_for
from ...storage.handles import Handle
from ...storage.path import as_path
from ..metafiles import close_names
from ..metafiles import unparsable as unparsable


def parse_json(blob: bytes, where: str, start: int = 0, fix: str = "fix the line") -> Any:
    """One JSONL sample's bytes parsed (``where`` names it; ``start``: its first byte in the file), or a
    :class:`DatasetError` naming ``where`` and ``fix`` for anything that does not parse: bytes that are not
    UTF-8, text that is not JSON, an integer past Python's int conversion limit (4,300 digits), nesting
    past the parser's stack."""
    try:
        return json.loads(blob.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not valid UTF-8 ({exc.reason} at byte {start + exc.start}); {fix}") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not valid JSON: {exc.msg}; {fix}") from exc
    except (RecursionError, ValueError) as exc:
        raise DatasetError(f"{where}: {unparsable(exc)}; {fix}") from None


class JsonlSource(Source):
    def __init__(self, path: str | os.PathLike, *, name: str | None = None):
        self.path = as_path(path)
        self._url = str(self.path)
        self.prefetches = files_for(self._url).prefetches
        try:
            found = self.path.is_file()
        except OSError as exc:  # a name too long, a loop of links
            raise DatasetError(f"cannot open JSONL file {self.path}: {exc.strerror or exc}") from None
        if not found:
            missing = not self.path.exists()
            raise DatasetError(
                f"JSONL file {self.path} does not exist{close_names(self.path) if missing else ''}"
                if missing
                else f"{self.path} is not a file: a JSONL dataset is one .jsonl file (with its .jsonl.idx)"
            )
        idx = read_index(f"{self._url}.idx")
        size = self.path.stat().st_size
        if int(idx[-1]) != size:
            raise DatasetError(
                f"index {self.path}.idx ends at byte {int(idx[-1])} but {self.path} has {size} bytes: the file "
                f"changed since it was indexed; run `datareel prepare {self.path}` again"
            )
        if len(idx) < 2:
            raise DatasetError(f"{self.path} holds no samples")
        self._size = len(idx) - 1
        self.name = name if name is not None else self.path.name
        self._pid: int | None = None  # the process _handles and _fetched belong to
        self._handles: HandleCache | None = None
        self._fetched: dict[tuple[str, int, int], bytes] = {}  # prefetched: one micro-batch's lines

    def __len__(self) -> int:
        return self._size

    def read(self, index: int) -> dict[str, Any]:
        start, stop = sample_range(self._index(), index, lambda: f"{self.path}.idx")
        cache = self._cache()
        blob = self._fetched.pop((self._url, start, stop), None)  # prefetched with its micro-batch, else read now
        if blob is None:
            with cache.use(self._url, self._open_file) as handle:  # no other thread closes it while it is read
                blob = handle.read_range(start, stop)
        where = f"{self.path} sample {index} (bytes {start}-{stop})"
        if len(blob) != stop - start:  # the file no longer matches its index (checked when it was opened)
            raise DatasetChangedError(
                f"{where}: read {len(blob)} bytes; the file was truncated after it was indexed: re-run "
                f"`datareel prepare {self.path}`"
            )
        return Sample(
            __key__=str(index),
            json=parse_json(blob, where, start, f"re-index with `datareel prepare {self.path}`"),
        )

    def source_info(self, index: int) -> SourceInfo:
        """Line ``index``'s record, as Energon's JSONL reader names it (without reading the line)."""
        return jsonl_source_info(self._url, index)

    def prefetch(self, indices: np.ndarray) -> None:
        """Where the store gains by it (a bucket): fetch the lines together (coalesced, concurrent GETs)."""
        if not self.prefetches:
            return
        self._cache()
        self._fetched = {}  # only this micro-batch's lines are held
        try:
            idx = self._index()
            ranges = [sample_range(idx, i, lambda: f"{self.path}.idx") for i in np.asarray(indices).tolist()]
        except (DatasetError, IndexError):
            return  # read() reports it for that sample
        self._fetched = self._store().read_ranges([(self._url, start, stop) for start, stop in ranges])

    def _store(self) -> Files:
        return files_for(self._url)

    def _cache(self) -> HandleCache:
        """Where this source keeps its file's handle in this process (locally, the process's bounded set of
        open files; in a bucket, for the source's life in the process)."""
        if self._pid != os.getpid() or self._handles is None:  # first use in this process (a worker after fork)
            self._pid, self._handles, self._fetched = os.getpid(), self._store().handle_cache(), {}
        return self._handles

    def _index(self) -> np.ndarray:
        """The line offsets, from the file's handle (read on first use in this process). uint64[count + 1]"""
        with self._cache().use(self._url, self._open_file) as handle:  # not closed by another thread meanwhile
            return handle.index

    def _open_file(self) -> Handle:
        opened = self._store().open(self._url)
        try:
            return Handle(opened, read_index(f"{self._url}.idx"))
        except BaseException:
            opened.close()
            raise

    def key(self, index: int) -> str:
        return str(index)

    def byte_sizes(self, indices: np.ndarray) -> np.ndarray:
        """Bytes of each line (blank lines folded in). indices: int64[k] -> int64[k]."""
        idx = self._index()
        indices = np.asarray(indices, dtype=np.int64)
        out = idx[indices + 1].astype(np.int64) - idx[indices].astype(np.int64)
        if (out < 0).any():
            sample_range(idx, int(indices[out < 0][0]), lambda: f"{self.path}.idx")  # raises, naming it
        return out

    def global_indices(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(indices, dtype=np.int64)

    def length_index_path(self) -> Path:
        return Path(f"{self.path}.lengths.npy")

    def length_index_check(self) -> dict[str, Any]:
        return {self.path.name: file_check(self.path, self._size)}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "bytes": self.path.stat().st_size}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pid": None, "_handles": None, "_fetched": {}}
