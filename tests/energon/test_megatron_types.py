"""megatron.energon's own types handed to datareel.energon's loader functions (Megatron-LM's pattern: the loader
functions imported from datareel.energon, everything else kept on megatron.energon), beside megatron.energon
running the same loop; and megatron.energon's savable-loader states refused by name.

The dataset: a crude WebDataset (an 8x8 PNG and a caption per sample) read through a metadataset leaf with an
auxiliary dataset, so the cooker gets the aux store, the primary store and the loader's cache pool.  The task
encoder, sample and batch dataclasses, ``stateless``, ``Cooker`` / ``cooker`` / ``basic_sample_keys``,
``SampleDecoder``, ``WorkerConfig``, ``FileStoreCachePool`` and the ``SourceInfo`` records an error handler reads
are all megatron.energon's.  Per-sample encodings are compared by key (datareel's order is its own); the
augmentation noise (``@stateless(restore_seeds=True)``, drawn from ``np.random``) is seeded by each library its
own way, so it is compared within datareel: the same on every topology and after every restore.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import datareel
from datareel import energon as den

me = pytest.importorskip("megatron.energon")
wds = pytest.importorskip("webdataset")

N = 16  # samples in the primary dataset, 4 per shard
B = 2  # micro-batch per rank
G = 8  # global batch


def _crude(path: Path, offset: int, image: bool) -> None:
    from megatron.energon.flavors import BaseWebdatasetFactory

    rng = np.random.default_rng(offset)
    (path / "parts").mkdir(parents=True)
    with wds.ShardWriter(f"{path}/parts/data-%d.tar", maxcount=4, verbose=0) as writer:
        for i in range(N):
            sample = {"__key__": f"{i + offset:06d}", "txt": f"caption {i + offset} {'w ' * (i % 5)}".encode()}
            if image:
                png = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(png, format="png")
                sample["png"] = png.getvalue()
                sample["json"] = json.dumps({"i": i}).encode()
            writer.write(sample)
        shards = writer.shard
    BaseWebdatasetFactory.prepare_dataset(
        path, [f"parts/data-{{0..{shards - 1}}}.tar"], split_parts_ratio=[("train", 1.0)], shuffle_seed=None, workers=1
    )
    (path / ".nv-meta" / "dataset.yaml").write_text(
        "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  crude_type: caption\n"
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("megatron-types")
    _crude(root / "ds1", 0, image=True)
    _crude(root / "ds2", 100, image=False)
    lines = ["__module__: megatron.energon", "__class__: MetadatasetV2", "splits:", "  train:", "    path: ds1"]
    (root / "aux.yaml").write_text("\n".join([*lines, "    aux:", "      partner: ds2"]) + "\n")
    return root


# -- the client's types: every one megatron.energon's --------------------------------------------------------
@dataclasses.dataclass
class Encoded(me.Sample):
    pixels: torch.Tensor  # (3, 4, 4)
    words: int
    text: str
    noise: float


@dataclasses.dataclass
class EncodedBatch(me.Batch):
    pixels: list  # B tensors (3, 4, 4): megatron.energon's Batch.from_samples lists every field
    words: list
    text: list
    noise: list


@me.stateless
@me.cooker(need_primary=True, need_cache=True)
def cook(sample, primary, partner, cache):
    """The caption joined with the aux partner's and, through the cache pool, the sample's own json part."""
    other = partner.get(f"{int(sample['__key__']) + 100:06d}.txt", sample)
    mine = cache.get(primary, ".json", sample)  # the primary store: ".json" is this sample's own part
    caption = f"{sample['txt']}|{other}|{mine!r}"
    return me.CaptioningSample(**me.basic_sample_keys(sample), image=sample["png"], caption=caption)


class Encoder(me.DefaultTaskEncoder[me.CaptioningSample, Encoded, EncodedBatch, EncodedBatch]):
    cookers = [me.Cooker(cook, has_subflavors={"crude_type": "caption"})]

    def __init__(self, image_decode: str = "torch", fail_key: str | None = None):
        super().__init__(raw_batch_type=EncodedBatch)
        self.decoder = me.SampleDecoder(image_decode=image_decode)
        self.fail_key = fail_key

    @me.stateless(restore_seeds=True)
    def encode_sample(self, sample):
        if not isinstance(sample, me.CaptioningSample):
            raise TypeError(f"the cooker gives megatron.energon's CaptioningSample, got {type(sample)}")
        if sample.__key__ == self.fail_key:
            raise ValueError(f"cannot encode {sample.__key__}")
        image = sample.image
        if isinstance(image, Image.Image):
            image = torch.from_numpy(np.array(image)).permute(2, 0, 1)
        return Encoded(
            __key__=sample.__key__,
            __restore_key__=sample.__restore_key__,
            __subflavors__=sample.__subflavors__,
            __sources__=sample.__sources__,
            pixels=image[:, :4, :4].to(torch.float32),
            words=len(sample.caption.split()),
            text=sample.caption,
            noise=float(np.random.rand()),
        )


def _records(sources) -> list[tuple]:
    return sorted((str(s.dataset_path).rpartition("/")[2], s.shard_name, tuple(s.file_names)) for s in sources or ())


def _samples(batch) -> list[tuple]:
    """One batch, per sample: (key, encoding without the noise, noise, where it was read)."""
    if not isinstance(batch, EncodedBatch):
        raise AssertionError(f"the batch is a {type(batch).__name__}, not the encoder's EncodedBatch")
    return [
        (k, (batch.pixels[i].sum().item(), int(batch.words[i]), batch.text[i]), float(batch.noise[i]))
        for i, k in enumerate(batch.__key__)
    ]


def _energon_epoch(root: Path, tmp: Path, decode: str) -> dict[str, tuple]:
    config = me.WorkerConfig(rank=0, world_size=1, num_workers=0)
    pool = me.FileStoreCachePool(parent_cache_dir=tmp / "cache-e", num_workers=1)
    dataset = me.get_train_dataset(
        root / "aux.yaml",
        batch_size=B,
        worker_config=config,
        task_encoder=Encoder(decode),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    loader = me.get_savable_loader(dataset, cache_pool=pool)
    try:
        it = iter(loader)
        return {k: encoded for _ in range(N // B) for k, encoded, _noise in _samples(next(it))}
    finally:
        pool.close()


def _facade(root: Path, tmp: Path, rank: int, world: int, workers: int, decode: str = "torch", **kw):
    """datareel.energon's loader functions over megatron.energon's types (WorkerConfig, pool, encoder)."""
    config = me.WorkerConfig(rank=rank, world_size=world, num_workers=workers, **kw.pop("config", {}))
    pool = me.FileStoreCachePool(parent_cache_dir=tmp / f"cache-{rank}-{world}-{workers}", num_workers=1)
    encoder = kw.pop("encoder", None) or Encoder(decode)
    dataset = den.get_train_dataset(
        root / "aux.yaml", batch_size=B, global_batch_size=G, worker_config=config, task_encoder=encoder, **kw
    )
    return den.get_savable_loader(dataset, cache_pool=pool)


def test_one_epoch_encodes_as_on_megatron_energon(root: Path, tmp_path: Path) -> None:
    """Every key, its cooked and encoded sample (aux store, primary store through the cache pool, decoder) and
    its batch type, as megatron.energon gives them."""
    for decode in ("torch", "pil"):
        expected = _energon_epoch(root, tmp_path / decode, decode)
        loader = _facade(root, tmp_path / decode, 0, 1, 0, decode)
        it = iter(loader)
        got = {k: encoded for _ in range(N // B) for k, encoded, _noise in _samples(next(it))}
        loader.close()
        assert sorted(got) == sorted(expected) == [f"{i:06d}" for i in range(N)]
        assert got == expected, decode


def _run(loaders, steps: int) -> list[list[tuple]]:
    """``steps`` global batches from one loader per rank (ranks simulated in this process): per global batch,
    every sample in reel order (micro-step by micro-step, ranks in order)."""
    its = [iter(loader) for loader in loaders]
    micro = G // (B * len(loaders))
    return [[s for _ in range(micro) for it in its for s in _samples(next(it))] for _ in range(steps)]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.workers)])
def test_saved_per_rank_it_resumes_on_1_and_4_ranks(root: Path, tmp_path: Path, workers: int) -> None:
    """Saved per rank (save_state_rank) on 2 ranks after 2 global batches, restored per rank on 1 and on 4
    ranks (restore_state_rank; ranks 2 and 3 restore rank 0's file): the uninterrupted run's global batches,
    noise included (reseeded by position), with every type megatron.energon's."""
    first = [_facade(root, tmp_path, r, 2, workers) for r in range(2)]
    reference = _run(first, 5)
    for loader in first:
        loader.close()
    saving = [_facade(root, tmp_path, r, 2, workers) for r in range(2)]
    assert _run(saving, 2) == reference[:2]
    states = [loader.save_state_rank() for loader in saving]
    for loader in saving:
        loader.close()
    for world in (1, 4):
        resumed = [_facade(root, tmp_path, r, world, 0 if world == 4 else workers) for r in range(world)]
        for r, loader in enumerate(resumed):
            loader.restore_state_rank(states[min(r, 1)])
        assert _run(resumed, 3) == reference[2:], f"resumed on {world} ranks"
        for loader in resumed:
            loader.close()
    keys = [k for batch in reference[:2] for k, *_ in batch]
    assert len(set(keys)) == len(keys) == N


# -- the family: each megatron.energon type handed to the facade is used -------------------------------------
def _first_batch(loader):
    try:
        return next(iter(loader))
    finally:
        loader.close()


def _check_decoder(root: Path, tmp: Path) -> None:
    seen = []

    class Seeing(Encoder):
        @me.stateless
        def encode_sample(self, sample):
            seen.append(type(sample.image))
            return super().encode_sample.__wrapped__(self, sample)

    _first_batch(_facade(root, tmp, 0, 1, 0, encoder=Seeing("pil")))
    _first_batch(_facade(root, tmp, 0, 1, 0, encoder=Seeing("torch")))
    assert seen[0] is Image.Image and seen[-1] is torch.Tensor  # its image_decode, read from config()


def _check_task_encoder_and_dataclasses(root: Path, tmp: Path) -> None:
    batch = _first_batch(_facade(root, tmp, 0, 1, 0))
    assert type(batch) is EncodedBatch and isinstance(batch, me.Batch)  # megatron's DefaultTaskEncoder.batch
    # megatron.energon 7.4.1's Batch.from_samples lists every field, tensors too
    assert [p.shape for p in batch.pixels] == [(3, 4, 4)] * B and all(k.isdigit() for k in batch.__key__)


def _check_stateless(root: Path, tmp: Path) -> None:
    one = _run([_facade(root, tmp, 0, 1, 0)], 1)[0]
    two = _run([_facade(root, tmp, r, 2, 0) for r in range(2)], 1)[0]
    assert [(k, n) for k, _, n in one] == [(k, n) for k, _, n in two]  # reseeded by position, on every topology
    assert len({n for *_, n in one}) == G  # and not one seed for all


def _check_cooker(root: Path, tmp: Path) -> None:
    batch = _first_batch(_facade(root, tmp, 0, 1, 0))
    for key, text in zip(batch.__key__, batch.text):
        i = int(key)
        assert text.startswith(f"caption {i} ") and f"|caption {i + 100} " in text and f"{{'i': {i}}}" in text


def _check_source_info(root: Path, tmp: Path) -> None:
    told = []

    def handler(exception, sample, sources):
        told.append((type(exception).__name__, sample.__key__, _records(sources)))

    loader = _facade(root, tmp, 0, 1, 0, encoder=Encoder(fail_key="000003"), config={"global_error_handler": handler})
    keys = [k for batch in _run([loader], 2) for k, *_ in batch]
    loader.close()
    assert "000003" not in keys and told[0][:2] == ("ValueError", "000003")
    assert ("ds1", "parts/data-0.tar", ("000003.json", "000003.png", "000003.txt")) in told[0][2], told


def _check_file_store(root: Path, tmp: Path) -> None:
    """megatron.energon's FileStoreCachePool is the cooker's ``cache`` (see _check_cooker: it read the primary
    store through it) and the encoder's ``self.cache`` (megatron.energon's property, answered by the facade)."""
    pools = []

    class Reading(Encoder):
        @me.stateless
        def encode_sample(self, sample):
            pools.append(self.cache)
            return super().encode_sample.__wrapped__(self, sample)

    loader = _facade(root, tmp, 0, 1, 0, encoder=Reading())
    _first_batch(loader)
    assert pools and all(p is loader.spec.cache_pool for p in pools)
    assert isinstance(loader.spec.cache_pool, me.FileStoreCachePool)


def _check_megatron_file_store(root: Path, tmp: Path) -> None:
    """megatron.energon's file stores read through the facade's cache pools and DecodeFileStore."""
    (tmp / "files").mkdir()
    (tmp / "files" / "note.txt").write_text("a note")
    store = me.SystemFileStore(str(tmp / "files"))
    pool = den.FileStoreCachePool(parent_cache_dir=tmp / "pool", num_workers=1)
    try:
        assert pool.get(store, "note.txt") == pool.get_lazy(store, "note.txt").get() == b"a note"
    finally:
        pool.close()
    assert den.NoCachePool().get(store, "note.txt") == b"a note"
    for decoder in (me.SampleDecoder(), den.SampleDecoder()):
        decoded, info = den.DecodeFileStore(store, decoder=decoder)["note.txt"]
        assert decoded == "a note" and tuple(info.file_names) == ("note.txt",)


def _check_positions(root: Path, tmp: Path) -> None:
    """megatron.energon's ``current_sample_index`` / ``current_batch_index`` read in encode_sample."""
    seen = []

    class Counting(Encoder):
        @me.stateless
        def encode_sample(self, sample):
            seen.append((self.current_sample_index, self.current_batch_index))
            return super().encode_sample.__wrapped__(self, sample)

    _run([_facade(root, tmp, 0, 1, 0, encoder=Counting())], 2)
    assert seen == [(i, i // B) for i in range(2 * G)]


def _check_worker_config(root: Path, tmp: Path) -> None:
    loader = _facade(root, tmp, 1, 2, 0, config={"seed_offset": 5})
    assert (loader.rank, loader.world_size, loader.seed) == (1, 2, 5)
    assert den.WorkerConfig(rank=1, world_size=2, num_workers=0) == me.WorkerConfig(rank=1, world_size=2, num_workers=0)
    ours = den.get_savable_loader(
        den.get_train_dataset(
            root / "aux.yaml",
            batch_size=B,
            global_batch_size=G,
            worker_config=den.WorkerConfig(rank=1, world_size=2, num_workers=0, seed_offset=5),
            task_encoder=Encoder(),
        ),
        cache_pool=me.FileStoreCachePool(parent_cache_dir=tmp / "cache-ours", num_workers=1),
    )
    assert _run([loader], 1) == _run([ours], 1)


def _check_sample_type(root: Path, tmp: Path) -> None:
    """``sample_type=`` given megatron.energon's classes: checked by name, as for the facade's."""
    config = me.WorkerConfig(rank=0, world_size=1, num_workers=0)
    den.get_train_dataset(root / "ds1", batch_size=B, worker_config=config, sample_type=me.CrudeSample)
    with pytest.raises(datareel.OptionError, match="sample_type=TextSample does not match"):
        den.get_train_dataset(root / "ds1", batch_size=B, worker_config=config, sample_type=me.TextSample)
    records = datareel.from_sequence([{"__key__": f"k{i}", "x": i} for i in range(4)])
    den.get_train_dataset(records, batch_size=B, worker_config=config, sample_type=me.Sample)


def _check_facade_batching(root: Path, tmp: Path) -> None:
    """megatron.energon's sample dataclasses batched by the facade's DefaultTaskEncoder as its own are."""

    def batches(sample_class):
        class Typed(den.DefaultTaskEncoder):
            def encode_sample(self, sample):
                return sample_class(__key__=sample["__key__"], __restore_key__=(), __subflavors__={"a": 1}, text="t")

        config = me.WorkerConfig(rank=0, world_size=1, num_workers=0)
        dataset = den.get_train_dataset(root / "ds2", batch_size=B, worker_config=config, task_encoder=Typed())
        return _first_batch(den.get_savable_loader(dataset))

    theirs, ours = batches(me.TextSample), batches(den.TextSample)
    assert theirs.__subflavors__ == ours.__subflavors__ == [{"a": 1}] * B
    assert (theirs.__key__, theirs.text) == (ours.__key__, ours.text)


def _check_epath(root: Path, tmp: Path) -> None:
    from megatron.energon.epathlib import EPath

    config = me.WorkerConfig(rank=0, world_size=1, num_workers=0)
    got = den.get_train_dataset(EPath(str(root / "ds1")), batch_size=B, worker_config=config)
    assert len(got.dataset) == N
    assert den.epathlib.EPath(EPath(str(root / "ds1"))) == den.epathlib.EPath(root / "ds1")  # read by its url


CHECKS = {
    "SampleDecoder": _check_decoder,
    "DefaultTaskEncoder-Sample-Batch": _check_task_encoder_and_dataclasses,
    "stateless": _check_stateless,
    "Cooker-cooker-basic_sample_keys": _check_cooker,
    "SourceInfo": _check_source_info,
    "FileStoreCachePool": _check_file_store,
    "SystemFileStore": _check_megatron_file_store,
    "current_sample_index-current_batch_index": _check_positions,
    "WorkerConfig": _check_worker_config,
    "sample_type": _check_sample_type,
    "Sample-batched-by-the-facade": _check_facade_batching,
    "EPath": _check_epath,
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_each_megatron_type_is_used(root: Path, tmp_path: Path, name: str) -> None:
    CHECKS[name](root, tmp_path)


def test_a_decoder_datareel_cannot_apply_is_refused_by_name(root: Path, tmp_path: Path) -> None:
    class Own(me.SampleDecoder):
        def decode(self, fname, raw):
            return raw[::-1]

    for decoder, match in ((Own(), "defines its own decode"), (object(), "config\\(\\) gives")):
        encoder = Encoder()
        encoder.decoder = decoder
        with pytest.raises(datareel.OptionError, match=match):
            _facade(root, tmp_path, 0, 1, 0, encoder=encoder)


def test_a_worker_debug_path_is_answered_not_dropped(monkeypatch, caplog) -> None:
    """megatron.energon's WorkerConfig(worker_debug_path=) is read with the rest; datareel writes no worker debug
    logs, and one log line says so."""
    import logging

    from datareel.energon import worker

    monkeypatch.setattr(worker, "_explained", set())
    config = me.WorkerConfig(rank=0, world_size=1, num_workers=0, worker_debug_path="/tmp/dbg-{worker_id}.log")
    with caplog.at_level(logging.INFO, logger="datareel"):
        records = datareel.from_sequence([{"__key__": f"k{i}", "x": i} for i in range(4)])
        spec = den.get_train_dataset(records, batch_size=B, worker_config=config)
    assert isinstance(spec.worker_config, den.WorkerConfig)
    assert spec.worker_config.worker_debug_path == "/tmp/dbg-{worker_id}.log"
    assert any("worker_debug_path" in r.getMessage() and "nothing is written" in r.getMessage() for r in caplog.records)
