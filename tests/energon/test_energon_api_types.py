"""The default task encoder through the facade, beside megatron.energon 7.4.1: typed samples and batches.

Energon's ``get_train_dataset`` / ``get_val_dataset`` default to ``DefaultTaskEncoder()``: a
``CaptioningSample`` dataset yields ``CaptioningSample`` batches (``image`` stacked, ``caption`` and the
``__key__`` / ``__subflavors__`` fields listed, ``__restore_key__`` a tuple), and with
``batch_size=None`` the samples themselves.  Each case builds the loader with both libraries on one
prepared dataset and compares the type's name, its fields, each field's type and shape, and ``len``.
Also: ``restore_sample`` makes a handed-out batch again, and ``current_batch_index`` /
``current_sample_index`` count as Energon's do on a rank without worker processes.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch
from PIL import Image

from datareel import energon as den
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import OptionError
from wds_helpers import write_shard

me = pytest.importorskip("megatron.energon")
SAMPLES = 23


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    """23 CaptioningSamples (an 8×6 png and a txt caption) in 2 shards."""
    root = tmp_path_factory.mktemp("captions")
    rng = np.random.default_rng(3)
    for s, (first, stop) in enumerate(((0, 13), (13, SAMPLES))):
        samples = []
        for i in range(first, stop):
            png = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)).save(png, format="png")
            samples.append((f"c{i:03d}", {"png": png.getvalue(), "txt": f"caption {i}".encode()}))
        write_shard(root / f"part-{s}.tar", samples)
    fields = {"image": "png", "caption": "txt"}
    prepare_webdataset(root, sample_type="CaptioningSample", field_map=fields, progress=False)
    return root


def _config(lib, rank=0, world_size=1):
    return lib.WorkerConfig(rank=rank, world_size=world_size, num_workers=0)


def _train(lib, root, batch_size, **kw):
    ds = lib.get_train_dataset(
        str(root),
        worker_config=_config(lib),
        batch_size=batch_size,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        **kw,
    )
    return _loader(lib, ds)


def _loader(lib, ds):
    return lib.get_loader(ds, watchdog_timeout_seconds=None) if lib is me else lib.get_loader(ds)


def _shape(value):
    """What the comparison looks at: the type's name, a tensor's shape, a list's element types."""
    if hasattr(value, "shape"):
        return type(value).__name__, tuple(value.shape)
    if isinstance(value, list):
        return "list", len(value), sorted({type(v).__name__ for v in value})
    return type(value).__name__


def _describe(item):
    fields = {f.name: _shape(getattr(item, f.name)) for f in dataclasses.fields(item)}
    fields.pop("__sources__")  # Energon's SourceInfo records (another module's)
    return type(item).__name__, fields


@pytest.mark.parametrize("batch_size", [4, None])
def test_default_encoder_yields_energons_typed_batches(captions, batch_size):
    ours, theirs = _train(den, captions, batch_size), _train(me, captions, batch_size)
    a, b = next(iter(ours)), next(iter(theirs))
    assert _describe(a) == _describe(b)
    assert isinstance(a, den.CaptioningSample) and isinstance(a.__restore_key__, tuple)
    assert len(ours) == len(theirs)


def test_default_encoder_in_val_order_is_energons(captions):
    def val(lib):
        ds = lib.get_val_dataset(str(captions), split_part="train", worker_config=_config(lib), batch_size=5)
        return _loader(lib, ds)

    ours, theirs = list(val(den)), list(val(me))
    assert [_describe(x) for x in ours] == [_describe(x) for x in theirs]
    assert [x.__key__ for x in ours] == [x.__key__ for x in theirs]


class _Indexed(den.DefaultTaskEncoder):
    def encode_sample(self, sample):
        return den.TextSample.derive_from(
            sample, text=f"{sample.caption}|{self.current_batch_index}|{self.current_sample_index}"
        )

    def encode_batch(self, batch):
        return dataclasses.replace(batch, text=[*batch.text, f"batch {self.current_batch_index}"])


def _energon_indexed():
    class Indexed(me.DefaultTaskEncoder):
        def encode_sample(self, sample):
            return me.TextSample.derive_from(
                sample, text=f"{sample.caption}|{self.current_batch_index}|{self.current_sample_index}"
            )

        def encode_batch(self, batch):
            return dataclasses.replace(batch, text=[*batch.text, f"batch {self.current_batch_index}"])

    return Indexed()


@pytest.mark.parametrize("rank", [0, 1])
def test_current_batch_and_sample_index_count_as_energons(captions, rank):
    def indices(lib, encoder):
        ds = lib.get_train_dataset(
            str(captions),
            worker_config=_config(lib, rank, 2),
            batch_size=3,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=encoder,
        )
        out = []
        for _, batch in zip(range(5), _loader(lib, ds)):
            out.append([t.split("|", 1)[-1] for t in batch.text])
        return out

    assert indices(den, _Indexed()) == indices(me, _energon_indexed())


def test_restore_sample_makes_the_batch_again(captions):
    loader = _train(den, captions, 3, task_encoder=_Indexed())
    assert loader.can_restore_sample()
    batches = [b for _, b in zip(range(9), loader)]  # past the first epoch's end
    for batch in batches:
        again = loader.restore_sample(batch.__restore_key__)
        assert again.__key__ == batch.__key__ and again.text == batch.text
    with pytest.raises(OptionError, match="restore key"):
        loader.restore_sample(("Webdataset", "part-0.tar", 0))


class _Packs(den.DefaultTaskEncoder):
    """Packs of 1, 2 and 3 captions in turn (Energon's select_samples_to_pack / pack_selected_samples)."""

    def encode_sample(self, sample):
        return den.TextSample.derive_from(sample, text=sample.caption)

    def select_samples_to_pack(self, samples):
        groups, at = [], 0
        while at < len(samples):
            size = 1 + len(groups) % 3
            groups.append(samples[at : at + size])
            at += size
        return groups

    def pack_selected_samples(self, samples):
        return den.TextSample(
            __key__=",".join(s.__key__ for s in samples),
            __restore_key__=(),
            text="+".join(s.text for s in samples),
        )


class _Twice(den.DefaultTaskEncoder):
    """A generator encode_sample: two outputs per sample, each with a draw of torch's RNG, seeded per sample."""

    @den.stateless(restore_seeds=True)
    def encode_sample(self, sample):
        for k in range(2):
            yield den.TextSample.derive_from(sample, text=f"{sample.caption}#{k}#{torch.randint(0, 999, ()).item()}")


@pytest.mark.workers  # the facade plans windows in a planning process (one per loader)
@pytest.mark.parametrize("encoder", [_Packs, _Twice])
def test_restore_sample_makes_packed_and_generator_batches_again_on_any_topology(captions, encoder):
    def train(rank, world_size):
        ds = den.get_train_dataset(
            str(captions),
            worker_config=_config(den, rank, world_size),
            batch_size=2,
            global_batch_size=4,
            packing_buffer_size=7 if encoder is _Packs else None,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=encoder(),
        )
        return _loader(den, ds)

    one = train(0, 1)
    assert one.can_restore_sample()
    handed = [b for _, b in zip(range(12), one)]  # past the first epoch's end
    others = [train(rank, 2) for rank in (0, 1)]
    for batch in handed:
        for loader in [one, *others]:
            again = loader.restore_sample(batch.__restore_key__)
            assert (again.__key__, again.text, again.__restore_key__) == (
                batch.__key__,
                batch.text,
                batch.__restore_key__,
            )
    with pytest.raises(OptionError, match="restore_sample"):
        one.restore_sample(("Reel", 0, 2))  # a plain reel's key: this one is planned by windows


def _generator_indexed(lib):
    class Twice(lib.DefaultTaskEncoder):
        """Two outputs per sample, each naming the batch and the sample count it was made at."""

        def encode_sample(self, sample):
            for k in range(2):
                yield lib.TextSample.derive_from(
                    sample, text=f"{sample.caption}#{k}|{self.current_batch_index}|{self.current_sample_index}"
                )

    return Twice()


@pytest.mark.workers  # a generator encode_sample is planned per window in a planning process
@pytest.mark.parametrize("batch_size", [3, 4])
def test_a_generators_current_batch_index_is_the_batch_its_output_goes_into(captions, batch_size):
    """In a generator encode_sample, current_batch_index is the batch each output lands in and
    current_sample_index the input's count (megatron.energon's numbers on one rank); after restore_sample too."""

    def indices(lib):
        ds = lib.get_train_dataset(
            str(captions),
            worker_config=_config(lib),
            batch_size=batch_size,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=_generator_indexed(lib),
        )
        loader = _loader(lib, ds)
        batches = [b for _, b in zip(range(6), loader)]
        out = [[t.split("|", 1)[1] for t in b.text] for b in batches]
        if lib is den:  # made again from its key: the same numbers
            assert [[t.split("|", 1)[1] for t in loader.restore_sample(b.__restore_key__).text] for b in batches] == out
        return out

    ours, theirs = indices(den), indices(me)
    assert ours == theirs
    assert all(entry.split("|")[0] == str(b) for b, batch in enumerate(ours) for entry in batch)
