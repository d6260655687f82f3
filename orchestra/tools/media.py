"""Shared media loading and validation for the perception tools: images, WAV audio, video files."""

from __future__ import annotations

import hashlib
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.errors import OrchestraError
from orchestra.io import atomic_write_bytes
from orchestra.tools.base import FailureKinds
from orchestra.tools.cache import media_sha256


class MediaError(OrchestraError):
    """A media file is missing, empty, of the wrong kind, or corrupt."""


#: what a media tool's ``run`` may raise on bad input besides MediaError: a file the agent names
#: cannot be read or written (no permission, a folder given as ``out_path``, a full disk)
FILE_FAILURES: FailureKinds = (OSError,)


_IMAGE_MAGIC: dict[bytes, str] = {
    b"\x89PNG\r\n\x1a\n": "PNG",
    b"\xff\xd8\xff": "JPEG",
    b"GIF87a": "GIF",
    b"GIF89a": "GIF",
    b"BM": "BMP",
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
}


def check_file(path: str | Path, kind: str) -> Path:
    """Return ``path`` as a Path if it names a readable, non-empty regular file; else MediaError."""
    p = Path(str(path)).expanduser()
    if not p.exists():
        raise MediaError(f"{kind} file not found: {p}")
    if not p.is_file():
        raise MediaError(f"{kind} path is not a regular file: {p}")
    if p.stat().st_size == 0:
        raise MediaError(f"{kind} file is empty (0 bytes): {p}")
    return p


def cv_guard(fn: Any, *args: Any) -> Any:
    """Run an OpenCV-heavy step; an OpenCV failure on odd input becomes a MediaError."""
    import cv2

    try:
        return fn(*args)
    except cv2.error as e:
        raise MediaError(f"image processing failed: {e}") from e


def _sniff_image(head: bytes) -> str | None:
    for magic, fmt in _IMAGE_MAGIC.items():
        if head.startswith(magic):
            return fmt
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    return None


def load_image(path: str | Path) -> np.ndarray:
    """Decode an image file into a BGR uint8 array (alpha composited over white).

    The file's signature is checked before decoding, and a truncated or corrupt file raises
    MediaError instead of yielding a half-grey picture.
    """
    from PIL import Image, UnidentifiedImageError

    p = check_file(path, "image")
    with p.open("rb") as fh:
        head = fh.read(16)
    fmt = _sniff_image(head)
    if fmt is None:
        raise MediaError(f"not an image file (unknown signature {head[:8]!r}): {p}")
    try:
        with Image.open(p) as im:
            im.load()
            if im.mode in ("RGBA", "LA", "P", "PA"):
                rgba = im.convert("RGBA")
                bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                rgb = Image.alpha_composite(bg, rgba).convert("RGB")
            else:
                rgb = im.convert("RGB")
    except Image.DecompressionBombError as e:
        raise MediaError(f"image {p} is too large to decode safely: {e}") from e
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
        raise MediaError(f"corrupt or truncated {fmt} image {p}: {e}") from e
    arr = np.asarray(rgb, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[0] < 2 or arr.shape[1] < 2:
        raise MediaError(f"image {p} has unusable size {arr.shape}")
    return np.ascontiguousarray(arr[:, :, ::-1])


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples in [-1, 1] at ``rate`` Hz, plus what the file said."""

    samples: np.ndarray
    rate: int
    channels: int
    sample_width: int

    @property
    def duration(self) -> float:
        return len(self.samples) / float(self.rate)


def _riff_chunks(data: bytes) -> Iterator[tuple[bytes, int, int]]:
    """(chunk id, body start, body size clipped to the file) for each RIFF chunk after the header."""
    pos = 12
    while pos + 8 <= len(data):
        cid, size = struct.unpack("<4sI", data[pos : pos + 8])
        start = pos + 8
        yield cid, start, min(size, len(data) - start)
        pos = start + size + (size & 1)


def load_wav(path: str | Path) -> Audio:
    """Read a RIFF/WAVE file (PCM 8/16/24/32-bit or IEEE float, any rate, mono or multi-channel).

    Channels are averaged to mono. Bad headers, unsupported encodings and missing data raise
    MediaError with the reason.
    """
    p = check_file(path, "audio")
    data = p.read_bytes()
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise MediaError(f"not a WAV file (no RIFF/WAVE header): {p}")
    fmt: tuple[int, int, int, int] | None = None
    raw: bytes | None = None
    for cid, start, size in _riff_chunks(data):
        if cid == b"fmt ":
            if size < 16:
                raise MediaError(f"WAV fmt chunk too short ({size} bytes): {p}")
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", data[start : start + 16])
            if tag == 0xFFFE and size >= 26:  # WAVE_FORMAT_EXTENSIBLE: real tag opens the sub-format GUID
                tag = struct.unpack("<H", data[start + 24 : start + 26])[0]
            fmt = (tag, channels, rate, bits)
        elif cid == b"data":
            raw = data[start : start + size]
    if fmt is None:
        raise MediaError(f"WAV file has no fmt chunk: {p}")
    if raw is None:
        raise MediaError(f"WAV file has no data chunk: {p}")
    tag, channels, rate, bits = fmt
    if channels < 1 or rate < 1000 or rate > 768_000:
        raise MediaError(f"WAV header is invalid (channels={channels}, rate={rate}): {p}")
    width = bits // 8
    if tag == 1 and width == 1:
        x = (np.frombuffer(raw[: len(raw) - len(raw) % channels], np.uint8).astype(np.float32) - 128) / 128
    elif tag == 1 and width == 2:
        x = np.frombuffer(raw[: len(raw) - len(raw) % (2 * channels)], "<i2").astype(np.float32) / 32768
    elif tag == 1 and width == 3:
        b = (
            np.frombuffer(raw[: len(raw) - len(raw) % (3 * channels)], np.uint8)
            .reshape(-1, 3)
            .astype(np.int32)
        )
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / (1 << 23)
    elif tag == 1 and width == 4:
        x = np.frombuffer(raw[: len(raw) - len(raw) % (4 * channels)], "<i4").astype(np.float32) / 2**31
    elif tag == 3 and width in (4, 8):
        dt = "<f4" if width == 4 else "<f8"
        x = np.frombuffer(raw[: len(raw) - len(raw) % (width * channels)], dt).astype(np.float32)
    else:
        raise MediaError(f"unsupported WAV encoding (format tag {tag}, {bits} bits): {p}")
    if x.size < channels:
        raise MediaError(f"WAV file has no audio samples: {p}")
    x = x[: x.size - x.size % channels].reshape(-1, channels).mean(axis=1)
    if not np.all(np.isfinite(x)):
        raise MediaError(f"WAV file holds non-finite samples: {p}")
    return Audio(
        samples=np.ascontiguousarray(x, dtype=np.float32),
        rate=int(rate),
        channels=channels,
        sample_width=width,
    )


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """Encode mono float samples in [-1, 1] (or int16) as a 16-bit PCM WAV file."""
    if samples.dtype == np.int16:
        pcm = samples
    else:
        pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2")
    payload = pcm.astype("<i2").tobytes()
    header = b"RIFF" + struct.pack("<I", 36 + len(payload)) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return header + b"data" + struct.pack("<I", len(payload)) + payload


def write_wav(path: str | Path, samples: np.ndarray, rate: int) -> Path:
    """Write mono samples as a 16-bit PCM WAV file atomically; returns the path."""
    p = Path(path)
    atomic_write_bytes(p, wav_bytes(samples, rate))
    return p


def output_path(source: Path, tag: str, suffix: str, out_path: str | None) -> Path:
    """Where a tool writes a derived file: ``out_path`` if given, else a temp-folder name made from the
    source's bytes and ``tag`` (the same file anywhere, in any checkout, gets the same name)."""
    if out_path:
        return Path(out_path).expanduser()
    digest = hashlib.sha256(f"{media_sha256(source)}|{tag}".encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "orchestra-tools"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{source.stem}-{digest}{suffix}"


@dataclass(frozen=True)
class VideoInfo:
    """What OpenCV reports about a video file."""

    fps: float
    frame_count: int
    width: int
    height: int

    @property
    def duration(self) -> float:
        return self.frame_count / self.fps if self.fps > 0 else 0.0


def read_video(
    path: str | Path,
    max_fps: float | None = None,
    max_frames: int | None = None,
    indices: set[int] | None = None,
) -> tuple[VideoInfo, list[np.ndarray], list[int]]:
    """Decode a video's BGR frames, keeping only some so long videos fit in memory: at most
    ``max_fps`` per second, only ``indices`` if given, and at most ``max_frames`` (the rest of the
    file is still read to count its frames). Returns (info, kept frames, their frame indices).
    Unopenable, frameless or corrupt files raise MediaError."""
    import cv2

    p = check_file(path, "video")
    cap = cv2.VideoCapture(str(p))
    try:
        if not cap.isOpened():
            raise MediaError(f"cannot open video (not a video file, or corrupt): {p}")
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        if not (0 < fps < 1000):
            raise MediaError(f"video reports an invalid frame rate ({fps}): {p}")
        every = max(1, int(round(fps / max_fps))) if max_fps else 1
        frames: list[np.ndarray] = []
        kept: list[int] = []
        size: tuple[int, int] | None = None
        index = 0
        while cap.grab():
            want = index % every == 0 and (indices is None or index in indices)
            want = want and (max_frames is None or len(frames) < max_frames)
            if want or size is None:
                ok, frame = cap.retrieve()
                if not ok:
                    break
                size = size or (frame.shape[1], frame.shape[0])
                if want:
                    frames.append(frame)
                    kept.append(index)
            index += 1
    finally:
        cap.release()
    if size is None or index == 0:
        raise MediaError(f"video has no decodable frames (corrupt or empty): {p}")
    return VideoInfo(fps=fps, frame_count=index, width=size[0], height=size[1]), frames, kept


#: a decoded track may end this much (seconds) short of the length its container declares: codec
#: frame rounding and AAC priming; a truncated file misses more
TRACK_SLACK_S = 0.1


def decode_audio_track(path: Path, rate: int = 16000) -> np.ndarray:
    """The first audio stream of a media file (MP4, MOV, MKV, ... any codec FFmpeg decodes: PCM,
    AAC, ...), decoded with PyAV and resampled to mono int16 at ``rate`` Hz. MediaError when the
    file is unreadable, has no audio stream, fails to decode, or decodes shorter than it declares
    (a truncated file whose index survived)."""
    import av

    try:
        with av.open(str(path)) as box:
            if not box.streams.audio:
                kinds = ", ".join(sorted({s.type for s in box.streams})) or "none"
                raise MediaError(f"the video has no audio stream (its streams: {kinds}): {path}")
            stream = box.streams.audio[0]
            known = stream.duration and stream.time_base
            declared = float(stream.duration * stream.time_base) if known else None
            resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
            parts = [
                out.to_ndarray().reshape(-1)
                for frame in box.decode(stream)
                for out in resampler.resample(frame)
            ]
            parts += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    except av.FFmpegError as e:
        raise MediaError(f"cannot decode the audio track (corrupt or truncated file): {path}: {e}") from e
    samples = np.concatenate(parts).astype(np.int16) if parts else np.zeros(0, dtype=np.int16)
    if samples.size == 0:
        raise MediaError(f"the audio track decodes to no samples (corrupt or empty): {path}")
    if declared is not None and samples.size / rate < declared - TRACK_SLACK_S:
        raise MediaError(
            f"the audio track is truncated: {samples.size / rate:.2f}s decoded of the {declared:.2f}s "
            f"the file declares: {path}"
        )
    return samples
