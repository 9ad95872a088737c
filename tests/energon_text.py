"""Small text datasets prepared by megatron.energon itself (its own ``prepare_dataset``), keyed ``<prefix><index>``
so that a key names its dataset and its sample index; and a ``blend_epochized`` metadataset over them."""

from __future__ import annotations

from pathlib import Path


def prepare_text(root: Path, prefix: str, n: int, per_shard: int) -> None:
    """``n`` samples ``{"txt": "<prefix> <i>"}`` in shards of ``per_shard``, prepared as one train split."""
    import webdataset as wds
    from megatron.energon.flavors import BaseWebdatasetFactory

    (root / "parts").mkdir(parents=True)
    with wds.ShardWriter(f"{root}/parts/data-%d.tar", maxcount=per_shard, verbose=0) as writer:
        for i in range(n):
            writer.write({"__key__": f"{prefix}{i:05d}", "txt": f"{prefix} {i}".encode()})
        shards = writer.shard
    BaseWebdatasetFactory.prepare_dataset(
        root, [f"parts/data-{{0..{shards - 1}}}.tar"], split_parts_ratio=[("train", 1.0)], shuffle_seed=None, workers=1
    )
    (root / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: txt\n"
    )


def blend_epochized(path: Path, entries: list[str]) -> Path:
    """A metadataset at ``path`` blending ``entries`` (paths relative to it) once each per epoch."""
    lines = ["__module__: megatron.energon", "__class__: MetadatasetV2", "splits:", "  train:", "    blend_epochized:"]
    for entry in entries:
        lines += ["      - repetitions: 1", f"        path: {entry}"]
    path.write_text("\n".join(lines) + "\n")
    return path
