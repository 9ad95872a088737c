"""The loaders ``bench_peers.py`` compares, each on its own native copy of the same samples.

``make(name, home, kind, workers)`` returns an iterable of batches of 32, shuffled, seed 1; ``kind``
"raw" keeps each sample's bytes, "jpeg" decodes and resizes it to 224×224 (:func:`decode`, the same
function in every loader). ``workers`` is the DataLoader's ``num_workers`` or the peer's own
equivalent (Grain: ``MultiprocessingOptions(num_workers=)``, 0: none). Not used by tests.
"""

from __future__ import annotations

import inspect
import io
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 32
SEED = 1


def decode(data: bytes) -> np.ndarray:
    """JPEG bytes -> uint8 (224, 224, 3): Pillow decode, RGB, bilinear resize."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB").resize((224, 224), Image.BILINEAR))


# --- datareel -------------------------------------------------------------------------------------


class _DecodeEncoder:
    def encode_sample(self, sample: dict[str, Any]) -> dict[str, Any]:
        return {"image": decode(sample["jpg"])}


def datareel_loader(home: Path, kind: str, workers: int, *, block: bool = False, threads: int = 0) -> Any:
    import datareel

    kwargs: dict[str, Any] = {}
    if block:
        kwargs["shuffle"] = datareel.BlockShuffle(block=16)
    if threads:
        kwargs["map_threads"] = threads
    return datareel.Loader(
        datareel.open_dataset(home / "wds", decode=False),
        global_batch_size=BATCH,
        micro_batch_size=BATCH,
        seed=SEED,
        num_workers=workers,
        task_encoder=_DecodeEncoder() if kind == "jpeg" else None,
        **kwargs,
    )


def datareel_has(feature: str) -> bool:
    """Whether this datareel has ``BlockShuffle`` ("block") or ``Loader(map_threads=)`` ("threads")."""
    import datareel

    if feature == "block":
        return hasattr(datareel, "BlockShuffle")
    return "map_threads" in inspect.signature(datareel.Loader).parameters


# --- litdata --------------------------------------------------------------------------------------


def _litdata_decode(item: dict[str, Any]) -> dict[str, Any]:
    return {"image": decode(item["data"])}


def _litdata_dataset(home: Path, kind: str, shuffle: bool) -> Any:
    import litdata

    return litdata.StreamingDataset(
        str(home / "litdata"),
        shuffle=shuffle,
        seed=SEED,
        transform=_litdata_decode if kind == "jpeg" else None,
    )


class _MapView:
    """A StreamingDataset read at random through ``__getitem__`` (a map-style dataset for a sampler)."""

    def __init__(self, dataset: Any):
        self.dataset, self.length = dataset, len(dataset)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        return self.dataset[i]


def litdata_loader(home: Path, kind: str, workers: int, *, full: bool = False) -> Any:
    """Chunk-local shuffle (``StreamingDataset(shuffle=True)`` + ``StreamingDataLoader``), or with
    ``full`` a full shuffle: the same dataset read at random positions by a torch ``RandomSampler``."""
    import torch
    from litdata import StreamingDataLoader

    if not full:
        return StreamingDataLoader(_litdata_dataset(home, kind, True), batch_size=BATCH, num_workers=workers)
    view = _MapView(_litdata_dataset(home, kind, False))
    sampler = torch.utils.data.RandomSampler(view, generator=torch.Generator().manual_seed(SEED))
    return torch.utils.data.DataLoader(view, batch_size=BATCH, sampler=sampler, num_workers=workers)


# --- Grain ----------------------------------------------------------------------------------------


def _grain_raw(record: bytes) -> np.ndarray:
    return np.frombuffer(record, dtype=np.uint8)  # Grain's batch stacks arrays; bytes do not stack


def grain_loader(home: Path, kind: str, workers: int) -> Any:
    """``grain.experimental.ElasticIterator`` over ``MapDataset.source(ArrayRecordDataSource).shuffle()``
    (a global shuffle), its default ``ReadOptions`` (16 read threads), one shard."""
    import grain

    from _peer_data import arrayrecord_paths

    ds = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(arrayrecord_paths(home / "arrayrecord")))
    ds = ds.shuffle(seed=SEED).map(decode if kind == "jpeg" else _grain_raw)
    mp = grain.MultiprocessingOptions(num_workers=workers) if workers else None
    return grain.experimental.ElasticIterator(
        ds, BATCH, grain.sharding.ShardOptions(shard_index=0, shard_count=1), multiprocessing_options=mp
    )


# --- Energon --------------------------------------------------------------------------------------


def energon_loader(home: Path, kind: str, workers: int) -> Any:
    """Energon 7.4.1 on the WebDataset directory: ``get_train_dataset(shuffle_buffer_size=100,
    max_samples_per_sequence=100)`` + ``get_savable_loader``, crude samples, its decoder off (raw bytes)
    and a cooker doing the same work as the others (as ``bench_webdataset.py``)."""
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        WorkerConfig,
        get_savable_loader,
        get_train_dataset,
        stateless,
    )
    from torch.utils.data import default_collate

    jpeg = kind == "jpeg"

    def cook(sample: Any) -> Any:
        return {"image": decode(sample["jpg"])} if jpeg else sample

    class Encoder(DefaultTaskEncoder):
        decoder = None
        cookers = [Cooker(stateless(cook))]

        def batch(self, samples: list[Any]) -> Any:
            return default_collate(samples) if jpeg else samples

    dataset = get_train_dataset(
        str(home / "wds"),
        split_part="train",
        batch_size=BATCH,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        task_encoder=Encoder(),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
    )
    return get_savable_loader(dataset)


# --- the table of loaders -------------------------------------------------------------------------

#: name -> (maker, keyword arguments, which datareel feature it needs, kinds it runs on)
LOADERS: dict[str, tuple[Any, dict[str, Any], str | None, tuple[str, ...]]] = {
    "datareel full shuffle": (datareel_loader, {}, None, ("raw", "jpeg")),
    "datareel BlockShuffle(block=16)": (datareel_loader, {"block": True}, "block", ("raw", "jpeg")),
    "datareel full shuffle, map_threads=4": (datareel_loader, {"threads": 4}, "threads", ("jpeg",)),
    "datareel BlockShuffle(16), map_threads=4": (
        datareel_loader,
        {"block": True, "threads": 4},
        "block+threads",
        ("jpeg",),
    ),
    "litdata chunk-local shuffle": (litdata_loader, {}, None, ("raw", "jpeg")),
    "litdata full shuffle (RandomSampler)": (litdata_loader, {"full": True}, None, ("raw", "jpeg")),
    "Grain ElasticIterator": (grain_loader, {}, None, ("raw", "jpeg")),
    "Energon 7.4.1": (energon_loader, {}, None, ("raw", "jpeg")),
}


def available(name: str) -> bool:
    need = LOADERS[name][2]
    return need is None or all(datareel_has(f) for f in need.split("+"))


def make(name: str, home: Path, kind: str, workers: int) -> Any:
    maker, kwargs, _, _ = LOADERS[name]
    return maker(home, kind, workers, **kwargs)
