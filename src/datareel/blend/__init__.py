"""The dataset trees users compose: sources mixed, concatenated, or read from an Energon metadataset.

- :mod:`.tree` — ``mix``, ``mix_epochized``, ``concat`` and the blend types;
- :mod:`.build` — a tree -> its reel plan (:mod:`datareel.plan`) and its leaves;
- :mod:`.metadataset` — Energon metadataset YAML -> a tree;
- :mod:`.open` — ``open_dataset``: one entry point for every on-disk kind.
"""

from .build import build_plan
from .open import open_dataset
from .tree import Blend, Concat, EpochizedMix, Mix, concat, mix, mix_epochized

__all__ = ["Blend", "Concat", "EpochizedMix", "Mix", "build_plan", "concat", "mix", "mix_epochized", "open_dataset"]
