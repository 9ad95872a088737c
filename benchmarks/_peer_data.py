"""The samples of ``bench_peers.py``, written once in each loader's native format (not used by tests).

Sample ``i`` is the same bytes in every format: ``raw`` a 10 KiB payload (a rotation of one random
block, as ``bench_webdataset.py``), ``jpeg`` one of a few Pillow-made ~100 KB JPEGs of 640×480.
Formats, each under ``root/<kind>/``:

- ``wds/``: tar shards of 1,000 samples (``<key>.bin`` or ``<key>.jpg``), prepared by ``energon
  prepare`` (datareel and Energon read the same directory);
- ``litdata/``: ``litdata.optimize`` chunks of 64 MB, one ``{"data": bytes}`` item per sample;
- ``arrayrecord/``: ArrayRecord files of 1,000 records (``group_size:1``, the layout Grain reads
  at random), one record per sample.

A ``done`` file marks a finished build, so a second run with ``--data`` reuses it.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

PER_SHARD = 1000
_RAW = os.urandom(10 * 1024)
_JPEGS: list[bytes] = []


def jpegs(count: int = 8) -> list[bytes]:
    """``count`` distinct ~100 KB JPEGs (640×480, smooth colour plus noise, quality 92)."""
    if not _JPEGS:
        import numpy as np
        from PIL import Image

        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:480, 0:640]
        for c in range(count):
            base = np.stack([(x * (c + 1)) % 256, (y * 2 + c * 30) % 256, ((x + y) // 3) % 256], axis=-1)
            noise = rng.normal(0, 6, base.shape)
            pixels = np.clip(base + noise, 0, 255).astype(np.uint8)  # (480, 640, 3)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="JPEG", quality=92)
            _JPEGS.append(out.getvalue())
    return _JPEGS


def sample(kind: str, i: int) -> bytes:
    """Sample ``i`` of the ``kind`` ("raw" or "jpeg") data set."""
    if kind == "raw":
        return _RAW[i % 97 :] + _RAW[: i % 97]
    pool = jpegs()
    return pool[i % len(pool)]


def part(kind: str) -> str:
    return "bin" if kind == "raw" else "jpg"


def write_wds(root: Path, kind: str, count: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for s in range((count + PER_SHARD - 1) // PER_SHARD):
        with tarfile.open(root / f"shard-{s:04d}.tar", "w") as tar:
            for i in range(s * PER_SHARD, min(count, (s + 1) * PER_SHARD)):
                data = sample(kind, i)
                info = tarfile.TarInfo(f"{i:08d}.{part(kind)}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    energon = str(Path(sys.executable).parent / "energon")
    subprocess.run(
        [energon, "prepare", str(root), "--non-interactive", "--split-ratio=1,0,0", "--sample-type=CrudeWebdataset"],
        check=True,
        capture_output=True,
    )


def _litdata_item(job: tuple[str, int]) -> dict[str, bytes]:
    kind, i = job
    return {"data": sample(kind, i)}


def write_litdata(root: Path, kind: str, count: int) -> None:
    import litdata

    litdata.optimize(
        fn=_litdata_item,
        inputs=[(kind, i) for i in range(count)],
        output_dir=str(root),
        chunk_bytes="64MB",
        num_workers=2,
        reorder_files=False,
        verbose=False,
    )


def write_arrayrecord(root: Path, kind: str, count: int) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    root.mkdir(parents=True, exist_ok=True)
    for s in range((count + PER_SHARD - 1) // PER_SHARD):
        writer = ArrayRecordWriter(str(root / f"part-{s:04d}.array_record"), "group_size:1")
        for i in range(s * PER_SHARD, min(count, (s + 1) * PER_SHARD)):
            writer.write(sample(kind, i))
        writer.close()


def arrayrecord_paths(root: Path) -> list[str]:
    return [str(p) for p in sorted(root.glob("*.array_record"))]


def build(root: Path, kind: str, count: int) -> Path:
    """``root/<kind>-<count>/`` with the three formats (made once; reused when already done)."""
    home = root / f"{kind}-{count}"
    if (home / "done").exists():
        return home
    write_wds(home / "wds", kind, count)
    write_litdata(home / "litdata", kind, count)
    write_arrayrecord(home / "arrayrecord", kind, count)
    (home / "done").write_text("ok\n")
    return home


def warm(home: Path) -> None:
    """Read every file once so that each loader starts from a warm page cache."""
    for path in sorted(home.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass
