"""Sample lengths for packing and filters: a length index, byte sizes, or a function.

A *length index* is computed once by ``datareel prepare PATH --lengths module:function``
(the function gets each decoded sample and returns its length) and stored
beside the dataset's metadata — ``.nv-meta/lengths.npy`` for a prepared
directory, ``X.jsonl.lengths.npy`` for JSONL — with a ``.json`` sidecar
recording each shard's sample count and byte size.  It is memory-mapped at
load; if any shard changed since, it is refused as stale.
"""

from __future__ import annotations

import importlib
import json
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Union

import numpy as np
from tqdm import tqdm

from .errors import DatareelError
from .sources.base import Source

LengthFn = Callable[[Source, np.ndarray], np.ndarray]
LengthSpec = Union[str, LengthFn]
"""``"index"`` (a prepared length index), ``"bytes"`` (each sample's bytes on disk) or
``fn(source, indices) -> lengths`` (vectorised, cheap: it runs in the main process)."""

_cache: dict[str, np.ndarray] = {}


def check_spec(length: Any, what: str) -> None:
    if not (callable(length) or length in ("index", "bytes")):
        raise DatareelError(
            f"{what}: length={length!r} must be 'index' (a length index from `datareel prepare --lengths`), "
            f"'bytes', or a function fn(source, indices) -> lengths"
        )


def lengths_of(source: Source, indices: np.ndarray, length: LengthSpec) -> np.ndarray:
    """Lengths of samples ``indices`` of ``source``. indices: int64[k] -> int64[k]."""
    indices = np.asarray(indices, dtype=np.int64)
    if callable(length):
        out = np.asarray(length(source, indices))
        if out.shape != indices.shape or not np.issubdtype(out.dtype, np.integer):
            raise DatareelError(
                f"the length function returned {out.dtype}{list(out.shape)} for {len(indices)} samples of "
                f"{source.name}; it must return one integer per index"
            )
        return out.astype(np.int64)
    if length == "bytes":
        return source.byte_sizes(indices)
    return load_index(source)[source.global_indices(indices)].astype(np.int64)


def load_index(source: Source) -> np.ndarray:
    """The source's length index, memory-mapped, after checking it is not stale. -> int64[N]"""
    path = source.length_index_path()
    key = str(path)
    if key in _cache:
        return _cache[key]
    side = Path(f"{path}.json")
    if not path.is_file() or not side.is_file():
        raise DatareelError(
            f"{source.name} has no length index ({path}); compute it with "
            f"`datareel prepare <dataset> --lengths module:function`, or pack by length='bytes'"
        )
    saved = json.loads(side.read_text())
    current = source.length_index_check()
    if saved.get("check") != json.loads(json.dumps(current)):
        changed = sorted(k for k in set(saved.get("check", {})) | set(current)
                         if saved.get("check", {}).get(k) != list(current.get(k, [])))
        raise DatareelError(
            f"length index {path} is stale: {changed[:5]} changed since it was computed "
            f"(sample count, bytes or content); re-run `datareel prepare --lengths {saved.get('function')}`"
        )
    index = np.load(path, mmap_mode="r")
    _cache[key] = index
    return index


def import_function(spec: str) -> Callable[[Any], int]:
    module, colon, name = spec.partition(":")
    if not colon or not module or not name:
        raise DatareelError(f"--lengths {spec!r} must be 'module:function' (an importable module)")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise DatareelError(f"--lengths {spec!r}: cannot import it ({exc}); is the module on PYTHONPATH?") from exc
    if not callable(fn):
        raise DatareelError(f"--lengths {spec!r} is not a function")
    return fn


_worker_source: dict[str, Source] = {}


def _lengths_chunk(path: str, spec: str, start: int, stop: int) -> np.ndarray:
    from .sources.open import open_dataset

    if path not in _worker_source:
        _worker_source[path] = _all_samples(open_dataset, path)
    source = _worker_source[path]
    fn = import_function(spec)
    out = np.empty(stop - start, dtype=np.int64)
    for i in range(start, stop):
        sample = source.read(i)
        try:
            out[i - start] = int(fn(sample))
        except Exception as exc:
            key = sample.get("__key__") if isinstance(sample, dict) else i
            raise DatareelError(f"--lengths {spec}: failed on sample {key!r} of {path}: {exc!r}") from exc
    return out


def _all_samples(open_dataset: Any, path: str) -> Source:
    from .sources.webdataset import WebDatasetSource

    if path.endswith(".jsonl"):
        return open_dataset(path)
    return WebDatasetSource(path, split=None)


def compute_length_index(path: str | os.PathLike, spec: str, *, workers: int | None = None,
                         progress: bool = True, chunk: int = 2048) -> Path:
    """Compute and write the length index of a prepared directory or JSONL file."""
    from .sources.open import open_dataset

    path = str(path)
    import_function(spec)  # fail early, in this process
    source = _all_samples(open_dataset, path)
    n = len(source)
    bounds = list(range(0, n, chunk)) + [n]
    workers = max(1, min(workers or os.cpu_count() or 1, len(bounds) - 1))
    out = np.empty(n, dtype=np.int64)
    with tqdm(total=n, unit="sample", desc="lengths", disable=not progress) as bar:
        if workers == 1:
            for a, b in zip(bounds, bounds[1:]):
                out[a:b] = _lengths_chunk(path, spec, a, b)
                bar.update(b - a)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [(a, b, pool.submit(_lengths_chunk, path, spec, a, b)) for a, b in zip(bounds, bounds[1:])]
                for a, b, future in futures:
                    out[a:b] = future.result()
                    bar.update(b - a)
    target = source.length_index_path()
    tag = uuid.uuid4().hex[:8]
    tmp, tmp_side = Path(f"{target}.{tag}.tmp.npy"), Path(f"{target}.json.{tag}.tmp")
    try:
        np.save(tmp, out)
        tmp_side.write_text(json.dumps({"function": spec, "count": n, "check": source.length_index_check()}))
        os.replace(tmp, target)
        os.replace(tmp_side, Path(f"{target}.json"))
    finally:
        tmp.unlink(missing_ok=True)
        tmp_side.unlink(missing_ok=True)
    _cache.pop(str(target), None)
    return target
