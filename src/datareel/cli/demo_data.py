"""The demo's data: a small token matrix, written as WebDataset tar shards and prepared as ``datareel prepare``
prepares them (:func:`write_shards`, what the demo reads and ``--keep`` keeps) or as one ``.npy`` file
(:func:`write_dataset`, read as dict samples by :class:`TokenFile`), and a task encoder whose augmentation draws
from the per-sample RNG (:class:`NoisyEncoder`), so every global batch shows whether each sample got its own
randomness back."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from ..execute.randomness import sample_rng

SHARDS = 4  # the demo's shards (fewer for fewer samples): a Loader reads across shard boundaries


class TokenFile:
    """Rows of a ``.npy`` token matrix as dict samples; memory-mapped lazily in each worker."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._rows: np.ndarray | None = None
        self._len = int(np.load(self.path, mmap_mode="r").shape[0])

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._rows is None:
            self._rows = np.load(self.path, mmap_mode="r")
        return {"__key__": f"doc-{i:05d}", "id": i, "tokens": np.array(self._rows[i])}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_rows": None}


class NoisyEncoder:
    """A task encoder whose augmentation draws from the per-sample RNG. A sample of the demo's shards
    (parts ``id`` and ``tokens.npy``) becomes the record a :class:`TokenFile` row is."""

    def encode_sample(self, sample: dict[str, Any]) -> dict[str, Any]:
        if "tokens.npy" in sample:
            sample = {"__key__": sample["__key__"], "id": sample["id"], "tokens": sample["tokens.npy"]}
        sample["noise"] = int(sample_rng().integers(0, 1_000_000))
        return sample


def _tokens(samples: int, seq_len: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32_000, size=(samples, seq_len), dtype=np.int32)


def write_dataset(directory: Path, samples: int, seq_len: int = 16, seed: int = 0) -> Path:
    """The token matrix as ``directory/tokens.npy``. -> its path"""
    path = Path(directory) / "tokens.npy"
    np.save(path, _tokens(samples, seq_len, seed))
    return path


def write_shards(directory: Path, samples: int, seq_len: int = 16, seed: int = 0) -> Path:
    """The token matrix as WebDataset shards ``directory/tokens-S.tar`` (sample ``doc-NNNNN``: parts ``id`` and
    ``tokens.npy``), prepared in this process (the ``.tar.idx`` files and ``.nv-meta/``). -> ``directory``"""
    from ..formats.webdataset.prepare import prepare_webdataset

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rows = _tokens(samples, seq_len, seed)
    for s, ids in enumerate(np.array_split(np.arange(samples), min(SHARDS, samples))):
        with tarfile.open(directory / f"tokens-{s}.tar", "w") as tar:
            for i in ids.tolist():
                array = io.BytesIO()
                np.save(array, rows[i])
                for part, data in (("id", str(i).encode()), ("tokens.npy", array.getvalue())):
                    member = tarfile.TarInfo(f"doc-{i:05d}.{part}")
                    member.size, member.mtime = len(data), 1_700_000_000
                    tar.addfile(member, io.BytesIO(data))
    prepare_webdataset(directory, workers=1, progress=False)
    return directory
