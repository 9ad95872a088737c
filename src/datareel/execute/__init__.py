"""The worker side (layer 4): a descriptor -> a batch, in any worker, with per-sample randomness.

- :mod:`.batch` — ``BatchMaker``: read, encode, pack, batch; the error policy;
- :mod:`.encoder` — the task-encoder protocol and its defaults (Energon's method names);
- :mod:`.randomness` — ``sample_rng`` and the per-sample context;
- :mod:`.workers` — the DataLoader worker options.
"""

from .encoder import DefaultTaskEncoder, TaskEncoder
from .randomness import sample_rng, sample_torch_generator

__all__ = ["DefaultTaskEncoder", "TaskEncoder", "sample_rng", "sample_torch_generator"]
