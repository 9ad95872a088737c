"""``datareel plot DATASET --global-batch-size G --steps S --out FILE.png``: the stream, drawn.

One figure: each source's share of the global batches against its target (cumulative, and per window of
batches), each source's epoch boundaries, and with packing the fill of the packs. A single dataset has no
shares to draw (its share of every batch is 1: shares need a blend): its figure shows the passes over it
(epochs read, with each new epoch marked) and, with packing, the samples each global batch packs and the
fill of the packs. The numbers come from the reel itself (the loader's plan, laid out as one rank reading
whole global batches): no sample is read, except lengths for packing. matplotlib is an optional extra
(from a clone: ``.venv/bin/pip install -c constraints.txt -e '.[plot]'``; from an installed package:
``pip install 'datareel[plot]'``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatareelError
from ..loader import Loader
from ..plan.nodes import consumed
from ..sources.lengths import lengths_of

INSTALL = (
    "datareel plot needs matplotlib, the [plot] extra: from a clone, .venv/bin/pip install -c constraints.txt "
    "-e '.[plot]'; from an installed package, pip install 'datareel[plot]'"
)
EPOCH_LINES = 30
"""Epoch boundaries drawn per source at most (a source cycling faster is only counted in the legend)."""
LONG_RUN = 10**15
"""Positions over which the target share of each source is taken (exact integer counts)."""


def stream_shares(loader: Loader, steps: int, progress: bool = True) -> dict[str, Any]:
    """Per global batch ``b < steps`` (fewer if a finite reel ends): samples of each source
    (``counts`` int64[b, n]), each source's target share (float[n]), the global batches where a
    source starts a new epoch, and with packing the fill of each batch's packs (float[b])."""
    from tqdm import tqdm

    n = len(loader.sources)
    if loader.layout.accumulation_steps != 1 or loader.layout.world_size != 1:
        raise DatareelError("internal: stream_shares reads one rank with micro_batch_size = global_batch_size")
    packing = loader.packing
    counts = np.zeros((steps, n), dtype=np.int64)  # (S, n)
    fill = np.zeros(steps) if packing is not None else None
    stream = loader.reel.stream(loader.reel_cursor, loader.layout, 0)
    done = 0
    for b in tqdm(range(steps), unit="batch", desc="walking the reel", disable=not progress, leave=False):
        step = next(stream, None)
        if step is None:
            break
        d = step.descriptor
        done = b + 1
        if d is None:
            continue
        counts[b] = np.bincount(d.source_ids, minlength=n)
        if fill is not None and packing is not None:
            lengths = np.empty(len(d.indices), dtype=np.int64)
            for s in np.unique(d.source_ids).tolist():
                mask = d.source_ids == s
                lengths[mask] = lengths_of(loader.sources[s], d.indices[mask], packing.length)
            fill[b] = np.minimum(lengths, packing.max_length).sum() / (len(d.units) * packing.max_length)
    counts = counts[:done]
    long_run = consumed(loader.plan.root, LONG_RUN)
    target = np.array([long_run.get(s, 0) / LONG_RUN for s in range(n)])
    sizes = np.array([len(source) for source in loader.sources], dtype=np.int64)  # (n,)
    epochs = np.cumsum(counts, axis=0) // sizes  # (b, n): completed passes after each batch
    starts = [np.flatnonzero(np.diff(epochs[:, s], prepend=0) > 0).tolist() for s in range(n)]  # by source
    return {
        "sources": [source.name for source in loader.sources],
        "counts": counts,
        "target": target,
        "epoch_starts": starts,  # per source: global batches after which it has begun a new pass
        "fill": None if fill is None else fill[:done],
        "sizes": sizes,  # (n,): samples of each source (one epoch)
    }


def draw(shares: dict[str, Any], out: Path, title: str) -> Path:
    """The figure of :func:`stream_shares`'s numbers, as a PNG at ``out``."""
    fig = figure(shares, title)
    fig.savefig(out, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out


def figure(shares: dict[str, Any], title: str) -> Any:
    """The figure :func:`draw` saves (a matplotlib ``Figure``, laid out, every text inside it)."""
    try:
        import matplotlib
    except ImportError:
        raise DatareelError(INSTALL) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(shares["sources"]) == 1:
        return _figure_one(plt, shares, title)
    counts, target = shares["counts"], shares["target"]
    batches = np.arange(1, len(counts) + 1)
    cumulative = np.cumsum(counts, axis=0) / np.maximum(np.cumsum(counts.sum(axis=1)), 1)[:, None]  # (b, n)
    window = max(1, len(counts) // 50)
    kernel = np.ones(window)
    per_window = np.stack([np.convolve(c, kernel, "valid") for c in counts.T], axis=1)  # (b - w + 1, n)
    per_window = per_window / np.maximum(per_window.sum(axis=1, keepdims=True), 1)
    rows = 3 if shares["fill"] is not None else 2
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3.2 * rows), sharex=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for s, name in enumerate(shares["sources"]):
        color = colors[s % len(colors)]
        starts = shares["epoch_starts"][s]
        axes[0, 0].plot(batches, cumulative[:, s], color=color, label=f"{name} ({len(starts)} new epochs)")
        axes[0, 0].axhline(target[s], color=color, linestyle="--", linewidth=0.8)
        for b in starts if len(starts) <= EPOCH_LINES else []:  # more would hide the curves: the legend counts them
            axes[0, 0].axvline(b + 1, color=color, linestyle=":", linewidth=0.8)
        axes[1, 0].plot(batches[window - 1 :], per_window[:, s], color=color)
        axes[1, 0].axhline(target[s], color=color, linestyle="--", linewidth=0.8)
    axes[0, 0].set_ylabel("share, cumulative")
    axes[0, 0].legend(loc="upper right", fontsize="small", ncol=min(4, len(shares["sources"])))
    axes[1, 0].set_ylabel("share per batch" if window == 1 else f"share per {window} batches")
    if shares["fill"] is not None:
        axes[2, 0].plot(batches, shares["fill"], color="black")
        axes[2, 0].set_ylabel("pack fill")
        axes[2, 0].set_ylim(0, 1.05)
    axes[-1, 0].set_xlabel("global batch")
    return _titled(fig, axes[0, 0], title, "share of each source (dashed: its target; dotted: it begins a new epoch)")


def _titled(fig: Any, ax: Any, title: str, subtitle: str) -> Any:
    """``title`` and ``subtitle`` over ``ax``, each wrapped at words until the whole title lies inside the
    figure, and the figure laid out. -> ``fig``"""
    text = ax.set_title("")
    width = max(len(title), len(subtitle))  # characters per line, narrowed until it fits
    while True:
        lines = [*textwrap.wrap(title, width), *textwrap.wrap(subtitle, width)]
        text.set_text("\n".join(lines))
        fig.tight_layout()
        box = text.get_window_extent(fig.canvas.get_renderer())
        if (box.x0 >= fig.bbox.x0 and box.x1 <= fig.bbox.x1) or width <= 20:
            return fig
        width = max(20, int(width * min(0.95, fig.bbox.width / box.width)))


def panels(shares: dict[str, Any]) -> list[str]:
    """The figure's panels, top to bottom: a blend's shares (cumulative, per window), or one source's epochs;
    with packing, one source's samples per global batch, and the pack fill."""
    packed = shares["fill"] is not None
    if len(shares["sources"]) == 1:
        return ["epochs read", *(["samples per global batch", "pack fill"] if packed else [])]
    return ["share, cumulative", "share per window", *(["pack fill"] if packed else [])]


def epochs_read(shares: dict[str, Any]) -> np.ndarray:
    """Passes over each source after each global batch (float[b, n]): 2.5 = two epochs and half of the third."""
    return np.cumsum(shares["counts"], axis=0) / shares["sizes"]  # (b, n)


def summary(shares: dict[str, Any]) -> list[str]:
    """The lines the command prints: each source's share against its target (a blend), or the passes over
    the one source (and that shares need a blend); with packing, the fill of the packs."""
    counts = shares["counts"]
    steps, total = counts.shape[0], int(counts.sum())
    if len(shares["sources"]) == 1:
        (name,), size = shares["sources"], int(shares["sizes"][0])
        lines = [
            f"{name}: the only source, so its share of every global batch is 1 (shares need a blend); "
            f"{total:,} samples in {steps:,} global batches = {total / size:.2f} epochs of its {size:,} samples "
            f"({len(shares['epoch_starts'][0])} new epochs begun)"
        ]
    else:
        totals = counts.sum(axis=0) / max(total, 1)
        lines = [
            f"{name}: {got:.4f} of {steps:,} global batches (target {want:.4f})"
            for name, got, want in zip(shares["sources"], totals.tolist(), shares["target"].tolist())
        ]
    fill = shares["fill"]
    if fill is not None and len(fill):
        lines.append(f"pack fill: mean {float(fill.mean()):.4f}, lowest {float(fill.min()):.4f} (per global batch)")
    return lines


def _figure_one(plt: Any, shares: dict[str, Any], title: str) -> Any:
    """One source: the epochs read (each new epoch dotted) and, with packing, samples per batch and pack fill."""
    names = panels(shares)
    counts = shares["counts"][:, 0]  # (b,)
    batches = np.arange(1, len(counts) + 1)
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 3.2 * len(names)), sharex=True, squeeze=False)
    (name,), size, starts = shares["sources"], int(shares["sizes"][0]), shares["epoch_starts"][0]
    top = axes[0, 0]
    top.plot(batches, epochs_read(shares)[:, 0], color="C0", label=f"{name} ({len(starts)} new epochs)")
    for b in starts if len(starts) <= EPOCH_LINES else []:  # more would hide the curve: the legend counts them
        top.axvline(b + 1, color="C0", linestyle=":", linewidth=0.8)
    top.set_ylabel(f"epochs read (of {size:,})")
    top.legend(loc="upper left", fontsize="small")
    if shares["fill"] is not None:
        axes[1, 0].plot(batches, counts, color="C1")
        axes[1, 0].set_ylabel("samples per global batch")
        axes[2, 0].plot(batches, shares["fill"], color="black")
        axes[2, 0].set_ylabel("pack fill")
        axes[2, 0].set_ylim(0, 1.05)
    axes[-1, 0].set_xlabel("global batch")
    subtitle = (
        "one source: its share of every global batch is 1 (shares need a blend); passes over it (dotted: a new "
        "epoch begins)"
    )
    return _titled(fig, top, title, subtitle)
