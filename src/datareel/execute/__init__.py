"""The worker side (layer 4): a descriptor -> a batch, in any worker, with per-sample randomness.

- :mod:`.batch` — ``BatchMaker``: a descriptor's units -> a batch (one code path for every reel); the
  error policy;
- :mod:`.options` — ``ExecOptions``: what every worker needs besides the descriptor;
- :mod:`.planner` — ``EncoderPlanner``: the windowed stage's window planner (reads and encodes as the
  workers will);
- :mod:`.encoder` — the task-encoder protocol and its defaults (Energon's method names);
- :mod:`.randomness` — ``sample_rng`` and the per-sample context;
- :mod:`.workers` — the DataLoader worker options (:mod:`.picklable`, :mod:`.deaths`).
"""

from .encoder import DefaultTaskEncoder, TaskEncoder
from .randomness import sample_rng, sample_torch_generator

__all__ = ["DefaultTaskEncoder", "TaskEncoder", "sample_rng", "sample_torch_generator"]
