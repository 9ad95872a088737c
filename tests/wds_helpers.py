"""Build small WebDataset shards inside tests, and read them back with Energon itself."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

ENERGON = str(Path(sys.executable).parent / "energon")


def sample_parts(i: int) -> dict[str, bytes]:
    """Parts of sample i: text, json, a png image and an npy array."""
    rng = np.random.default_rng(i)
    image = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (6, 5, 3), dtype=np.uint8)).save(image, format="png")
    array = io.BytesIO()
    np.save(array, rng.normal(size=(2, 3)).astype(np.float32))
    return {
        "txt": f"sample number {i} ünïcode".encode(),
        "json": json.dumps({"i": i, "tags": ["a", str(i)]}).encode(),
        "png": image.getvalue(),
        "npy": array.getvalue(),
    }


def write_shard(path: Path, samples: list[tuple[str, dict[str, bytes]]], fmt: int = tarfile.PAX_FORMAT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for key, parts in samples:
            for part, data in parts.items():
                info = tarfile.TarInfo(f"{key}.{part}")
                info.size = len(data)
                info.mtime = 1_700_000_000
                tar.addfile(info, io.BytesIO(data))


def build_shards(root: Path, shard_sizes=(4, 7, 1, 5), long_names: bool = True) -> list[str]:
    """Shards under root/parts; shard 1 is GNU format and holds long, nested keys. -> all keys."""
    keys: list[str] = []
    i = 0
    for s, size in enumerate(shard_sizes):
        samples = []
        for _ in range(size):
            key = f"s{i:05d}"
            if long_names and s == 1:
                key = f"dir/sub/{'x' * 120}-{i:05d}"
            samples.append((key, sample_parts(i)))
            keys.append(key)
            i += 1
        write_shard(root / "parts" / f"data-{s}.tar", samples, tarfile.GNU_FORMAT if s == 1 else tarfile.PAX_FORMAT)
    return keys


def energon_prepare(root: Path, *extra: str) -> None:
    cmd = [ENERGON, "prepare", str(root), "--non-interactive", "--split-ratio=1,0,0", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"energon prepare failed:\n{proc.stdout}\n{proc.stderr}")


def energon_samples(root: Path, split: str = "train", train: bool = False) -> dict[str, dict]:
    """Every sample of a split as Energon's own loader yields it (key -> sample dict)."""
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        WorkerConfig,
        get_loader,
        get_train_dataset,
        get_val_dataset,
        stateless,
    )

    class Passthrough(DefaultTaskEncoder):
        cookers = [Cooker(stateless(lambda sample: sample))]

        def batch(self, samples):
            return samples

    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    if train:
        dataset = get_train_dataset(
            str(root),
            split_part=split,
            worker_config=config,
            batch_size=None,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            repeat=False,
            task_encoder=Passthrough(),
        )
    else:
        dataset = get_val_dataset(
            str(root), split_part=split, worker_config=config, batch_size=None, task_encoder=Passthrough()
        )
    out = {}
    for sample in get_loader(dataset):
        if not isinstance(sample, dict):  # a typed sample is a dataclass
            sample = {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}
        out[sample["__key__"]] = sample
    return out


def write_tiny_shards(root: Path, shards: int, per_shard: int) -> int:
    """``shards`` tar files of ``per_shard`` one-part samples (``k{shard}_{j}.txt`` holding
    ``"{shard}-{j}"``) under root/parts, for datasets of many shards. -> samples in all"""
    (root / "parts").mkdir(parents=True)
    for s in range(shards):
        with tarfile.open(root / "parts" / f"s{s:05d}.tar", "w") as tar:
            for j in range(per_shard):
                data = f"{s}-{j}".encode()
                info = tarfile.TarInfo(f"k{s:05d}_{j}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return shards * per_shard


def write_template_shards(root: Path, shards: int, per_shard: int, payload: int = 8) -> int:
    """Like :func:`write_tiny_shards` but fast enough for 10^7 samples: every header is one ustar
    template with the name and checksum patched in by numpy (one ``k{shard}_{j}.txt`` member per
    sample holding ``payload`` bytes of ``x``). -> samples in all"""
    (root / "parts").mkdir(parents=True)
    template = tarfile.TarInfo("k" * 21)
    template.size = payload
    template.mtime = 0
    head = np.frombuffer(template.tobuf(tarfile.USTAR_FORMAT), dtype=np.uint8)  # (512,)
    body = np.zeros(-payload % 512 + payload, dtype=np.uint8)  # the data, padded to whole blocks
    body[:payload] = ord("x")
    j = np.arange(per_shard)
    for s in range(shards):
        # every name "k{s:05d}_{j:010d}.txt" is 21 bytes wide: (per_shard, 21)
        names = np.frombuffer("".join(f"k{s:05d}_{i:010d}.txt" for i in j.tolist()).encode(), dtype=np.uint8).reshape(
            per_shard, 21
        )
        rows = np.tile(head, (per_shard, 1))  # (per_shard, 512)
        rows[:, :21] = names
        rows[:, 148:156] = ord(" ")
        checksum = rows.sum(axis=1, dtype=np.int64)  # (per_shard,)
        digits = np.char.zfill(np.char.mod("%o", checksum), 6).astype("S6")
        rows[:, 148:154] = np.frombuffer(digits.tobytes(), dtype=np.uint8).reshape(per_shard, 6)
        rows[:, 154] = 0
        members = np.concatenate([rows, np.tile(body, (per_shard, 1))], axis=1)  # (per_shard, 512 + data)
        with open(root / "parts" / f"s{s:05d}.tar", "wb") as f:
            f.write(members.tobytes())
            f.write(bytes(1024))
    return shards * per_shard


def prepared_shard(root: Path, samples: int = 3) -> Path:
    """One prepared shard ``a-0.tar`` of ``samples`` text samples (``k{i}``, ``i + 1`` bytes each) in ``root``."""
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(root / "a-0.tar", [(f"k{i}", {"txt": b"x" * (i + 1)}) for i in range(samples)])
    prepare_webdataset(root, progress=False)
    return root


def val_blend(tmp_path: Path, texts: Path, others: int, name: str = "blend.yaml") -> Path:
    """A metadataset (``tmp_path / name``) whose ``val`` split blends the train part of ``texts`` with a new
    prepared dataset ``tmp_path / "other"`` of ``others`` TextSamples (keys ``o-00``, ...)."""
    from datareel.cli.prepare import prepare_webdataset

    other = tmp_path / "other"
    write_shard(other / "p.tar", [(f"o-{i:02d}", {"txt": f"other {i}".encode()}) for i in range(others)])
    prepare_webdataset(other, sample_type="TextSample", field_map={"text": "txt"}, progress=False)
    parts = [{"weight": 1, "path": str(path), "split_part": "train"} for path in (texts, other)]
    meta = {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": {"val": {"blend": parts}}}
    (tmp_path / name).write_text(json.dumps(meta))
    return tmp_path / name
