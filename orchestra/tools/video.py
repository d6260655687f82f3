"""Video perception tools: frame sampling, object event timeline, on-screen text by time, audio track."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from orchestra.tools.base import FailureKinds, Observation, Tool
from orchestra.tools.media import (
    FILE_FAILURES,
    MediaError,
    VideoInfo,
    check_file,
    cv_guard,
    mp4_tracks,
    output_path,
    read_video,
)
from orchestra.tools.ocr import find_text_box, read_text
from orchestra.tools.shapes import Shape
from orchestra.tools.tracking import frame_objects, object_events

MAX_FRAMES = 400
#: OpenCV decoding/encoding outside cv_guard (VideoCapture, PNG encoding) may refuse odd input
_FAILURES: FailureKinds = (*FILE_FAILURES, cv2.error)


def _frames(path: str, max_fps: float = 10.0) -> tuple[VideoInfo, list[np.ndarray], float]:
    """Frames thinned to at most ``max_fps`` (and MAX_FRAMES in all); returns (info, frames, step_s)."""
    info, frames, kept = read_video(path, max_fps=max_fps)
    if len(frames) > MAX_FRAMES:
        stride = int(np.ceil(len(frames) / MAX_FRAMES))
        frames, kept = frames[::stride], kept[::stride]
    step = (kept[1] - kept[0]) / info.fps if len(kept) > 1 else 1.0 / info.fps
    return info, frames, step


def _paint_out(frame: np.ndarray, objs: list[Shape]) -> np.ndarray:
    """The frame with coloured objects painted in the border colour, so only text-like marks remain."""
    out = frame.copy()
    border = np.concatenate([frame[0], frame[-1], frame[:, 0], frame[:, -1]])
    bg = np.median(border, axis=0).astype(np.uint8)
    for s in objs:
        x, y, w, h = s.box
        out[max(0, y - 2) : y + h + 2, max(0, x - 2) : x + w + 2] = bg
    return out


def _signature(gray: np.ndarray) -> tuple[tuple[int, int, int, int], np.ndarray] | None:
    found = find_text_box(cv2.medianBlur(gray, 3))
    if found is None:
        return None
    (x0, y0, x1, y1), light = found
    _, bw = cv2.threshold(gray[y0:y1, x0:x1], 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    return (x0, y0, x1, y1), (bw > 0) if light else (bw == 0)


def _same(
    a: tuple[tuple[int, int, int, int], np.ndarray] | None,
    b: tuple[tuple[int, int, int, int], np.ndarray] | None,
) -> bool:
    if a is None or b is None:
        return a is None and b is None
    (ax0, ay0, ax1, ay1), am = a
    (bx0, by0, bx1, by1), bm = b
    if max(abs(ax0 - bx0), abs(ay0 - by0), abs(ax1 - bx1), abs(ay1 - by1)) > 4:
        return False
    bm = cv2.resize(bm.astype(np.uint8), (am.shape[1], am.shape[0]), interpolation=cv2.INTER_NEAREST) > 0
    return float(np.mean(am == bm)) > 0.97


def text_timeline(frames: list[np.ndarray], step_s: float) -> list[dict[str, Any]]:
    """On-screen text over time: frames are grouped into runs whose text region looks the same, each
    run is OCR'd once on its temporal median (denoised), and equal neighbouring texts are merged."""
    grays, sigs = [], []
    for f in frames:
        g = cv2.cvtColor(_paint_out(f, frame_objects(f)), cv2.COLOR_BGR2GRAY)
        grays.append(g)
        sigs.append(_signature(g))
    runs: list[list[int]] = []
    for k in range(len(frames)):
        if runs and _same(sigs[runs[-1][0]], sigs[k]):
            runs[-1].append(k)
        else:
            runs.append([k])
    timeline: list[dict[str, Any]] = []
    for run in runs:
        if sigs[run[0]] is None or len(run) * step_s < 0.2:
            continue
        med = np.median(np.stack([grays[k] for k in run[:15]]), axis=0).astype(np.uint8)
        res = read_text(med)
        text = " ".join(res.lines).strip()
        if not text or res.conf < 50:
            continue
        t0, t1 = round(run[0] * step_s, 3), round((run[-1] + 1) * step_s, 3)
        if timeline and timeline[-1]["text"] == text and abs(timeline[-1]["t_end"] - t0) < 1e-6:
            timeline[-1]["t_end"] = t1
        else:
            timeline.append({"t_start": t0, "t_end": t1, "text": text, "conf": round(res.conf, 1)})
    return timeline


def _schema(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {
        "path": {"type": "string", "description": "path of a video file (MP4, AVI, ...)"}
    }
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": ["path"]}


def _ffmpeg_extract(exe: str, src: Path, tmp: Path) -> subprocess.CompletedProcess[bytes]:
    """Run ffmpeg to write ``src``'s audio track to ``tmp`` as 16 kHz mono 16-bit PCM WAV."""
    return subprocess.run(
        [
            exe,
            "-nostdin",
            "-loglevel",
            "error",
            "-y",
            "-i",
            str(src),
            "-vn",
            "-ac",
            "1",
            "-ar",
            "16000",
            "-acodec",
            "pcm_s16le",
            str(tmp),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )


class VideoSampleFrames(Tool):
    """Save frames at chosen times as PNG files."""

    name: ClassVar[str] = "video_sample_frames"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Save video frames as PNG images: at the given times (seconds), or `count` frames evenly spread. "
        "Returns each frame's time and file path (for image_* tools) plus the video's fps, size and duration."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(
        {
            "times": {"type": "array", "items": {"type": "number"}, "description": "times in seconds"},
            "count": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "description": "frames spread evenly (default 4)",
            },
            "out_dir": {"type": "string", "description": "folder for the PNGs (default: a temp folder)"},
        }
    )

    def run(
        self,
        path: str,
        times: list[float] | None = None,
        count: int = 4,
        out_dir: str | None = None,
    ) -> Observation:
        from orchestra.io import atomic_write_bytes

        info, _, _ = read_video(path, max_frames=0)
        if times is None:
            count = max(1, min(int(count), 50))
            times = [info.duration * (i + 0.5) / count for i in range(count)]
        bad = [t for t in times if not 0 <= float(t) <= info.duration]
        if bad:
            raise MediaError(f"times {bad} are outside the video (0 to {info.duration:.2f}s)")
        wanted = [min(info.frame_count - 1, int(float(t) * info.fps)) for t in times]
        _, frames, kept = read_video(path, indices=set(wanted))
        by_index = dict(zip(kept, frames, strict=True))
        src = Path(path)
        folder = Path(out_dir) if out_dir else output_path(src, "frames", "", None)
        saved = []
        for k in wanted:
            if k not in by_index:
                raise MediaError(f"frame {k} could not be decoded")
            ok, png = cv2.imencode(".png", by_index[k])
            if not ok:
                raise MediaError(f"could not encode frame {k} as PNG")
            dest = folder / f"frame_{k:05d}.png"
            atomic_write_bytes(dest, png.tobytes())
            saved.append({"t": round(k / info.fps, 3), "frame": k, "path": str(dest)})
        text = (
            f"Saved {len(saved)} frame(s) from a {info.duration:.2f}s {info.width}x{info.height} video: "
            + ", ".join(f"t={s['t']}s -> {s['path']}" for s in saved)
        )
        return Observation(
            tool=self.name,
            text=text,
            data={
                "frames": saved,
                "fps": info.fps,
                "width": info.width,
                "height": info.height,
                "duration_s": info.duration,
            },
        )


class VideoEvents(Tool):
    """Timeline of coloured objects appearing, disappearing, moving and changing colour."""

    name: ClassVar[str] = "video_events"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Track coloured objects (circles, squares, triangles, ...) through a video and list events with "
        "times "
        "in seconds: appear, disappear, move (start/end, from/to pixels) and colour_change (from/to colour)."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema()

    def run(self, path: str) -> Observation:
        info, frames, step = _frames(path)
        events, objects = cv_guard(object_events, frames, step)
        lines = []
        for e in events:
            extra = f" {e['from']}->{e['colour']}" if e["kind"] == "colour_change" else f" ({e['colour']})"
            until = f"-{e['t_end']}s" if e["kind"] == "move" else "s"
            lines.append(f"{e['t']}{until} {e['object']} {e['kind']}{extra}")
        text = f"{len(objects)} object(s), {len(events)} event(s): " + ("; ".join(lines) if lines else "none")
        return Observation(
            tool=self.name,
            text=text,
            data={"events": events, "objects": objects, "fps": info.fps, "duration_s": info.duration},
        )


class VideoText(Tool):
    """On-screen text (captions, scoreboards) with the times it is shown."""

    name: ClassVar[str] = "video_text"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Read on-screen text in a video over time (Tesseract OCR on frames grouped by identical text "
        "regions). "
        "Returns a timeline of {t_start, t_end, text} in seconds, e.g. a caption or a changing scoreboard."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema()

    def run(self, path: str) -> Observation:
        info, frames, step = _frames(path, max_fps=8.0)
        timeline = cv_guard(text_timeline, frames, step)
        text = (
            "; ".join(f"{t['t_start']}-{t['t_end']}s: {t['text']!r}" for t in timeline)
            or "No on-screen text."
        )
        return Observation(
            tool=self.name, text=text, data={"timeline": timeline, "duration_s": info.duration}
        )


class VideoExtractAudio(Tool):
    """Extract a video's audio track to WAV (needs an audio stream and ffmpeg)."""

    name: ClassVar[str] = "video_extract_audio"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Extract the audio track of a video to a 16 kHz mono WAV for the audio_* tools. Needs the file to "
        "carry "
        "an audio stream and the ffmpeg program; otherwise it says which is missing."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(
        {"out_path": {"type": "string", "description": "where to write the WAV (optional)"}}
    )

    def run(self, path: str, out_path: str | None = None) -> Observation:
        src = check_file(path, "video")
        read_video(src, max_frames=1)
        with src.open("rb") as fh:
            is_mp4 = fh.read(12)[4:8] == b"ftyp"
        if is_mp4:
            tracks = mp4_tracks(src)
            if not any(t.get("handler") == "soun" for t in tracks):
                kinds = ", ".join(sorted({t.get("handler", "?") for t in tracks})) or "none"
                raise MediaError(f"the video has no audio stream (its tracks: {kinds}): {src}")
        exe = shutil.which("ffmpeg")
        if exe is None:
            raise MediaError(
                "the video has an audio stream but ffmpeg is not installed, so it cannot be decoded"
            )
        dest = output_path(src, "audio", ".wav", out_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp.wav")
        try:
            proc = _ffmpeg_extract(exe, src, tmp)
        except subprocess.TimeoutExpired as e:
            tmp.unlink(missing_ok=True)
            raise MediaError(f"ffmpeg did not finish extracting audio within {e.timeout:g}s") from e
        if proc.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            raise MediaError(f"ffmpeg could not extract audio: {proc.stderr.decode(errors='replace')[:300]}")
        tmp.replace(dest)
        return Observation(
            tool=self.name, text=f"Extracted the audio track to {dest}", data={"out_path": str(dest)}
        )
