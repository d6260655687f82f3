"""Video perception tools: frame sampling, object event timeline, on-screen text by time, audio track."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from orchestra.tools.base import FailureKinds, Observation, Tool, check_mode, mode_property, ramp
from orchestra.tools.media import (
    FILE_FAILURES,
    MediaError,
    VideoInfo,
    check_file,
    cv_guard,
    decode_audio_track,
    output_path,
    read_video,
    write_wav,
)
from orchestra.tools.ocr import OcrWord, find_text_box, read_text, tesseract_words
from orchestra.tools.shapes import Shape
from orchestra.tools.tracking import (
    change_gaps,
    frame_objects,
    object_events,
    refine_changes,
    sample_end,
    sample_start,
)

MAX_FRAMES = 400
EXTRACT_RATE = 16_000  # the audio tools' own rate: the world's tracks come out sample for sample
FAST_FPS = 2.0  # fast mode: about two samples a second (the first and last frame included)
#: OpenCV decoding/encoding outside cv_guard (VideoCapture, PNG encoding) may refuse odd input
_FAILURES: FailureKinds = (*FILE_FAILURES, cv2.error)
_MODE = mode_property(
    "fast: about 2 sampled frames a second, one OCR pass per text (misses brief or "
    "fast things); careful (default): every frame (up to 8-10 per second), denoised OCR"
)


def _frames(path: str, mode: str, max_fps: float) -> tuple[VideoInfo, list[np.ndarray], list[float]]:
    """The sampled frames and their times (s). careful: thinned to at most ``max_fps`` (and
    MAX_FRAMES in all); fast: about FAST_FPS evenly spread from the first to the last frame."""
    if mode == "fast":
        info, _, _ = read_video(path, max_frames=0)
        m = max(2, int(np.ceil(info.duration * FAST_FPS)) + 1)
        wanted = sorted({int(round(v)) for v in np.linspace(0, info.frame_count - 1, m)})
        _, frames, kept = read_video(path, indices=set(wanted))
    else:
        info, frames, kept = read_video(path, max_fps=max_fps)
        if len(frames) > MAX_FRAMES:
            stride = int(np.ceil(len(frames) / MAX_FRAMES))
            frames, kept = frames[::stride], kept[::stride]
    return info, frames, [k / info.fps for k in kept]


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


def _word_conf(words: list[OcrWord]) -> float:
    """The weakest Tesseract confidence (0-100) of a word with a letter or digit; 0 when none."""
    good = [w.conf for w in words if w.conf >= 0 and any(c.isalnum() for c in w.text)]
    return float(min(good)) if good else 0.0


_LOOKALIKES = str.maketrans({"O": "0", "o": "0", "l": "1", "I": "1"})


def _digits(text: str) -> str:
    """Tokens with digits whose only letters look like digits are numbers: 'o-1' -> '0-1'."""
    out = []
    for tok in text.split(" "):
        letters = {c for c in tok if c.isalpha()}
        numeric = any(c.isdigit() for c in tok) and letters and letters <= set("OolI")
        out.append(tok.translate(_LOOKALIKES) if numeric else tok)
    return " ".join(out)


def _read_fast(sig: tuple[tuple[int, int, int, int], np.ndarray]) -> tuple[str, float]:
    """One Tesseract pass (single line) on a text region's raw Otsu glyph mask: no denoising,
    rescaling or variants. Returns (text, weakest word confidence)."""
    ink = np.where(sig[1], 0, 255).astype(np.uint8)
    words = tesseract_words(cv2.copyMakeBorder(ink, 10, 10, 10, 10, cv2.BORDER_CONSTANT, value=255), psm=7)
    words = [w for w in words if any(c.isalnum() or c == "-" for c in w.text)]
    return " ".join(w.text for w in words).strip(), _word_conf(words)


def _gray(frame: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(_paint_out(frame, frame_objects(frame)), cv2.COLOR_BGR2GRAY)


def _confirmed(frames: list[np.ndarray], sig: tuple[tuple[int, int, int, int], np.ndarray], text: str) -> int:
    """How many of ``frames`` show the same text region as ``sig`` and read as ``text`` again."""
    n = 0
    for f in frames:
        other = _signature(_gray(f))
        n += other is not None and _same(sig, other) and _read_fast(other)[0] == text
    return n


def text_timeline(
    frames: list[np.ndarray],
    times: list[float],
    dt: float,
    duration: float,
    mode: str = "careful",
    neighbours: Callable[[int], list[np.ndarray]] | None = None,
) -> tuple[list[dict[str, Any]], float, dict[str, Any]]:
    """On-screen text over time: sampled frames are grouped into runs whose text region looks the
    same, each run is read once, and equal neighbouring texts (at most 0.3 s apart) are merged.
    careful finds text regions on 3-frame temporal medians and reads each run's temporal median
    with the full OCR (denoised, several preprocessing variants), cross-checked by a one-line
    reading of its glyph mask (taken when the full OCR is unsure or lost a glyph the mask has);
    fast reads the glyph mask of the run's middle frame in one raw Tesseract pass.

    Confidence (0-1): each text's weakest word confidence mapped linearly from 60 (-> 0) to 92
    (-> 1), times 0.55 for a text seen in one sample only (unconfirmed, its times coarse) and, in careful,
    times 0.55 when the two readings disagree; each timeline item keeps its own as ``confidence``.
    In fast, ``neighbours(k)`` (when given) returns a few frames near sample ``k``: a text seen in
    one sample that a neighbouring frame shows and reads the same again counts as confirmed. The
    timeline's confidence is its weakest text's, times 0.5 per text region that was seen but could
    not be read (``unread_regions``). An empty timeline scores 0.95 in careful (every frame looked
    at) and 0.55 in fast (a caption shorter than the sample gap can be missed).
    Returns (timeline, confidence, what lowered it)."""
    grays = [_gray(f) for f in frames]
    sigs = []
    confirmed = 0
    for k, g in enumerate(grays):  # careful: text regions found on a 3-frame temporal median
        near = grays[max(0, k - 1) : k + 2] if mode == "careful" and len(grays) > 2 else [g]
        sigs.append(_signature(np.median(np.stack(near), axis=0).astype(np.uint8) if len(near) > 1 else g))
    runs: list[list[int]] = []
    for k in range(len(frames)):
        if runs and _same(sigs[runs[-1][0]], sigs[k]):
            runs[-1].append(k)
        else:
            runs.append([k])
    timeline: list[dict[str, Any]] = []
    unread = 0
    for run in runs:
        sig = sigs[run[len(run) // 2]]
        if sig is None:
            continue
        if mode == "careful" and len(run) * dt < 0.2:
            unread += 1
            continue
        agree = True
        seen = len(run)
        if mode == "fast":
            text, wconf = _read_fast(sig)
            if seen == 1 and text and neighbours is not None and _confirmed(neighbours(run[0]), sig, text):
                seen, confirmed = 2, confirmed + 1
        else:  # the run's temporal median read in full, cross-checked by a reading of its glyph mask
            med = np.median(np.stack([grays[k] for k in run[:15]]), axis=0).astype(np.uint8)
            res = read_text(med)
            msig = _signature(med)
            reads = [(" ".join(res.lines).strip(), _word_conf(res.words))]
            mask_text, mask_conf = _read_fast(msig) if msig is not None else ("", 0.0)
            reads.append((_digits(mask_text.strip(".,:;'`|_~")), mask_conf))  # cleaned: no specks
            agree = reads[0][0].replace(" ", "") == reads[1][0].replace(" ", "")
            full, mask = (r[0].replace(" ", "") for r in reads)
            weak = reads[0][1] < 60 and reads[1][1] > reads[0][1]  # the mask reading as a fallback
            longer = len(mask) > len(full) and full in mask  # the full OCR lost an edge glyph
            text, wconf = reads[1] if weak or longer else reads[0]
        if not text or wconf < 30:
            unread += 1
            continue
        c = round(ramp(wconf, 60.0, 92.0) * (0.55 if seen == 1 else 1.0) * (1.0 if agree else 0.55), 3)
        t0, t1 = sample_start(times, dt, run[0]), sample_end(times, dt, run[-1], duration)
        if timeline and timeline[-1]["text"] == text and t0 - timeline[-1]["t_end"] <= 0.3:
            timeline[-1]["t_end"] = t1
            timeline[-1]["confidence"] = max(timeline[-1]["confidence"], c)
        else:
            timeline.append(
                {"t_start": t0, "t_end": t1, "text": text, "conf": round(wconf, 1), "confidence": c}
            )
    confs = [t["confidence"] for t in timeline]
    empty = 0.95 if mode == "careful" else 0.55  # fast: a brief text may hide between its samples
    conf = (min(confs) if confs else empty) * 0.5**unread
    why = {"unread_regions": unread, "texts": confs, "confirmed_by_neighbours": confirmed}
    return timeline, round(conf, 3), why


def _schema(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {
        "path": {"type": "string", "description": "path of a video file (MP4, AVI, ...)"}
    }
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": ["path"]}


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
    """Timeline of coloured objects appearing, disappearing, moving and changing colour.

    ``careful`` tracks every frame (up to 10 a second); ``fast`` about 2 frames a second, first and
    last included, so brief visits, late changes and fast sweeps slip between its samples; a colour
    change seen between two samples is then timed on the few frames between them (``t_error_s`` 0).
    ``confidence`` (0-1, see :func:`~orchestra.tools.tracking.event_confidence`): 0.95 scaled down
    for each detection no track explains, change seen only in the last sample, track broken where a
    same-shape one starts, large jumps between samples and shape disagreement within a track."""

    name: ClassVar[str] = "video_events"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Track coloured objects (circles, squares, triangles, ...) through a video and list events "
        "with times in seconds: appear, disappear, move (start/end, from/to pixels) and colour_change "
        "(from/to colour), with a 0-1 confidence. mode fast samples ~2 frames/s (cheaper, misses brief "
        "or fast events)."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(_MODE)

    def run(self, path: str, mode: str = "careful") -> Observation:
        info, frames, times = _frames(path, check_mode(mode), max_fps=10.0)
        events, objects, conf, why = cv_guard(object_events, frames, times, 1.0 / info.fps, info.duration)
        gaps = change_gaps(events, info.fps) if mode == "fast" else {}
        if gaps:  # fast: a change between two samples is timed on the few frames between them
            wanted = {i for idx in gaps.values() for i in idx}
            _, extra, kept = read_video(path, indices=wanted)
            cv_guard(refine_changes, events, gaps, dict(zip(kept, extra, strict=True)), info.fps)
        lines = []
        for e in events:
            extra = f" {e['from']}->{e['colour']}" if e["kind"] == "colour_change" else f" ({e['colour']})"
            until = f"-{e['t_end']}s" if e["kind"] == "move" else "s"
            lines.append(f"{e['t']}{until} {e['object']} {e['kind']}{extra}")
        text = f"{len(objects)} object(s), {len(events)} event(s): " + ("; ".join(lines) if lines else "none")
        return Observation(
            tool=self.name,
            text=f"{text} (confidence {conf:.2f})",
            data={
                "events": events,
                "objects": objects,
                "fps": info.fps,
                "duration_s": info.duration,
                "frames_sampled": len(frames),
                "mode": mode,
                "confidence": conf,
                "confidence_why": why,
            },
        )


class VideoText(Tool):
    """On-screen text (captions, scoreboards) with the times it is shown.

    ``careful`` samples up to 8 frames a second and reads temporal medians with the full OCR,
    cross-checked; ``fast`` about 2 frames a second, one raw Tesseract pass per text. ``confidence``
    (0-1, see :func:`text_timeline`): the weakest text's weakest-word Tesseract confidence mapped
    from 60 -> 0 to 92 -> 1, lowered for texts seen once (fast: unless a neighbouring frame reads
    the same), readings that disagree and text regions left unread; each timeline item carries its
    own. An empty timeline is 0.95 in careful and 0.55 in fast."""

    name: ClassVar[str] = "video_text"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Read on-screen text in a video over time (Tesseract OCR on frames grouped by identical text "
        "regions). Returns a timeline of {t_start, t_end, text} in seconds, e.g. a caption or a changing "
        "scoreboard, and a 0-1 confidence. mode fast samples ~2 frames/s with one OCR pass (misses brief "
        "captions)."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(_MODE)

    def run(self, path: str, mode: str = "careful") -> Observation:
        info, frames, times = _frames(path, check_mode(mode), max_fps=8.0)

        def neighbours(k: int) -> list[np.ndarray]:  # fast: frames a quarter sample gap either side
            gap = (times[-1] - times[0]) / max(1, len(times) - 1)
            here = int(round(times[k] * info.fps))
            step = max(1, int(round(gap * info.fps / 4)))
            wanted = {i for i in (here - step, here + step) if 0 <= i < info.frame_count}
            return read_video(path, indices=wanted)[1] if wanted else []

        timeline, conf, why = cv_guard(
            text_timeline, frames, times, 1.0 / info.fps, info.duration, mode, neighbours
        )
        text = (
            "; ".join(f"{t['t_start']}-{t['t_end']}s: {t['text']!r}" for t in timeline)
            or "No on-screen text."
        )
        return Observation(
            tool=self.name,
            text=f"{text} (confidence {conf:.2f})",
            data={
                "timeline": timeline,
                "duration_s": info.duration,
                "frames_sampled": len(frames),
                "mode": mode,
                "confidence": conf,
                "confidence_why": why,
            },
        )


class VideoExtractAudio(Tool):
    """Extract a video's audio track to a 16 kHz mono 16-bit WAV (PyAV, whose wheels carry FFmpeg)."""

    name: ClassVar[str] = "video_extract_audio"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Extract the audio track (sound) of a video to a 16 kHz mono WAV file for the audio_* tools. "
        "Returns the WAV's path and duration; says so when the video has no audio track."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(
        {"out_path": {"type": "string", "description": "where to write the WAV (optional)"}}
    )

    def run(self, path: str, out_path: str | None = None) -> Observation:
        src = check_file(path, "video")
        read_video(src, max_frames=1)  # a decodable video first, as every video tool asks
        samples = decode_audio_track(src, EXTRACT_RATE)
        dest = write_wav(output_path(src, "audio", ".wav", out_path), samples, EXTRACT_RATE)
        seconds = samples.size / EXTRACT_RATE
        return Observation(
            tool=self.name,
            text=f"Extracted the {seconds:.2f}s audio track to {dest} (16 kHz mono WAV)",
            data={"out_path": str(dest), "duration_s": round(seconds, 4), "sample_rate": EXTRACT_RATE},
        )
