"""datareel: elastic, deterministic data loading for distributed PyTorch.

The public API::

    datareel.from_sequence(seq, name=...)   # a dataset from any sequence
    datareel.open_dataset(path, split=...)  # Energon / WebDataset directory, .jsonl, metadataset .yaml
    datareel.mix([(ds, weight), ...])       # weighted blend (endless), nestable
    datareel.mix_epochized([(ds, reps)])    # blend with a finite meta-epoch
    datareel.concat([ds, ...])              # one after another
    datareel.filter(ds, predicate)          # static filter on metadata (key, length)
    datareel.Loader(dataset, global_batch_size=..., micro_batch_size=..., ...)
    datareel.RampUp(start, increment, ramp_samples, final)   # Megatron's batch-size ramp-up: global_batch_size=
    datareel.Packing(max_length, ...)       # length-planned packing: Loader(packing=...)
    datareel.BlockShuffle(block=16)         # the locality shuffle (whole blocks per read): Loader(shuffle=...)
    datareel.WindowedStage(window, pack)    # generator encoders, online packing: Loader(stage=...)
    datareel.sample_rng()                   # per-sample RNG inside encode_sample
    datareel.sample_torch_generator()       # the same, as a torch.Generator
    datareel.TaskEncoder                    # the task-encoder protocol
    datareel.DatareelError (root), OptionError, DatasetError (and its DatasetChangedError, StorageError),
        TopologyError, StateError (StateMismatchError, StateDamagedError, ForeignStateError), BatchError

The layers (a module imports only from the ones listed above it; docs/architecture.md)::

    errors.py   every exception class and the argument checks
    plan/       L2 pure order math: permute, epochs, split, nodes (the reel plan), pack planning, schedule, layout
    storage/    bytes by URL scheme: one registered store each (local, file://, s3://, msc://, yours)
    sources/    L1 random-access I/O: len(), read(i), key(i), describe(); sequences, filters, typed samples
    formats/    meaning of bytes: one package per format (webdataset, jsonl, metadataset); the FORMATS registry
    blend/      the dataset trees users compose: mix, mix_epochized, concat, metadataset, open_dataset
    reel/       L3 Cursor, PlainReel, WindowReel + WindowPlanner (a stage is a planner); the DataLoader sampler
    execute/    L4 worker side: descriptor -> batch; task-encoder protocol; per-sample randomness; worker deaths
    state/      the state as a schema: Spec (to_json / from_json / diff), fields, checks, upgrades
    pipeline.py a loader's options -> its reel and batch maker
    run.py      Run: reel + layout + cursor, one frozen value (progress, a rank's stream, state, restore)
    loader.py   L5 Loader, the PyTorch face over the current Run (assemble.py, iteration.py); dist.py
    energon/    Energon's loader API, sample types and task-encoder toolkit over datareel
    cli/        datareel prepare, info, inspect, verify, preview, plot, demo (and the length-index builder)
    testing/    shipped helpers: check_restore_everywhere, several ranks in one process, local gloo launcher
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names

# Each public name and the module that defines it. Imported on first use (PEP 562), so that
# `import datareel.cli` and `datareel --help` do not pay for torch: `datareel.Loader` and
# `from datareel import Loader` work as before.
_LAZY = {
    "Blend": ".blend",
    "concat": ".blend",
    "mix": ".blend",
    "mix_epochized": ".blend",
    "open_dataset": ".blend",
    "BatchError": ".errors",
    "DatareelError": ".errors",
    "DatasetChangedError": ".errors",
    "DatasetError": ".errors",
    "OptionError": ".errors",
    "SampleContextError": ".errors",
    "StateError": ".errors",
    "StateMismatchError": ".errors",
    "StateVersionError": ".errors",
    "StateCheckError": ".errors",
    "StateDamagedError": ".errors",
    "ForeignStateError": ".errors",
    "StorageError": ".errors",
    "TopologyError": ".errors",
    "DefaultTaskEncoder": ".execute",
    "TaskEncoder": ".execute",
    "sample_rng": ".execute",
    "sample_torch_generator": ".execute",
    "GlobalBatch": ".loader",
    "Loader": ".loader",
    "RampUp": ".plan.schedule",
    "BlockShuffle": ".plan.blocks",
    "Packing": ".reel",
    "WindowedStage": ".reel",
    "Source": ".sources",
    "from_sequence": ".sources",
    "SampleMeta": ".sources.filters",
    "filter": ".sources.filters",
}

if TYPE_CHECKING:
    from .blend import Blend, concat, mix, mix_epochized, open_dataset
    from .errors import (
        BatchError,
        DatareelError,
        DatasetChangedError,
        DatasetError,
        ForeignStateError,
        OptionError,
        SampleContextError,
        StateCheckError,
        StateDamagedError,
        StateError,
        StateMismatchError,
        StateVersionError,
        StorageError,
        TopologyError,
    )
    from .execute import DefaultTaskEncoder, TaskEncoder, sample_rng, sample_torch_generator
    from .loader import GlobalBatch, Loader
    from .plan.blocks import BlockShuffle
    from .plan.schedule import RampUp
    from .reel import Packing, WindowedStage
    from .sources import Source, from_sequence
    from .sources.filters import SampleMeta, filter


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)


__version__ = "0.1.0"

__all__ = [
    "BatchError",
    "Blend",
    "BlockShuffle",
    "DatareelError",
    "DatasetChangedError",
    "DatasetError",
    "DefaultTaskEncoder",
    "ForeignStateError",
    "GlobalBatch",
    "Loader",
    "OptionError",
    "Packing",
    "RampUp",
    "SampleContextError",
    "SampleMeta",
    "Source",
    "StateCheckError",
    "StateDamagedError",
    "StateError",
    "StateMismatchError",
    "StateVersionError",
    "StorageError",
    "TaskEncoder",
    "TopologyError",
    "WindowedStage",
    "concat",
    "filter",
    "from_sequence",
    "mix",
    "mix_epochized",
    "open_dataset",
    "sample_rng",
    "sample_torch_generator",
]
