"""Audio/video media metadata (``prepare`` with a media filter): datareel's ``MediaFilterConfig.extract_metadata``
(PyAV, :mod:`datareel.energon.media.av_probe`) beside megatron.energon's on the same bytes, for small files
encoded here (audio only, video with and without audio, durations from the header and from the packets), the
rows both prepares store, what happens without PyAV, and the deliberate differences: a demuxer that would read
other files (an ``ffconcat`` script named ``.flac``) measures nothing, and a glob filter measures what it matches
(Energon 7.4.1 fails an assertion there)."""

from __future__ import annotations

import io
import logging
import sqlite3
import sys
import tarfile
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from datareel.energon.flavors.webdataset.prepare import prepare_dataset
from datareel.energon.media import av_probe
from datareel.energon.media.extractor import MediaFilterConfig
from datareel.energon.media.filesystem_prepare import prepare_filesystem_dataset
from datareel.energon.media.metadata import AVMetadata, serialize_media_metadata


def _encode(fmt: str, video: tuple | None = None, audio: tuple | None = None) -> bytes:
    """A small file of container ``fmt``: ``video`` ``(codec, width, height, fps, frames)`` (frames of one grey
    level each), ``audio`` ``(codec, rate, layout, seconds)`` (a 440 Hz tone)."""
    out_bytes = io.BytesIO()
    with av.open(out_bytes, "w", format=fmt) as out:
        streams = []  # every stream is added before the first packet is written
        if video is not None:
            codec, width, height, fps, _ = video
            streams.append(out.add_stream(codec, rate=fps))
            streams[-1].width, streams[-1].height, streams[-1].pix_fmt = width, height, "yuv420p"
        if audio is not None:
            streams.append(out.add_stream(audio[0], rate=audio[1]))
            streams[-1].layout = audio[2]
        if video is not None:
            width, height, frames = video[1], video[2], video[4]
            for i in range(frames):
                frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), i * 40 % 256, np.uint8), format="rgb24")
                frame.pts = i
                out.mux(streams[0].encode(frame))
            out.mux(streams[0].encode())
        if audio is not None:
            _codec, rate, layout, seconds = audio
            channels = len(streams[-1].layout.channels)
            tone = (np.sin(2 * np.pi * 440 * np.arange(int(rate * seconds)) / rate) * 8000).astype(np.int16)
            for start in range(0, tone.size, 1024):
                chunk = np.repeat(tone[start : start + 1024], channels)[None, :]  # (1, samples × channels) packed
                frame = av.AudioFrame.from_ndarray(chunk, format="s16", layout=layout)
                frame.sample_rate, frame.pts = rate, start
                out.mux(streams[-1].encode(frame))
            out.mux(streams[-1].encode())
    return out_bytes.getvalue()


# name -> (container, video, audio); mkv and webm keep no per-stream duration (measured from the packets)
MEDIA = {
    "tone.flac": ("flac", None, ("flac", 16000, "mono", 0.5)),
    "tone.wav": ("wav", None, ("pcm_s16le", 8000, "stereo", 0.3)),
    "tone.mp3": ("mp3", None, ("libmp3lame", 22050, "mono", 0.4)),
    "tone.ogg": ("ogg", None, ("libopus", 48000, "stereo", 0.4)),
    "clip.mp4": ("mp4", ("mpeg4", 32, 24, 10, 6), ("aac", 16000, "mono", 0.6)),
    "clip.mkv": ("matroska", ("mpeg4", 16, 16, 12, 5), None),
    "clip.webm": ("webm", ("libvpx", 16, 16, 8, 4), ("libopus", 48000, "mono", 0.5)),
    "clip.avi": ("avi", ("mpeg4", 16, 8, 5, 3), ("pcm_s16le", 8000, "mono", 0.2)),
}


@pytest.fixture(scope="module")
def media() -> dict[str, bytes]:
    return {name: _encode(*spec) for name, spec in MEDIA.items()}


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (6, 4), (1, 2, 3)).save(out, format="PNG")
    return out.getvalue()


def _both(data: bytes, filename: str, **strategy: object) -> tuple:
    """``(datareel's, megatron.energon's)`` stored form (type, JSON) of ``data``, ``None`` where not measured."""
    from megatron.energon.media.extractor import MediaFilterConfig as EnergonFilter
    from megatron.energon.media.metadata import serialize_media_metadata as energon_serialize

    options = {"glob": None, "header": False, "extension": True, **strategy}
    ours = MediaFilterConfig.parse(**options).extract_metadata(data, filename=filename)
    theirs = EnergonFilter.parse(**options).extract_metadata(data, filename=filename)
    stored_ours = None if ours is None else tuple(getattr(v, "value", v) for v in serialize_media_metadata(ours))
    stored_theirs = None if theirs is None else tuple(getattr(v, "value", v) for v in energon_serialize(theirs))
    return stored_ours, stored_theirs


@pytest.mark.parametrize("name", MEDIA)
def test_av_metadata_is_energons(media: dict[str, bytes], name: str) -> None:
    ours, theirs = _both(media[name], name)
    assert ours == theirs
    metadata = MediaFilterConfig.parse(None, False, True).extract_metadata(media[name], filename=name)
    assert isinstance(metadata, AVMetadata)
    video, audio = MEDIA[name][1:]
    if video is not None:
        assert (metadata.video_width, metadata.video_height, metadata.video_fps) == (video[1], video[2], video[3])
        assert metadata.video_num_frames == video[4]
    if audio is not None:
        assert metadata.audio_sample_rate == audio[1] and metadata.audio_duration == pytest.approx(audio[3], abs=0.01)


@pytest.mark.parametrize("name", ["tone.flac", "clip.mp4", "clip.webm"])
def test_av_metadata_by_header_is_energons_and_by_glob_the_same(media: dict[str, bytes], name: str) -> None:
    ours, theirs = _both(media[name], "sample.bin", header=True, extension=False)
    assert ours == theirs and ours is not None and ours[0] == "av"
    # megatron.energon 7.4.1 fails an assertion on every file a glob filter matches; datareel measures it
    glob = MediaFilterConfig.parse("*.flac,*.mp4,*.webm", False, False)
    assert serialize_media_metadata(glob.extract_metadata(media[name], filename=name)) == ours
    assert glob.extract_metadata(media[name], filename="other.wav") is None


def test_unreadable_av_bytes_have_no_metadata_on_either_side(media: dict[str, bytes]) -> None:
    assert _both(b"not a video at all" * 10, "broken.mp4") == (None, None)
    assert _both(b"", "empty.flac") == (None, None)
    truncated = media["clip.mp4"][:200]
    ours, theirs = _both(truncated, "cut.mp4")
    assert ours == theirs


def test_a_file_naming_other_files_is_not_followed(media: dict[str, bytes], tmp_path: Path, monkeypatch) -> None:
    """FFmpeg's concat demuxer reads the files a script names; datareel opens dataset bytes with no protocol
    allowed, so the script has no metadata, where Energon measures the file it names (here, next to it)."""
    from megatron.energon.media.extractor import MediaFilterConfig as EnergonFilter

    (tmp_path / "elsewhere.flac").write_bytes(media["tone.flac"])
    monkeypatch.chdir(tmp_path)
    script = b"ffconcat version 1.0\nfile elsewhere.flac\n"
    assert MediaFilterConfig.parse(None, False, True).extract_metadata(script, filename="script.flac") is None
    followed = EnergonFilter.parse(None, False, True).extract_metadata(script, filename="script.flac")
    assert followed is not None and followed.audio_sample_rate == 16000  # megatron.energon 7.4.1 follows it


@pytest.fixture
def without_pyav(monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # as if the extra were not installed
    av_probe._pyav.cache_clear()
    yield
    av_probe._pyav.cache_clear()


def test_without_pyav_av_metadata_is_left_out_and_the_fix_said_once(media, without_pyav, caplog) -> None:
    config = MediaFilterConfig.parse(None, False, True)
    with caplog.at_level(logging.WARNING, logger="datareel"):
        assert config.extract_metadata(media["tone.flac"], filename="a.flac") is None
        assert config.extract_metadata(media["clip.mp4"], filename="b.mp4") is None
    said = [r.getMessage() for r in caplog.records if "PyAV" in r.getMessage()]
    assert len(said) == 1 and "pip install 'datareel[av]'" in said[0], said
    assert config.extract_metadata(_png(), filename="c.png") is not None  # images need no PyAV


def _rows(sqlite_path: Path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(sqlite_path) as db:
        rows = db.execute("SELECT entry_key, metadata_type, metadata_json FROM media_metadata").fetchall()
    return {key: (kind, text) for key, kind, text in rows}


def test_filesystem_prepare_stores_what_energon_measures(media: dict[str, bytes], tmp_path: Path) -> None:
    files = {"audio/tone.flac": media["tone.flac"], "clip.mp4": media["clip.mp4"], "still.png": _png()}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    written = prepare_filesystem_dataset(tmp_path, MediaFilterConfig.parse(None, False, True))
    assert written == 3
    want = {name: _both(data, Path(name).name)[1] for name, data in files.items()}
    assert _rows(tmp_path / ".nv-meta" / "index.sqlite") == want


@pytest.mark.workers  # real Energon's prepare starts its indexing processes
def test_webdataset_prepare_stores_energons_media_rows(media: dict[str, bytes], tmp_path: Path) -> None:
    from megatron.energon.flavors import BaseWebdatasetFactory as EnergonFactory
    from megatron.energon.media.extractor import MediaFilterConfig as EnergonFilter

    parts = {"a.flac": media["tone.flac"], "b.mp4": media["clip.mp4"], "c.png": _png(), "d.txt": b"text"}
    for side in ("ours", "theirs"):
        (tmp_path / side / "parts").mkdir(parents=True)
        with tarfile.open(tmp_path / side / "parts" / "data-0.tar", "w") as tar:
            for key, (part, data) in enumerate(sorted(parts.items())):
                info = tarfile.TarInfo(f"{key:03d}.{part.rpartition('.')[2]}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    common = dict(split_parts_ratio=[("train", 1.0)], workers=1)
    ours_filter = MediaFilterConfig.parse(None, False, True)
    prepare_dataset(tmp_path / "ours", ["parts/data-0.tar"], media_filter=ours_filter, **common)
    EnergonFactory.prepare_dataset(
        tmp_path / "theirs", ["parts/data-0.tar"], media_filter=EnergonFilter.parse(None, False, True), **common
    )
    ours = _rows(tmp_path / "ours" / ".nv-meta" / "index.sqlite")
    assert ours == _rows(tmp_path / "theirs" / ".nv-meta" / "index.sqlite")
    assert sorted(kind for kind, _ in ours.values()) == ["av", "av", "image"]
