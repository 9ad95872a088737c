"""Train a tiny model with DDP on CPU (gloo), checkpoint model, optimizer and loader, resume elsewhere.

Run with torchrun; a second run with the same --ckpt-dir resumes from the last
checkpoint, on any number of processes whose micro-batch × world size divides
the global batch size::

    torchrun --nproc-per-node 4 examples/train_ddp.py --ckpt-dir /tmp/ddp-ckpt --global-batches 20 --stop-after 10
    torchrun --nproc-per-node 2 examples/train_ddp.py --ckpt-dir /tmp/ddp-ckpt --global-batches 20

The checkpoint is written atomically (temp file, then rename), so a job killed
at any moment leaves either the previous checkpoint or the new one, never half
of one.  ``--log-dir`` writes, per rank, one JSON line per consumed micro-batch
(its reel positions and sample ids), which the tests use to prove that the
killed and the resumed job together consumed each sample exactly once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import datareel


class SyntheticRegression:
    """Sample ``i``: features drawn from an RNG keyed by ``(seed, i)``, and a noisy linear target."""

    def __init__(self, samples: int, seed: int = 0, dim: int = 8):
        self.samples, self.seed, self.dim = samples, seed, dim
        self.weights = np.random.default_rng([seed, 2**32]).normal(size=dim).astype(np.float32)

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, i: int) -> dict:
        rng = np.random.default_rng([self.seed, i])
        x = rng.normal(size=self.dim).astype(np.float32)
        return {"id": i, "x": x, "y": np.float32(x @ self.weights + 0.01 * rng.normal())}


def make_dataset(samples: int, seed: int) -> datareel.Source:
    return datareel.from_sequence(SyntheticRegression(samples, seed), name="synthetic-regression")


def save_checkpoint(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(payload, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt-dir", type=Path, required=True)
    p.add_argument("--global-batches", type=int, default=20, help="train until this many global batches in total")
    p.add_argument("--stop-after", type=int, default=None, help="stop (after a checkpoint) at this global batch")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint every N global batches")
    p.add_argument("--global-batch-size", type=int, default=24)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--num-workers", type=int, default=1)
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per global batch (tests)")
    p.add_argument("--log-dir", type=Path, default=None, help="write consumed positions per rank here")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = datareel.Loader(
        make_dataset(args.samples, args.seed),
        global_batch_size=args.global_batch_size,
        micro_batch_size=args.micro_batch_size,
        seed=args.seed,
        num_workers=args.num_workers,
    )

    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = args.ckpt_dir / "latest.pt"
    step = 0
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        model.module.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        loader.restore_state_global(ckpt["loader"], src_rank=None)  # every rank read the same file
        step = ckpt["global_step"]
        if rank == 0:
            print(f"resumed at global batch {step} on {world} ranks (reel cursor {loader.cursor})", flush=True)
    log = None
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(args.log_dir / f"rank{rank}.jsonl", "a")

    groups = loader.global_batches()  # one group of micro-batches per optimizer step (any batch-size schedule)
    stop = min(args.global_batches, args.stop_after or args.global_batches)
    while step < stop:
        optimizer.zero_grad()
        group = next(groups)
        samples_per_rank = group.size // world
        for batch in group:
            if log:
                log.write(
                    json.dumps({"positions": batch["__positions__"].tolist(), "ids": batch["id"].tolist()}) + "\n"
                )
                log.flush()
            # gradients are all-reduced only with the global batch's last micro-batch
            sync = contextlib.nullcontext() if loader.at_global_batch_boundary else model.no_sync()
            with sync:
                error = model(batch["x"]).squeeze(-1) - batch["y"]
                # sum over this rank's share of the global batch; DDP averages over ranks
                (error.pow(2).sum() / samples_per_rank).backward()
        optimizer.step()
        step += 1
        if args.sleep:
            time.sleep(args.sleep)
        if step % args.ckpt_every == 0 or step == stop:
            state = loader.save_state_global(dst_rank=0)
            if rank == 0:
                save_checkpoint(
                    ckpt_path,
                    {
                        "model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "loader": state,
                        "global_step": step,
                    },
                )
                print(f"global batch {step}: checkpoint written (loss {error.pow(2).mean().item():.4f})", flush=True)
            dist.barrier()
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
