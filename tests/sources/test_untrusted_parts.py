"""Code from data (issue 25, item 8): a part that unpickles when decoded is never decoded by default,
whatever compression wrapper or extra extensions its name carries.

Each payload's ``__reduce__`` creates a marker directory: the test checks the file system, not a
return value, so a decoder that ran the code and then failed would still be caught.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import pickle

import pytest
import torch

import datareel
from datareel.sources.decode import PartDecoder, decoded_as

PICKLES = ("pickle", "pkl", "pyd")
WRAPPERS = {"": lambda b: b, "gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}
OTHER_WRAPPERS = ("zst", "lz4", "zstd", "br")  # no codec in the standard library: bytes are only named so


class Payload:
    """Unpickling it creates ``marker`` (a directory): the proof that code from the dataset ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def pickled(marker) -> bytes:
    return pickle.dumps(Payload(str(marker)))


def torch_saved(value) -> bytes:
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


def names(extension: str, wrapper: str) -> list[str]:
    tail = extension + (f".{wrapper}" if wrapper else "")
    return [tail, f"data.{tail}", f"a.b.{tail}"]  # the part alone, and behind other extensions


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
@pytest.mark.parametrize("extension", PICKLES)
def test_a_pickle_part_is_never_unpickled_by_default_whatever_its_wrapper(tmp_path, extension, wrapper, caplog):
    decoder = PartDecoder()
    for part in names(extension, wrapper):
        marker = tmp_path / f"ran-{part}"
        data = WRAPPERS[wrapper](pickled(marker))
        with caplog.at_level("WARNING", logger="datareel"):
            value = decoder(part, data, "shard x key 'k'")
        assert value == data  # the part as stored
        assert not marker.exists(), f"{part}: the payload ran"
    if wrapper in ("", "gz"):  # parts the decoder would unpickle: the warning names the opt-in
        assert "decode='trusted'" in caplog.text


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_a_pth_part_holding_an_object_is_refused_naming_the_opt_in(tmp_path, wrapper):
    decoder = PartDecoder()
    for part in names("pth", wrapper):
        marker = tmp_path / f"ran-{part}"
        data = WRAPPERS[wrapper](torch_saved(Payload(str(marker))))
        if wrapper in ("", "gz"):
            with pytest.raises(datareel.DatasetError, match=rf"cannot decode part '{part}'.*decode='trusted'"):
                decoder(part, data, "shard x")
        else:  # no handler unpacks xz / bz2: the part stays bytes
            assert decoder(part, data, "shard x") == data
        assert not marker.exists(), f"{part}: the payload ran"


@pytest.mark.parametrize("part", ["pth", "pth.gz", "x.pth.gz"])
def test_a_pth_part_of_tensors_still_loads_compressed_or_not(part):
    data = torch_saved({"w": torch.arange(3)})
    if part.endswith(".gz"):
        data = gzip.compress(data)
    assert PartDecoder()(part, data)["w"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("wrapper", OTHER_WRAPPERS)
@pytest.mark.parametrize("extension", PICKLES + ("pth",))
def test_other_compression_names_stay_bytes_even_when_trusted(tmp_path, extension, wrapper):
    for trusted in (False, True):
        for part in names(extension, wrapper):
            marker = tmp_path / f"ran-{part}-{trusted}"
            data = pickled(marker)  # whatever the name says, no handler unpacks it
            assert PartDecoder(trusted=trusted)(part, data) == data
            assert not marker.exists()


@pytest.mark.parametrize("part", ["pickle.gz", "x.pyd.gz", "pkl.gz"])
def test_trusted_unpickles_a_compressed_pickle(tmp_path, part):
    """The opt-in named in the warning is real: with decode='trusted' the payload runs."""
    marker = tmp_path / "ran"
    PartDecoder(trusted=True)(part, gzip.compress(pickled(marker)))
    assert marker.exists()


def test_decoded_as_names_the_extension_after_one_gzip_level():
    assert decoded_as("pickle") == ("pickle", False)
    assert decoded_as("data.pickle.gz") == ("pickle", True)
    assert decoded_as("pickle.gz.gz") == ("gz", True)  # webdataset unpacks one level, then dispatches
    assert decoded_as("pickle.xz") == ("xz", False)
    assert decoded_as("gz") == ("", True)


def test_safe_parts_behind_gzip_still_decode():
    decoder = PartDecoder(image_decode="rgb8")
    assert decoder("json.gz", gzip.compress(b'{"a": 1}')) == {"a": 1}
    assert decoder("x.txt.gz", gzip.compress(b"hi")) == "hi"
    assert decoder("cls.gz", gzip.compress(b"7")) == 7


@pytest.mark.workers
def test_through_a_prepared_dataset_no_wrapped_pickle_runs(tmp_path):
    """End to end: crude and typed reads of a shard holding every wrapped pickle-like part."""
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    markers = tmp_path / "markers"
    markers.mkdir()
    parts = {"txt": b"hi"}
    for extension in PICKLES:
        for wrapper, pack in WRAPPERS.items():
            name = f"{extension}.{wrapper}" if wrapper else extension
            parts[f"data.{name}"] = pack(pickled(markers / name))
    parts["pth.gz"] = gzip.compress(torch_saved(Payload(str(markers / "pth.gz"))))
    write_shard(tmp_path / "d" / "s.tar", [("k0", {k: v for k, v in parts.items() if k != "pth.gz"})])
    write_shard(tmp_path / "d" / "t.tar", [("k1", {"txt": b"x", "pth.gz": parts["pth.gz"]})])
    prepare_webdataset(tmp_path / "d", progress=False)
    ds = datareel.open_dataset(tmp_path / "d")
    sample = ds.read(0)
    assert all(sample[name] == data for name, data in parts.items() if name not in ("txt", "pth.gz"))
    with pytest.raises(datareel.DatasetError, match="decode='trusted'"):
        ds.read(1)
    assert list(markers.iterdir()) == []
