"""datareel: elastic, deterministic data loading for distributed PyTorch.

The public API::

    datareel.from_sequence(seq, name=...)   # a dataset from any sequence
    datareel.open_dataset(path, split=...)  # Energon / WebDataset directory, .jsonl
    datareel.mix([(ds, weight), ...])       # weighted blend (endless), nestable
    datareel.mix_epochized([(ds, reps)])    # blend with a finite meta-epoch
    datareel.concat([ds, ...])              # one after another
    datareel.Loader(dataset, global_batch_size=..., micro_batch_size=..., ...)
    datareel.filter(ds, predicate)          # static filter on metadata (key, length)
    datareel.Packing(max_length, ...)       # length-planned packing: Loader(packing=...)
    datareel.sample_rng()                   # per-sample RNG inside encode_sample
    datareel.sample_torch_generator()       # the same, as a torch.Generator
    datareel.TaskEncoder                    # the task-encoder protocol
    datareel.DatareelError, datareel.StateMismatchError, datareel.TopologyError
"""

from .blend import Blend, concat, mix, mix_epochized
from .encoder import DefaultTaskEncoder, TaskEncoder
from .errors import DatareelError, SampleContextError, StateMismatchError, TopologyError
from .filters import SampleMeta, filter
from .loader import Loader
from .packing import Packing
from .sample import sample_rng, sample_torch_generator
from .sources import Source, from_sequence, open_dataset

__version__ = "0.1.0"

__all__ = [
    "Blend",
    "DatareelError",
    "DefaultTaskEncoder",
    "Loader",
    "Packing",
    "SampleMeta",
    "SampleContextError",
    "Source",
    "StateMismatchError",
    "TaskEncoder",
    "TopologyError",
    "concat",
    "filter",
    "from_sequence",
    "mix",
    "mix_epochized",
    "open_dataset",
    "sample_rng",
    "sample_torch_generator",
]
