"""Audio and video metadata for ``prepare``'s media filter, measured with PyAV (the optional extra
``datareel[av]``), the library Energon measures them with, so that the same file gives the same record.

Per file (:func:`av_metadata`), on the first video stream: its duration (the header's, else up to the end of
the last demuxed packet), its frame count (demuxed packets that carry a timestamp), its frame rate (the
stream's average rate, else frames / duration) and the size of its first decoded frame (else the stream's);
on the first audio stream: its sample rate and channels, and its sample count and duration from decoding it
whole.  Durations are in seconds, measured from the stream's start time.

Dataset bytes are untrusted: the container is opened with no protocol allowed, so a demuxer that reads
other files or URLs (an ``ffconcat`` script saved as ``.flac``, a playlist) gets nothing and the file has no
metadata, where Energon would measure the file it names.  Decoder threads are off, so no FFmpeg thread
outlives the measurement into a forked worker.
"""

from __future__ import annotations

import functools
import io
import logging
from fractions import Fraction
from typing import Any

from .metadata import AVMetadata

__all__ = ["av_metadata"]

log = logging.getLogger("datareel")

# A protocol whitelist naming no protocol: the in-memory file is read through PyAV's own I/O, and every
# nested open (another file, a URL) is refused.
_NO_PROTOCOLS = {"protocol_whitelist": "none"}


@functools.cache
def _pyav() -> Any:
    """The ``av`` module, or ``None`` (said once per process) when PyAV is not installed."""
    try:
        import av
    except ImportError:
        log.warning(
            "audio/video media metadata is left out: measuring it needs PyAV, which is not installed; "
            "install it with `pip install 'datareel[av]'` (or `pip install av`) and prepare again"
        )
        return None
    return av


def av_metadata(data: bytes, filename: str) -> AVMetadata | None:
    """The metadata of one audio or video file's bytes; ``None`` when PyAV is missing or cannot read them."""
    av = _pyav()
    if av is None:
        return None
    try:
        container = av.open(io.BytesIO(data), "r", options=dict(_NO_PROTOCOLS))
    except (av.error.FFmpegError, OSError, ValueError, EOFError):
        log.debug("no audio/video metadata for %s: PyAV cannot open it", filename, exc_info=True)
        return None
    try:
        for stream in container.streams:
            if stream.codec_context is not None:
                stream.codec_context.thread_type = "NONE"
                stream.codec_context.thread_count = 0
        metadata = AVMetadata()
        if container.streams.video:
            _measure_video(container, container.streams.video[0], metadata)
        if container.streams.audio:
            _measure_audio(container, container.streams.audio[0], metadata)
        return metadata
    except (av.error.FFmpegError, OSError, ValueError, EOFError, ZeroDivisionError):
        log.debug("no audio/video metadata for %s: PyAV cannot measure it", filename, exc_info=True)
        return None
    finally:
        container.close()


def _seconds(ticks: int | None, stream: Any) -> float | None:
    """``ticks`` of ``stream``'s time base, from its start time, in seconds."""
    if ticks is None:
        return None
    if stream.start_time is not None:
        ticks -= stream.start_time
    return ticks * float(stream.time_base) if stream.time_base is not None else ticks


def _end(last: Any) -> int | None:
    """Where a packet or frame ends (its pts plus its duration), ``None`` when either is unknown."""
    if last is None or last.duration is None:
        return None
    return last.pts + last.duration


def _measure_video(container: Any, stream: Any, metadata: AVMetadata) -> None:
    ticks = stream.duration
    frames = None
    if ticks is None:  # no duration in the header: demux the stream to its end
        frames, last = 0, None
        for packet in container.demux(video=0):
            if packet.pts is not None:
                frames, last = frames + 1, packet
        ticks = _end(last)
    metadata.video_duration = _seconds(ticks, stream)
    if frames is None:
        frames = sum(1 for packet in container.demux(video=0) if packet.pts is not None)
    metadata.video_num_frames = frames
    rate: Fraction | None = stream.average_rate
    if rate is not None:
        metadata.video_fps = float(rate)
    elif metadata.video_duration is not None:
        metadata.video_fps = frames / metadata.video_duration
    container.seek(0)
    first = next(iter(container.decode(video=0)), None)
    metadata.video_width = first.width if first is not None else stream.width
    metadata.video_height = first.height if first is not None else stream.height


def _measure_audio(container: Any, stream: Any, metadata: AVMetadata) -> None:
    metadata.audio_sample_rate = stream.sample_rate
    container.seek(0)
    samples, last = 0, None
    for frame in container.decode(audio=0):
        if frame.pts is not None:
            last = frame
        samples += frame.samples
    metadata.audio_num_samples = samples
    ticks = _end(last)
    if ticks is None:
        ticks = stream.duration
    if ticks is None:  # neither the frames nor the header say: demux the stream to its end
        container.seek(0)
        last = None
        for packet in container.demux(audio=0):
            if packet.pts is not None:
                last = packet
        ticks = _end(last)
    metadata.audio_duration = _seconds(ticks, stream)
    metadata.audio_channels = stream.channels
