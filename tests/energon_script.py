"""A training script written against Megatron-Energon's API (tests run it unchanged, and with one
changed import line against datareel.energon).

    python energon_script.py DATASET OUT_DIR STEPS [--restore] [--global-batch-size G]

DATASET holds TextSample data (field_map text: txt).  Under torchrun it trains STEPS global batches
(a micro-batch of 2 per rank), writing the keys of each batch it consumed, and saves the loader's
global state at the end (rank 0); with --restore it first restores that state.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_savable_loader, get_train_dataset  # the import line


class Encoder(DefaultTaskEncoder):
    """For a TextSample dataset: each batch is the list of its samples' keys."""

    def encode_sample(self, sample):
        sample.text = sample.text.upper()
        return sample

    def batch(self, samples):
        return [s.__key__ for s in samples]

    def encode_batch(self, batch):
        return batch


def main():
    dataset, out_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    extra = {}
    if "--global-batch-size" in sys.argv:
        extra["global_batch_size"] = int(sys.argv[sys.argv.index("--global-batch-size") + 1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    worker_config = WorkerConfig.default_worker_config(num_workers=1)
    train_ds = get_train_dataset(
        dataset,
        batch_size=2,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        worker_config=worker_config,
        task_encoder=Encoder(),
        **extra,
    )
    loader = get_savable_loader(train_ds)
    state_path = os.path.join(out_dir, "state.pt")
    if "--restore" in sys.argv:
        loader.restore_state_global(torch.load(state_path, weights_only=False) if rank == 0 else None, src_rank=0)
    micro_steps = steps * extra.get("global_batch_size", 2 * dist.get_world_size()) // (2 * dist.get_world_size())
    consumed = []
    it = iter(loader)
    for _ in range(micro_steps):
        consumed.append(next(it))
    state = loader.save_state_global(global_dst_rank=0)
    if rank == 0:
        torch.save(state, state_path)
    with open(os.path.join(out_dir, f"consumed-{rank}.json"), "w") as f:
        json.dump(consumed, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
