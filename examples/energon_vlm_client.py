r"""A vision-language training client written against Megatron-Energon's API, with the usage patterns of
Megatron-LM's multimodal example (its dataloader provider and task encoder).

The commands below run from the repository root with the README's virtual environment (activated, drop
``.venv/bin/``). The client reads a captioning dataset (an image and a caption per sample) with a ``train``
and a ``val`` split. To make a small one (60 captioned PNGs in 3 shards) and prepare it with 8/2/0
train/val/test shares:

    .venv/bin/python examples/energon_vlm_client.py --make-dataset DATASET
    .venv/bin/datareel prepare DATASET --split-ratio 8,2,0 --sample-type CaptioningSample \
        --field-map '{"image": "png", "caption": "txt"}'

(``energon prepare DATASET --non-interactive`` with the same three options prepares it the same way.) The
dataset's shards are split by shard: give ``val`` a share, or the client has no validation data.

On Energon, as written (one topology; ``--global-batch-size`` is not Energon's):

    .venv/bin/torchrun --nproc-per-node=2 examples/energon_vlm_client.py DATASET OUT --steps 6 [--pack]

Switch its Megatron-Energon imports to ``datareel.energon`` and it resumes on another number of ranks. The
global batch size (datareel's one addition) is part of the checkpoint: give the same one to the run that saves
and to every run that resumes (a different one is refused, naming the saved and the new size):

    .venv/bin/torchrun --nproc-per-node=2 examples/energon_vlm_client.py DATASET OUT \
        --steps 6 --save-at 3 --global-batch-size 8 [--pack] [--workers 1]
    .venv/bin/torchrun --nproc-per-node=4 examples/energon_vlm_client.py DATASET OUT \
        --steps 3 --load --global-batch-size 8 [--pack]

The second run continues at global batch 3 with the global batches the first run's steps 3, 4, 5 had (its
ranks 2 and 3 find no state file and take theirs from the saved global position). Give ``--pack`` to both or
to neither.

Switching only the first import (the loader functions) is Megatron-LM's own pattern: its task encoder,
samples, batches, ``WorkerConfig``, ``FileStoreCachePool`` and ``stateless`` stay Megatron-Energon's, and
datareel reads them by their fields and configuration (the same batches as with every import switched).

Patterns (Megatron-LM's newer ``dataloader_provider.py``): ``FileStoreCachePool`` and ``SourceInfo`` imported
at module top, a ``WorkerConfig`` built from the data-parallel group with ``seed_offset`` and a
``global_error_handler`` / ``restore_error_handler`` taking ``(exception, sample, sources)``; loaders made with
``cache_pool=FileStoreCachePool(method="raw")`` and watchdog timeouts; a typed captioning dataset read with
``image_decode="pil"``; a generator
``encode_sample`` under ``@stateless(restore_seeds=True)`` drawing from ``np.random``; dataclass
samples and batches; ``encode_batch`` through ``dataclasses.asdict``; with ``--pack``, online packing
(``packing_buffer_size``) with a greedy knapsack over an encoded length in ``select_samples_to_pack``
and a ``@stateless`` ``pack_selected_samples``; ``virtual_epoch_length``; validation datasets in
``LimitDataset(RepeatDataset(...), reset_after_epoch=True)`` under a cyclic iterator; the loader
state saved into one file per data-parallel rank and restored where a file exists.

Writes OUT/train-RANK.json (per micro-step: keys, token sums), OUT/val-RANK.json, and at ``--save-at``
OUT/state/dataloader-RANK.pt.
"""

import argparse
import dataclasses
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from megatron.energon import (  # the loader functions (Megatron-LM's dataloader provider)
    LimitDataset,
    RepeatDataset,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_datasets,
)

# isort: split
from megatron.energon import (  # the types (Megatron-LM's task encoder and provider import these)
    Batch,
    CaptioningSample,
    DefaultTaskEncoder,
    FileStoreCachePool,
    Sample,
    SourceInfo,
    WorkerConfig,
)
from megatron.energon.task_encoder.base import stateless
from PIL import Image

MICRO_BATCH = 2
SEQ_LENGTH = 48  # packing capacity (tokens)
TILE_TOKENS = 4


@dataclasses.dataclass
class ImageTaskSample(Sample):
    imgs: torch.Tensor  # (tiles, 3, 4, 4)
    tokens: torch.Tensor  # (length,)
    total_len: int


@dataclasses.dataclass
class ImageTaskBatch(Batch):
    imgs: torch.Tensor  # (samples, max tiles, 3, 4, 4)
    tokens: torch.Tensor  # (samples, max length), zero-padded
    lengths: torch.Tensor  # (samples,)


def compact_sample_error_handler(exception: Exception, sample, sources: list[SourceInfo] | None = None) -> None:
    """Megatron's newer provider hands this to ``WorkerConfig(global_error_handler=, restore_error_handler=)``:
    it is told of each failing sample with the sample and where it was read, and the sample is skipped."""
    key = getattr(sample, "__key__", sample)
    where = ", ".join(f"{s.dataset_path}:{s.shard_name}#{s.index}" for s in sources or ())
    print(f"sample {key} failed: {exception!r} (read from {where or 'unknown'})", flush=True)


class TaskEncoder(DefaultTaskEncoder[CaptioningSample, ImageTaskSample, ImageTaskBatch, dict]):
    """Tiles each image (how many tiles depends on its size and a random augmentation), tokenises the
    caption, and with packing fills sequences of SEQ_LENGTH tokens with a greedy knapsack."""

    def __init__(self, packing: bool, fail_key: str | None = None):
        super().__init__()
        self.packing, self.fail_key = packing, fail_key

    @stateless(restore_seeds=True)
    def encode_sample(self, sample: CaptioningSample):
        if sample.__key__ == self.fail_key:  # a damaged sample: the handler is told, the sample is skipped
            raise ValueError(f"cannot decode {sample.__key__}")
        if not isinstance(sample.image, Image.Image):
            raise TypeError(f"image_decode='pil' should give PIL images, got {type(sample.image)}")
        if isinstance(sample, CaptioningSample):
            image = torch.from_numpy(np.asarray(sample.image, dtype=np.float32)).permute(2, 0, 1) / 255.0
            tiles = 1 + (image.shape[1] * image.shape[2]) // 40 + int(np.random.randint(0, 2))  # augmentation
            imgs = torch.stack([image[:, :4, :4] + float(np.random.rand()) for _ in range(tiles)])
            words = sample.caption.split()
            tokens = torch.tensor([len(w) * 31 % 97 for w in words] + [int(np.random.randint(0, 1000))])
            yield ImageTaskSample(
                __key__=sample.__key__,
                __restore_key__=sample.__restore_key__,
                __subflavors__=sample.__subflavors__,
                imgs=imgs,
                tokens=tokens,
                total_len=len(tokens) + tiles * TILE_TOKENS,
            )
        else:
            raise NotImplementedError(f"unsupported sample type {type(sample)}")

    def select_samples_to_pack(self, samples):
        """Greedy knapsack over the encoded length (largest first), Megatron-style."""
        order = sorted(samples, key=lambda s: s.total_len, reverse=True)
        packs, current, filled = [], [], 0
        for s in order:
            if current and filled + s.total_len > SEQ_LENGTH:
                packs.append(current)
                current, filled = [], 0
            current.append(s)
            filled += s.total_len
        if current:
            packs.append(current)
        return packs

    @stateless
    def pack_selected_samples(self, samples):
        return ImageTaskSample(
            __key__=",".join(s.__key__ for s in samples),
            __restore_key__=(),
            __subflavors__=samples[0].__subflavors__,
            imgs=torch.cat([s.imgs for s in samples]),
            tokens=torch.cat([s.tokens for s in samples]),
            total_len=sum(s.total_len for s in samples),
        )

    def batch(self, samples):
        longest = max(len(s.tokens) for s in samples)
        tiles = max(len(s.imgs) for s in samples)
        tokens = torch.zeros(len(samples), longest, dtype=torch.int64)
        imgs = torch.zeros(len(samples), tiles, 3, 4, 4)
        for i, s in enumerate(samples):
            tokens[i, : len(s.tokens)] = s.tokens
            imgs[i, : len(s.imgs)] = s.imgs
        return ImageTaskBatch(
            __key__=[s.__key__ for s in samples],
            __restore_key__=(),
            __subflavors__=[s.__subflavors__ for s in samples],
            imgs=imgs,
            tokens=tokens,
            lengths=torch.tensor([s.total_len for s in samples]),
        )

    def encode_batch(self, batch: ImageTaskBatch) -> dict:
        return dataclasses.asdict(batch)


def cyclic_iter(iterable):
    while True:
        yield from iterable


def record(batch):
    return {"keys": list(batch["__key__"]), "tokens": batch["tokens"].sum().item(), "imgs": batch["imgs"].sum().item()}


def make_dataset(root: Path, shards: int = 3, per_shard: int = 20, seed: int = 0) -> None:
    """Captioned PNGs of several sizes as WebDataset shards (``KEY.png``, ``KEY.txt``) under ``root``."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with tarfile.open(root / f"shard-{s}.tar", "w") as tar:
            for i in range(s * per_shard, (s + 1) * per_shard):
                h, w = int(rng.integers(4, 12)), int(rng.integers(4, 12))
                image = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(image, format="png")
                words = " ".join(f"w{int(x)}" * int(x % 3 + 1) for x in rng.integers(0, 50, int(rng.integers(2, 9))))
                for part, data in (("png", image.getvalue()), ("txt", f"caption {i}: {words}".encode())):
                    info = tarfile.TarInfo(f"img{i:03d}.{part}")
                    info.size, info.mtime = len(data), 1_700_000_000
                    tar.addfile(info, io.BytesIO(data))
    print(f"wrote {shards} shards of {per_shard} captioned images under {root}; prepare it with a val split")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset", nargs="?", help="a prepared captioning dataset with train and val splits")
    parser.add_argument("out", nargs="?", help="folder for the records and the state files")
    parser.add_argument("--make-dataset", metavar="DIR", help="write a small captioning dataset (unprepared) and exit")
    parser.add_argument("--steps", type=int, help="global batches to train")
    parser.add_argument("--save-at", type=int, default=None, help="save per-rank state files after this many")
    parser.add_argument("--load", action="store_true", help="restore from per-rank state files where present")
    parser.add_argument("--pack", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--global-batch-size", type=int, default=None)
    parser.add_argument("--fail-key", default=None, help="a sample key whose encoding fails (handler test)")
    parser.add_argument("--seed", type=int, default=0, help="WorkerConfig's seed_offset (Megatron's --dataloader-seed)")
    args = parser.parse_args()
    if args.make_dataset:
        make_dataset(Path(args.make_dataset))
        return
    if args.dataset is None or args.out is None or args.steps is None:
        parser.error("give DATASET OUT --steps N (or --make-dataset DIR)")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = Path(args.out)
    (out / "state").mkdir(parents=True, exist_ok=True)

    worker_config = WorkerConfig(
        rank=rank,
        world_size=world,
        num_workers=args.workers,
        data_parallel_group=dist.group.WORLD,
        seed_offset=args.seed,
        global_error_handler=compact_sample_error_handler,
        restore_error_handler=compact_sample_error_handler,
    )
    extra = {} if args.global_batch_size is None else {"global_batch_size": args.global_batch_size}
    global_batch = args.global_batch_size or MICRO_BATCH * world
    common = dict(
        worker_config=worker_config,
        batch_size=MICRO_BATCH,
        task_encoder=TaskEncoder(args.pack, args.fail_key),
        packing_buffer_size=16 if args.pack else None,
        image_decode="pil",
    )
    train_ds = get_train_dataset(
        args.dataset,
        split_part="train",
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        virtual_epoch_length=5,
        **common,
        **extra,
    )
    # Megatron's newer provider: a cache pool for auxiliary data and a watchdog on every batch's wait
    train_loader = get_savable_loader(
        train_ds,
        cache_pool=FileStoreCachePool(num_workers=2, method="raw", parent_cache_dir=out / "cache"),
        watchdog_timeout_seconds=5 * 60,
        watchdog_initial_timeout_seconds=5 * 60 + (16 if args.pack else 0) * 0.0075,
    )
    state_file = out / "state" / f"dataloader-{rank}.pt"
    if args.load and state_file.exists():  # Megatron restores only where this rank's file exists
        train_loader.restore_state_rank(torch.load(state_file, weights_only=False))
    val_loaders = [
        get_loader(
            LimitDataset(
                RepeatDataset(val_ds, worker_config=worker_config),
                length=2,
                worker_config=worker_config,
                reset_after_epoch=True,
            ),
            cache_pool=FileStoreCachePool(method="raw", parent_cache_dir=out / "cache"),
            watchdog_timeout_seconds=5 * 60,
        )
        for val_ds, _source in get_val_datasets(args.dataset, split_part="val", **common)
    ]
    val_iters = [cyclic_iter(loader) for loader in val_loaders]

    micro_steps = global_batch // (MICRO_BATCH * world)
    train_iter = cyclic_iter(train_loader)
    trained, evaluated = [], []
    for step in range(args.steps):
        trained.append([record(next(train_iter)) for _ in range(micro_steps)])
        if step % 2 == 1:
            evaluated.append([record(next(it)) for it in val_iters for _ in range(2)])
        if args.save_at is not None and step + 1 == args.save_at:
            torch.save(train_loader.save_state_rank(), state_file)
            dist.barrier()
    (out / f"train-{rank}.json").write_text(json.dumps(trained))
    (out / f"val-{rank}.json").write_text(json.dumps(evaluated))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
