"""Mux a rendered video and its sound into one MP4 (PyAV): the video stream copied packet for packet,
the sound as a 16-bit PCM track, bit-exact so the same inputs give the same bytes on one machine.

PCM, not AAC: the track decodes to exactly the samples the world rendered (AAC is lossy, pads its
first frame with encoder delay and rounds the length up to 1024-sample frames), so an audio tool
reads the muxed track as it reads the separate WAV; the cost is size (32 kB a second at 16 kHz)."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import numpy as np

from orchestra.errors import WorldError

#: samples per PCM packet (64 ms at 16 kHz); any fixed size gives fixed timestamps
CHUNK = 1024


def mux_audio(video: Path, samples: np.ndarray, rate: int, out: Path) -> None:
    """Write ``out``: ``video``'s video stream (not re-encoded) plus ``samples`` (mono int16 at
    ``rate`` Hz) as a ``pcm_s16le`` track, pts = sample index. Written to a temp name, then renamed."""
    import av

    samples = np.asarray(samples)
    if samples.dtype != np.int16 or samples.ndim != 1 or samples.size == 0:
        raise WorldError(f"muxing needs non-empty mono int16 samples, got {samples.dtype} {samples.shape}")
    out = Path(out)
    tmp = out.with_name(f".{out.stem}.mux.tmp{out.suffix}")
    base = Fraction(1, rate)
    try:
        with (
            av.open(str(video)) as src,
            av.open(str(tmp), "w", format="mp4", options={"fflags": "+bitexact"}) as dst,
        ):
            if not src.streams.video:
                raise WorldError(f"{video} has no video stream to mux")
            vin = src.streams.video[0]
            vout = dst.add_stream_from_template(vin)
            aout = dst.add_stream("pcm_s16le", rate=rate, layout="mono")
            aout.codec_context.flags |= av.codec.context.Flags.bitexact
            for pkt in src.demux(vin):
                if pkt.dts is None:  # the demuxer's end-of-stream flush packet
                    continue
                pkt.stream = vout
                dst.mux(pkt)
            for start in range(0, samples.size, CHUNK):
                frame = av.AudioFrame.from_ndarray(
                    samples[start : start + CHUNK].reshape(1, -1), format="s16", layout="mono"
                )
                frame.sample_rate, frame.pts, frame.time_base = rate, start, base
                dst.mux(aout.encode(frame))
            dst.mux(aout.encode(None))
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, av.FFmpegError):
            raise WorldError(f"cannot mux {video} with its audio: {e}") from e
        raise
    os.replace(tmp, out)
