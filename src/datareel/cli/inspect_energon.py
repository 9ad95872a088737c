"""``datareel inspect`` on a megatron.energon checkpoint: Megatron's ``train_dataloader_dprank*.pt`` files (the
directory that holds them, or one of them).  Says what the old job was (ranks, workers, batch size), how many
batches and samples each rank had handed to training, and, given the dataset and the old job's order options,
how much of its epoch is left for datareel to serve and on which topologies it can continue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..energon.adopt.records import RANK_FILE, read_energon_checkpoint


def is_energon_checkpoint(path: str) -> bool:
    """Whether ``path`` is Megatron's per-rank loader file, or a directory holding such files."""
    p = Path(path)
    if p.is_dir():
        return any(RANK_FILE.match(child.name) for child in p.iterdir())
    return bool(RANK_FILE.match(p.name))


def describe_energon(path: str, dataset: str | None, split: str, order: dict[str, Any]) -> dict[str, Any]:
    """What the checkpoint at ``path`` says; with ``dataset`` (and the old job's ``order`` options), its remainder."""
    where = Path(path).parent if Path(path).is_file() else Path(path)
    states = read_energon_checkpoint(where)
    ranks = []
    for state in states:
        batches = []
        for w in state["worker_states"]:
            if isinstance(w, dict) and "offset" in w:
                inner = w.get("state") or {}
                batches.append(int(inner.get("sample_index", 0)) + int(w["offset"]))
            else:
                batches.append(None)  # num_workers=0: its dataset state alone (counted in the remainder)
        ranks.append(
            {"workers": len(state["worker_states"]), "batches": batches, "batch_size": state["micro_batch_size"]}
        )
    out: dict[str, Any] = {
        "checkpoint": str(where),
        "kind": "megatron.energon",
        "old_world_size": len(states),
        "old_workers": ranks[0]["workers"],
        "ranks": ranks,
    }
    if dataset is None:
        out["remainder"] = None
        return out
    from .. import energon as den
    from ..energon.adopt.facade import setup_of
    from ..energon.adopt.remainder import adopt

    spec = den.get_train_dataset(
        dataset,
        split_part=split,
        worker_config=den.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=1,
        **{k: v for k, v in order.items() if v is not None},
    )
    setup = setup_of(spec)
    adoption = adopt(states, setup)
    out["remainder"] = {
        "samples": len(adoption.remainder),
        "epoch": adoption.epoch,
        "epoch_length": setup.epoch_length,
        "handed_out": adoption.handed_out,
    }
    return out


def format_energon(d: dict[str, Any]) -> str:
    lines = [
        f"{d['checkpoint']}: a megatron.energon loader checkpoint of {d['old_world_size']} rank(s) x "
        f"{d['old_workers']} worker state(s), batch size {d['ranks'][0]['batch_size']}",
    ]
    for r, rank in enumerate(d["ranks"]):
        counted = [b for b in rank["batches"] if b is not None]
        said = f"{sum(counted)} batches handed to training" if counted else "its dataset state (num_workers=0)"
        lines.append(f"  rank {r}: {said}")
    rest = d.get("remainder")
    if rest is None:
        lines.append(
            "  give the dataset (and the old job's --shuffle-buffer-size / --max-samples-per-sequence) to see what "
            "is left of its epoch"
        )
    else:
        lines.append(
            f"  left of epoch {rest['epoch']}: {rest['samples']} of {rest['epoch_length']} samples; datareel serves "
            f"them first, each once, then its own order from the next epoch"
        )
        lines.append(
            "  continues on any world size and worker count: restore_state_global(read_energon_checkpoint(dir)) on "
            "every rank; any micro-batch size m and world size W whose m x W divides the new global batch"
        )
    return "\n".join(lines)
