"""``datareel prepare --lengths module:function``: compute a dataset's length index (prepare time).

The function gets each decoded sample and returns its length; the result is written
atomically beside the dataset's metadata with a sidecar that
:func:`datareel.sources.lengths.load_index` checks for staleness at load time.
"""

from __future__ import annotations

import importlib
import json
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..errors import DatasetError, OptionError
from ..formats.writes import probe, writing
from ..sources.base import Source
from ..sources.lengths import forget_index


def import_function(spec: str) -> Callable[[Any], int]:
    module, colon, name = spec.partition(":")
    if not colon or not module or not name:
        raise OptionError(f"--lengths {spec!r} must be 'module:function' (an importable module)")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise OptionError(f"--lengths {spec!r}: cannot import it ({exc}); is the module on PYTHONPATH?") from exc
    if not callable(fn):
        raise OptionError(f"--lengths {spec!r} is not a function")
    return fn


_worker_source: dict[str, Source] = {}


def _lengths_chunk(path: str, spec: str, start: int, stop: int) -> np.ndarray:
    if path not in _worker_source:
        _worker_source[path] = _all_samples(path)
    source = _worker_source[path]
    fn = import_function(spec)
    out = np.empty(stop - start, dtype=np.int64)
    for i in range(start, stop):
        sample = source.read(i)
        try:
            out[i - start] = int(fn(sample))
        except Exception as exc:
            key = sample.get("__key__") if isinstance(sample, dict) else i
            raise DatasetError(f"--lengths {spec}: failed on sample {key!r} of {path}: {exc!r}") from exc
    return out


def _all_samples(path: str) -> Source:
    """Every sample of a prepared directory (all splits) or JSONL file, in length-index order (its format's
    ``every_sample``)."""
    from ..formats import format_of

    kind = format_of(path)
    if kind.every_sample is None:
        raise OptionError(f"--lengths: {path} is a {kind.name}; a length index is computed for each of its datasets")
    source: Source = kind.every_sample(path)
    return source


def compute_length_index(
    path: str | os.PathLike, spec: str, *, workers: int | None = None, progress: bool = True, chunk: int = 2048
) -> Path:
    """Compute and write the length index of a prepared directory or JSONL file."""
    path = str(path)
    import_function(spec)  # fail early, in this process
    source = _all_samples(path)
    target = source.length_index_path()
    fix = f"`datareel prepare --lengths` writes {target.name} there: make {target.parent} writable (and give it room)"
    probe(target.parent, fix)  # before the long computation, not after it
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
    tag = uuid.uuid4().hex[:8]
    tmp, tmp_side = Path(f"{target}.{tag}.tmp.npy"), Path(f"{target}.json.{tag}.tmp")
    try:
        with writing(target.parent, fix):
            np.save(tmp, out)
            tmp_side.write_text(json.dumps({"function": spec, "count": n, "check": source.length_index_check()}))
            os.replace(tmp, target)
            os.replace(tmp_side, Path(f"{target}.json"))
    finally:
        tmp.unlink(missing_ok=True)
        tmp_side.unlink(missing_ok=True)
    forget_index(target)
    return target
