"""Energon's wrapper datasets the facade does not build, each refused with what it would break and what
keeps it (each of these changes which sample lands at which position from state kept in a worker)."""

from __future__ import annotations

from typing import Any

from ...errors import OptionError

_WHY = {
    "ConcatDataset": "iterations chained one after another; concatenate the datasets in one reel instead (a "
    "metadataset, or datareel.concat) read by one get_train_dataset / get_val_dataset",
    "EpochizeDataset": "use get_train_dataset(virtual_epoch_length=), which gives the same passes elastically",
    "FilterDataset": "samples dropped at run time would make every later reel position depend on content read "
    "before it; filter statically on metadata (datareel's filters) or substitute failing samples (the handler)",
    "GcDataset": "garbage collection is get_loader(gc_collect_every_n_steps=)'s",
    "GroupBatchDataset": "batches grouped by content (batch_group_criterion) have no fixed reel positions; plan "
    "groups from lengths with datareel.Packing, or pack online with packing_buffer_size",
    "IterMapDataset": "an iterator-to-iterator map keeps state across samples; make encode_sample a generator "
    "(datareel plans its outputs per window, elastically)",
    "LogSampleDataset": "per-sample logging of Energon's workers (worker_log_level) is not reproduced",
    "PackingDataset": "use get_train_dataset(packing_buffer_size=) with select_samples_to_pack / "
    "pack_selected_samples (online packing, planned per window)",
    "ShuffleBufferDataset": "datareel shuffles the whole reel with a keyed permutation; shuffle_buffer_size is "
    "accepted and not needed",
}


def _refused(name: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OptionError(f"{name}: not available through datareel.energon: {_WHY[name]}")

    return type(name, (), {"__init__": __init__, "__doc__": f"Refused: {_WHY[name]}.", "__module__": __name__})


globals().update({name: _refused(name) for name in _WHY})
__all__ = sorted(_WHY)
