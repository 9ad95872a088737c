"""rank / world_size default to torch.distributed's when a process group is initialised."""

from __future__ import annotations

import os
import socket

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

import datareel


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        loader = datareel.Loader([{"id": i} for i in range(20)], global_batch_size=8, micro_batch_size=2, shuffle=False)
        batch = next(iter(loader))
        with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
            f.write(f"{loader.rank} {loader.world_size} {batch['__positions__'].tolist()}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_rank_and_world_size_come_from_the_process_group(tmp_path):
    mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, start_method="spawn", join=True)
    assert (tmp_path / "rank0").read_text() == "0 2 [0, 1]"
    assert (tmp_path / "rank1").read_text() == "1 2 [2, 3]"


def test_without_a_process_group_rank_0_of_1():
    assert not dist.is_initialized()
    loader = datareel.Loader([1, 2, 3], global_batch_size=1, micro_batch_size=1)
    assert (loader.rank, loader.world_size) == (0, 1)
