"""``datareel plot``: the shares it draws are the reel's (counted from the batches a real loader yields),
epoch boundaries and pack fill too; the PNG has the figure's size and is not blank; without matplotlib
the command says how to get it (the rest of the suite never needs it)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import datareel
from datareel import Packing
from datareel.cli import main
from datareel.cli.plot import draw, stream_shares
from datareel.errors import DatareelError


def mixed():
    a = datareel.from_sequence([{"n": i} for i in range(23)], name="a")
    b = datareel.from_sequence([{"n": i} for i in range(9)], name="b")
    c = datareel.from_sequence([{"n": i} for i in range(5)], name="c")
    return datareel.mix([(a, 5), (b, 3), (c, 2)])


def lengths(source, indices):
    return (np.asarray(indices) * 7 + len(source.name)) % 9 + 1


class Packs:
    def pack_selected_samples(self, samples):
        return samples

    def batch(self, packs):
        return {"packs": packs}  # a dict: the loader adds __packs__ (each pack's reel positions)


def test_the_shares_epochs_and_fill_are_the_reels():
    G, S = 10, 40
    shares = stream_shares(datareel.Loader(mixed(), global_batch_size=G, micro_batch_size=G, seed=4), S, False)
    it = iter(datareel.Loader(mixed(), global_batch_size=G, micro_batch_size=G, seed=4))
    names = shares["sources"]
    expected = np.array([[list(next(it)["__source__"]).count(n) for n in names] for _ in range(S)])
    np.testing.assert_array_equal(shares["counts"], expected)
    np.testing.assert_allclose(shares["target"], [0.5, 0.3, 0.2])
    cumulative = np.cumsum(expected, axis=0)
    for s, name in enumerate(names):  # a new pass of source s begins after each batch where it passes k·size
        size = {"a": 23, "b": 9, "c": 5}[name]
        crossed = [b for b in range(S) if cumulative[b, s] // size > (cumulative[b - 1, s] if b else 0) // size]
        assert shares["epoch_starts"][s] == crossed and crossed

    packed = dict(global_batch_size=4, micro_batch_size=4, seed=4, task_encoder=Packs())
    packing = Packing(max_length=12, length=lengths, window=6)
    loader = datareel.Loader(mixed(), packing=packing, **packed)
    shares = stream_shares(loader, 15, False)
    it = iter(datareel.Loader(mixed(), packing=packing, **packed))
    for b in range(15):
        packs = next(it)["__packs__"]
        leaf, index = loader.plan.resolve(np.concatenate([np.asarray(p) for p in packs]))
        total = sum(int(lengths(loader.sources[s], [i])[0]) for s, i in zip(leaf.tolist(), index.tolist()))
        assert shares["fill"][b] == pytest.approx(total / (len(packs) * 12))
    assert 0 < shares["fill"].min() <= shares["fill"].max() <= 1


def test_the_png_is_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    loader = datareel.Loader(mixed(), global_batch_size=10, micro_batch_size=10, seed=4)
    out = draw(stream_shares(loader, 60, False), tmp_path / "shares.png", "mixed")
    image = np.asarray(Image.open(out).convert("L"))
    assert image.shape == (640, 1000)  # two panels: 10 × 6.4 inches at 100 dpi
    assert (image < 128).mean() > 0.01 and image.std() > 10  # lines and text, not a blank canvas
    packing = Packing(max_length=12, length=lengths, window=6)
    loader = datareel.Loader(mixed(), global_batch_size=4, micro_batch_size=4, seed=4, packing=packing,
                             task_encoder=Packs())  # fmt: skip
    out = draw(stream_shares(loader, 20, False), tmp_path / "packed.png", "packed")
    assert np.asarray(Image.open(out)).shape[:2] == (960, 1000)  # a third panel: the pack fill


def test_the_command_and_a_missing_matplotlib(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(30)))
    assert main(["prepare", str(path)]) == 0
    out = tmp_path / "plot.png"
    assert main(["plot", str(path), "--global-batch-size", "6", "--steps", "12", "--out", str(out), "--quiet"]) == 0
    assert out.stat().st_size > 1000 and "docs.jsonl: the only source" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the extra were not installed
    loader = datareel.Loader(mixed(), global_batch_size=10, micro_batch_size=10, seed=4)
    with pytest.raises(DatareelError, match=r"\.venv/bin/pip install -c constraints\.txt -e '\.\[plot\]'"):
        draw(stream_shares(loader, 3, False), Path(tmp_path / "x.png"), "x")


def test_two_sources_of_one_name_keep_their_own_epochs():
    small = datareel.from_sequence(list(range(7)), name="a")
    large = datareel.from_sequence(list(range(50)), name="a")
    loader = datareel.Loader(datareel.mix([(small, 1), (large, 1)]), global_batch_size=4, micro_batch_size=4, seed=1)
    shares = stream_shares(loader, 20, False)  # 40 samples each: 5 new epochs of the small one, none of the large
    assert len(shares["epoch_starts"][0]) == 5 and shares["epoch_starts"][1] == []


@pytest.mark.parametrize("name", ["docs.jsonl", "a-dataset-whose-name-is-long/" * 6 + "train"])
@pytest.mark.parametrize("kind", ["one source", "blend", "blend, packed"])
def test_every_text_of_the_figure_lies_inside_it(kind, name, tmp_path):
    """The subtitle of `plot.png` ran past the figure's right edge: each title (wrapped at words) and every
    other text lies inside the figure, for one source and a blend, with a short name and a long one."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from datareel.cli.plot import figure

    if kind == "one source":
        loader = datareel.Loader(datareel.from_sequence(list(range(30))), global_batch_size=6, micro_batch_size=6)
    else:
        packed = dict(packing=Packing(max_length=12, length=lengths, window=6), task_encoder=Packs())
        loader = datareel.Loader(mixed(), global_batch_size=4, micro_batch_size=4, seed=4,
                                 **(packed if kind.endswith("packed") else {}))  # fmt: skip
    fig = figure(stream_shares(loader, 12, False), name)
    try:
        fig.canvas.draw()  # as savefig draws it
        renderer = fig.canvas.get_renderer()
        title = fig.axes[0].title
        assert name[:20] in title.get_text() and "\n" in title.get_text()
        box = title.get_window_extent(renderer)  # the title and its subtitle, in pixels
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, (title.get_text(), box)
        drawn = fig.get_tightbbox(renderer)  # everything drawn (ticks, labels, legends), in inches
        inside = fig.bbox_inches
        assert inside.x0 <= drawn.x0 and drawn.x1 <= inside.x1 and inside.y0 <= drawn.y0 and drawn.y1 <= inside.y1
    finally:
        plt.close(fig)
