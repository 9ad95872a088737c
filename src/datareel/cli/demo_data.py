"""The demo's data: a small token matrix written to a ``.npy`` file (:func:`write_dataset`), read as dict
samples (:class:`TokenFile`), and a task encoder whose augmentation draws from the per-sample RNG
(:class:`NoisyEncoder`), so every global batch shows whether each sample got its own randomness back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..execute.randomness import sample_rng


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
    """A task encoder whose augmentation draws from the per-sample RNG."""

    def encode_sample(self, sample: dict[str, Any]) -> dict[str, Any]:
        sample["noise"] = int(sample_rng().integers(0, 1_000_000))
        return sample


def write_dataset(directory: Path, samples: int, seq_len: int = 16, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    path = Path(directory) / "tokens.npy"
    np.save(path, rng.integers(0, 32_000, size=(samples, seq_len), dtype=np.int32))
    return path
