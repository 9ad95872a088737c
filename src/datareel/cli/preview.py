"""``datareel preview DATASET``: look at samples: each field's type, shape and an excerpt; images saved.

Samples are picked by index (``--index``, several allowed), by key (``--key``: a scan with a progress
bar, stopping at the first match), or the first ``--count``. Raw parts stay bytes unless ``--decode``:
then each sample is what a ``Loader`` over ``open_dataset(DATASET, split=...)`` hands to ``encode_sample``
(the same source, opened with the same defaults: images as float CHW tensors in [0, 1], ``torchrgb``;
``--image-decode`` for a job that passes another ``image_decode``). ``--out DIR`` saves each image
field as a PNG of its pixels (image bytes, recognised by the part's extension or by their first bytes,
and with ``--decode`` image tensors and arrays) and, for more than one image, a contact sheet
``contact.png`` (thumbnails in a grid, captioned by key); when the samples hold no image, it says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatareelError

EXCERPT = 80
"""Characters of text shown per field."""
THUMB = 128
"""Contact-sheet thumbnail size in pixels."""
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "pbm", "bmp", "tif", "tiff", "gif")
IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*")
"""First bytes of PNG, JPEG, GIF, BMP and TIFF files (WebP: ``RIFF....WEBP``): image bytes in a field whose
name has no image extension (a typed sample's ``image``) are still saved."""


def open_for_preview(path: str, *, split: str, decode: bool, image_decode: str | None = None) -> Any:
    """The source preview reads: with ``decode``, exactly the one ``open_dataset(path, split=split)`` returns
    (with ``image_decode`` when given, as the job passes it: ``"none"`` for ``None``), so a sample is what
    the Loader hands to ``encode_sample``; without, every part stays bytes."""
    from ..blend import Blend, open_dataset

    if decode:
        options = {} if image_decode is None else {"image_decode": None if image_decode == "none" else image_decode}
        source = open_dataset(path, split=split, **options)
    else:
        source = open_dataset(path, split=split, decode=False)
    if isinstance(source, Blend):
        raise DatareelError(f"{path} is a blend; preview one of its datasets (give that dataset's path)")
    return source


def pick(source: Any, indices: list[int], key: str | None, count: int, progress: bool = True) -> list[int]:
    """The sample indices to show."""
    n = len(source)
    if key is not None:
        from tqdm import tqdm

        for i in tqdm(range(n), unit="sample", desc=f"looking for key {key!r}", disable=not progress, leave=False):
            if source.key(i) == key:
                return [i]
        raise DatareelError(f"no sample of {source.name} ({n:,} samples) has key {key!r}")
    for i in indices:
        if not 0 <= i < n:
            raise DatareelError(f"--index {i} is out of range: {source.name} holds {n:,} samples (0 to {n - 1})")
    return indices or list(range(min(count, n)))


def describe(value: Any) -> tuple[str, str]:
    """``(type, summary)`` of one field: shape and dtype for arrays, an excerpt for text and bytes."""
    kind = type(value).__name__
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return kind, f"{str(value.dtype).replace('torch.', '')} {list(value.shape)}"
    if hasattr(value, "size") and hasattr(value, "mode"):  # a PIL image
        return kind, f"{value.mode} {value.size[0]}×{value.size[1]}"
    if isinstance(value, (bytes, bytearray)):
        text = _text(bytes(value))
        return kind, f"{len(value):,} bytes" + (f": {text}" if text is not None else "")
    if isinstance(value, str):
        return kind, repr(_excerpt(value)) + (f" ({len(value):,} chars)" if len(value) > EXCERPT else "")
    return kind, _excerpt(repr(value))


def _text(data: bytes) -> str | None:
    try:
        text = data[: EXCERPT * 4].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return repr(_excerpt(text)) if text.isprintable() or "\n" in text else None


def _excerpt(text: str) -> str:
    flat = text.replace("\n", "⏎")
    return flat[:EXCERPT] + ("…" if len(flat) > EXCERPT else "")


def as_image(name: str, value: Any) -> Any:
    """A PIL image of a field, or ``None``: PIL images, image bytes (by extension or first bytes), HWC / CHW
    arrays and tensors (uint8, or floats in [0, 1])."""
    from PIL import Image

    if hasattr(value, "mode") and hasattr(value, "save"):
        return value
    if isinstance(value, (bytes, bytearray)):
        if not (name.rpartition(".")[2].lower() in IMAGE_EXTENSIONS or _image_bytes(bytes(value[:12]))):
            return None
        from ..sources.decode import open_image  # PIL's in-process formats only: never Ghostscript on EPS

        try:
            with open_image(bytes(value), name) as image:
                return image.convert("RGB")
        except Exception:
            return None
    if hasattr(value, "shape") and len(value.shape) == 2 and _image_name(name):  # one channel (l8, ...)
        value = value[None]
    if hasattr(value, "shape") and len(value.shape) == 3:
        array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
        if array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3):
            array = array.transpose(1, 2, 0)  # CHW -> HWC
        if array.shape[-1] not in (1, 3):
            return None
        if array.dtype != np.uint8:
            array = (np.clip(array, 0.0, 1.0) * 255).round().astype(np.uint8)  # float images in [0, 1]
        return Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)
    return None


def read_as_loaded(source: Any, i: int) -> Any:
    """Sample ``i`` as the Loader hands it to ``encode_sample``: what ``source.read`` returns, and for a dict
    sample the ``__source__`` name the Loader adds."""
    from ..sources.base import Sample

    raw = source.read(i)
    if isinstance(raw, dict) and "__source__" not in raw:
        return Sample(raw, __source__=source.name) if isinstance(raw, Sample) else {**raw, "__source__": source.name}
    return raw


def _image_bytes(head: bytes) -> bool:
    return head.startswith(IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def _image_name(name: str) -> bool:
    return name.rpartition(".")[2].lower() in IMAGE_EXTENSIONS or "image" in name.lower()


def nothing_written(out: Path, *, decoded: bool) -> str:
    """Why ``--out`` wrote no file."""
    if decoded:
        return f"--out {out}: nothing written: no field of these samples is an image (bytes, tensor or array)"
    return (
        f"--out {out}: nothing written: no part of these samples is image bytes; add --decode to also save "
        f"decoded image arrays and tensors (e.g. an .npy of shape H×W×3)"
    )


def preview(source: Any, indices: list[int], out: Path | None) -> tuple[list[dict[str, Any]], list[Path], Path | None]:
    """Each sample's fields (``{"index", "key", "fields": [[name, type, summary], ...]}``), the image files
    written under ``out`` and the contact sheet of them (``None``: one image or none)."""
    shown: list[dict[str, Any]] = []
    written: list[Path] = []
    thumbs = []
    for i in indices:
        sample = read_as_loaded(source, i)
        fields = _fields(sample)
        key = str(dict(fields).get("__key__", i))
        rows = []
        for name, value in fields:
            rows.append([name, *describe(value)])
            image = as_image(name, value) if out is not None and not name.startswith("__") else None
            if image is not None:
                out.mkdir(parents=True, exist_ok=True)
                path = out / f"{i:06d}-{name.replace('/', '_')}.png"
                image.save(path)
                written.append(path)
                thumbs.append((key, image))
        shown.append({"index": i, "key": key, "fields": rows})
    sheet = contact_sheet(thumbs, out / "contact.png") if out is not None and len(thumbs) > 1 else None
    return shown, written, sheet


def _fields(sample: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` of a dict sample, a typed (dataclass) sample, or anything else as one value."""
    import dataclasses

    if isinstance(sample, dict):
        return list(sample.items())
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return [(f.name, getattr(sample, f.name)) for f in dataclasses.fields(sample)]
    return [("value", sample)]


def contact_sheet(images: list[tuple[str, Any]], path: Path) -> Path:
    """Thumbnails in a grid (up to 8 per row), each captioned with its sample key."""
    from PIL import Image, ImageDraw

    columns = min(8, len(images))
    rows = -(-len(images) // columns)
    sheet = Image.new("RGB", (columns * THUMB, rows * (THUMB + 14)), "white")
    draw = ImageDraw.Draw(sheet)
    for n, (key, image) in enumerate(images):
        thumb = image.convert("RGB")
        scale = THUMB / max(thumb.size)  # small images are enlarged (nearest pixel), large ones shrunk
        size = (max(1, round(thumb.width * scale)), max(1, round(thumb.height * scale)))
        thumb = thumb.resize(size, Image.NEAREST if scale > 1 else Image.BILINEAR)
        x, y = (n % columns) * THUMB, (n // columns) * (THUMB + 14)
        sheet.paste(thumb, (x + (THUMB - thumb.width) // 2, y + (THUMB - thumb.height) // 2))
        draw.text((x + 2, y + THUMB), key[:20], fill="black")
    sheet.save(path)
    return path


def format_preview(
    source_name: str, shown: list[dict[str, Any]], written: list[Path], sheet: Path | None = None
) -> str:
    """The text answer: each sample's fields, then the images written (counted without their contact sheet)."""
    lines = []
    for sample in shown:
        lines.append(f"sample {sample['index']:,} (key {sample['key']!r}) of {source_name}:")
        width = max(len(name) for name, _, _ in sample["fields"])
        for name, kind, summary in sample["fields"]:
            lines.append(f"  {name:<{width}}  {kind:<10} {summary}")
    if written:
        listed = ", ".join(str(p) for p in written[:4]) + (", ..." if len(written) > 4 else "")
        images = f"{len(written)} image{'s' if len(written) != 1 else ''}"
        lines.append(f"wrote {images} ({listed})" + (f" and their contact sheet {sheet}" if sheet else ""))
    return "\n".join(lines)
