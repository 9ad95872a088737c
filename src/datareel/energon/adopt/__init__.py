"""Adopting a running megatron.energon job: its checkpoint continued on any world size and worker count.

- :mod:`.records` — megatron.energon's savable-loader states as plain values; Megatron's per-rank files read
  without megatron.energon (:func:`read_energon_checkpoint`);
- :mod:`.slices` — each old worker's samples and slices, as Energon splits a dataset;
- :mod:`.replay` — Energon's training order replayed as index math from a worker's recorded generators;
- :mod:`.tree` — a worker's recorded wrapper tree: walked, checked, turned into the replay's readers;
- :mod:`.setup` — what must be known of the old job's configuration;
- :mod:`.remainder` — the samples the old job had not handed to training: the rest of its epoch;
- :mod:`.facade` — what ``restore_state_rank`` / ``restore_state_global`` read from the new job's options.

The remainder is served first, each sample once, in a keyed order (:class:`datareel.blend.adopted.Adopted`),
then datareel's own order from the next epoch; every state saved from then on carries the remainder and
restores elastically (docs/migrating-from-energon.md, "Adopting a running Energon job").
"""

from .records import read_energon_checkpoint
from .remainder import Adoption, adopt
from .setup import Setup

__all__ = ["Adoption", "Setup", "adopt", "read_energon_checkpoint"]
