"""Video renderer (MP4 via OpenCV, mp4v): objects that appear, move and change colour at known times,
plus on-screen text (a caption or a scoreboard) with a known timeline. A higher difficulty level
makes the file harder the way a real clip is hard: events off the whole-second grid (some late in
the clip), faster motion, a briefer caption in smaller, lower-contrast type, more sensor noise."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from orchestra.errors import WorldError
from orchestra.world.fonts import font
from orchestra.world.image import COLORS, SHAPES, draw_shape

BAND = 38  # height of the text band (caption at the bottom, scoreboard at the top)


def _event_times(seconds: float) -> list[float]:
    whole = [float(s) for s in range(1, int(math.ceil(seconds))) if s <= seconds - 0.5]
    return whole or [round(seconds / 2 * 2) / 2 or 0.5]


def _jitter(rng: np.random.Generator, t: float, level: float, seconds: float, fps: int) -> float:
    """``t`` shifted later by up to 0.7 s x level, on the frame grid, at least 3 frames before the end."""
    shift = rng.uniform(0.0, 0.7 * level)
    return float(min(round((t + shift) * fps) / fps, max(t, (round(seconds * fps) - 3) / fps)))


def _plan(
    rng: np.random.Generator,
    size: tuple[int, int],
    seconds: float,
    band_top: bool,
    n_objects: int,
    level: float,
    fps: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    w, h = size
    times = _event_times(seconds)
    move_s = max(3.0 / fps, 1.0 - 0.75 * level)  # faster motion at higher levels
    shapes = [SHAPES[i] for i in rng.permutation(len(SHAPES))[:n_objects].tolist()]
    colors = [list(COLORS)[i] for i in rng.permutation(len(COLORS)).tolist()]
    y_lo, y_hi = (BAND + 4, h - 4) if band_top else (4, h - BAND - 4)
    lane = w / n_objects
    objects, events = [], []
    for k, shape in enumerate(shapes):
        r = int(rng.integers(10, 15))
        x0 = int(lane * k + rng.integers(r + 2, max(r + 3, int(lane) - r - 2)))
        y0 = int(rng.integers(y_lo + r, max(y_lo + r + 1, y_hi - r)))
        obj = {"id": shape, "shape": shape, "color": colors[k], "r": r, "x": x0, "y": y0, "visible_from": 0.0}
        spare = [c for c in colors[n_objects:] + colors[:n_objects] if c != colors[k]]
        plan = rng.permutation(["appear", "color_change", "move", "disappear"]).tolist()
        kinds = sorted(
            plan[: int(rng.integers(1, 3))], key=["appear", "move", "color_change", "disappear"].index
        )
        slots = sorted(rng.choice(times, size=min(len(kinds), len(times)), replace=False).tolist())
        color, x, y = colors[k], x0, y0
        for kind, slot in zip(kinds, slots, strict=False):
            t = _jitter(rng, slot, level, seconds, fps)
            if kind == "disappear" and obj["visible_from"] > 0:  # a brief visit at higher levels
                t = min(t, round((obj["visible_from"] + max(0.5, 1.5 * (1.0 - level))) * fps) / fps)
            ev: dict[str, Any] = {"t": t, "kind": kind, "object": shape}
            if kind == "appear":
                obj["visible_from"] = float(t)
            elif kind == "color_change":
                color = spare[int(rng.integers(len(spare)))]
            elif kind == "move":
                nx = int(lane * k + rng.integers(r + 2, max(r + 3, int(lane) - r - 2)))
                ny = int(rng.integers(y_lo + r, max(y_lo + r + 1, y_hi - r)))
                if rng.random() < level:  # a long, fast sweep to the far side
                    ny = y_hi - r - 1 if y < (y_lo + y_hi) / 2 else y_lo + r + 1
                ev.update({"from": [x, y], "to": [nx, ny], "t_end": round(min(t + move_s, seconds), 3)})
                x, y = nx, ny
            ev["color"] = color
            events.append(ev)
        objects.append(obj)
    events.sort(key=lambda e: (e["t"], e["object"]))
    return objects, events


def _state(obj: dict[str, Any], events: list[dict[str, Any]], t: float) -> tuple[bool, str, float, float]:
    visible = t >= obj["visible_from"]
    color, x, y = obj["color"], float(obj["x"]), float(obj["y"])
    for ev in events:
        if ev["object"] != obj["id"] or ev["t"] > t:
            continue
        if ev["kind"] == "disappear":
            visible = False
        elif ev["kind"] == "color_change":
            color = ev["color"]
        elif ev["kind"] == "move":
            a = min(1.0, (t - ev["t"]) / max(ev["t_end"] - ev["t"], 1e-9))
            x = ev["from"][0] + a * (ev["to"][0] - ev["from"][0])
            y = ev["from"][1] + a * (ev["to"][1] - ev["from"][1])
    return visible, color, x, y


def _scoreboard(rng: np.random.Generator, seconds: float, level: float, fps: int) -> list[dict[str, Any]]:
    home, away = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    times = _event_times(seconds)
    slots = sorted(rng.choice(times, size=min(len(times), int(rng.integers(1, 3))), replace=False).tolist())
    changes = [_jitter(rng, float(t), level, seconds, fps) for t in slots]
    timeline, start = [], 0.0
    for t in changes:
        timeline.append(
            {"t_start": start, "t_end": float(t), "text": f"{home} - {away}", "role": "scoreboard"}
        )
        if rng.random() < 0.5:
            home += 1
        else:
            away += 1
        start = float(t)
    timeline.append(
        {"t_start": start, "t_end": float(seconds), "text": f"{home} - {away}", "role": "scoreboard"}
    )
    return timeline


def render_video(
    rng: np.random.Generator,
    noise: float,
    path: Path,
    size: tuple[int, int] = (192, 144),
    fps: int = 8,
    seconds: float = 4.0,
    text_mode: str = "caption",
    caption: str | None = None,
    n_objects: int | None = None,
    require: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Write an MP4 to ``path`` and return its truth: objects, events, text timeline, frame count, fps.

    ``text_mode`` is "caption" (``caption`` shown at the bottom from a known time to the end),
    "scoreboard" (a score at the top that changes at known times) or "none". ``require`` names event
    kinds ("appear", "color_change", ...) that must happen at least once.
    """
    import cv2

    w, h = size
    level = float(np.clip(noise, 0.0, 1.0))
    n_frames = int(round(seconds * fps))
    for _ in range(100):
        objects, events = _plan(
            rng, size, seconds, text_mode == "scoreboard", n_objects or int(rng.integers(2, 4)), level, fps
        )
        if all(any(e["kind"] == k for e in events) for k in require):
            break
    else:
        raise WorldError(f"cannot plan a video with events {require}")
    text: list[dict[str, Any]] = []
    if text_mode == "scoreboard":
        text = _scoreboard(rng, seconds, level, fps)
    elif text_mode == "caption":
        if not caption:
            raise WorldError("caption mode needs a caption text")
        start = _jitter(rng, float(rng.choice([0.0] + _event_times(seconds)[:1])), level, seconds, fps)
        shown = max(0.4, (seconds - start) * (1.0 - 0.9 * level))  # briefer at higher levels
        end = float(min(seconds, round((start + shown) * fps) / fps))
        text = [{"t_start": start, "t_end": end, "text": caption, "role": "caption"}]
    elif text_mode != "none":
        raise WorldError(f"unknown text_mode {text_mode!r}")
    bg = tuple(int(v) for v in rng.integers(205, 246, 3))
    sigma = round(6.0 * level, 3)  # mild: mp4v spends its whole bitrate on heavier grain
    band_fill = (25 + int(90 * level), 25 + int(90 * level), 35 + int(90 * level))
    ink = (255 - int(60 * level),) * 3
    px = int(round(30 - 10 * level))
    f_text = font("dejavu-sans-bold", px)
    for item in text:
        while px > 14 and f_text.getlength(item["text"]) > w - 12:
            px -= 1
            f_text = font("dejavu-sans-bold", px)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
    if not writer.isOpened():
        raise WorldError(f"OpenCV cannot open an mp4v writer for {tmp}")
    try:
        for i in range(n_frames):
            t = i / fps
            img = Image.new("RGB", size, bg)
            d = ImageDraw.Draw(img)
            for obj in objects:
                visible, color, x, y = _state(obj, events, t)
                if visible:
                    draw_shape(d, obj["shape"], x, y, obj["r"], COLORS[color])
            for item in text:
                if item["t_start"] <= t < item["t_end"]:
                    y0 = 0 if item["role"] == "scoreboard" else h - BAND
                    d.rectangle((0, y0, w, y0 + BAND), fill=band_fill)
                    d.text((w / 2, y0 + BAND / 2), item["text"], font=f_text, fill=ink, anchor="mm")
            frame = np.asarray(img, dtype=np.uint8)
            if sigma > 0:
                frame = np.clip(np.rint(frame + rng.normal(0, sigma, frame.shape)), 0, 255).astype(np.uint8)
            writer.write(np.ascontiguousarray(frame[:, :, ::-1]))
    except BaseException:
        writer.release()
        tmp.unlink(missing_ok=True)
        raise
    writer.release()
    if not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        raise WorldError(f"OpenCV wrote no video to {tmp}")
    os.replace(tmp, path)
    return {
        "kind": "video",
        "codec": "mp4v",
        "level": level,
        "fps": fps,
        "frame_count": n_frames,
        "duration_s": n_frames / fps,
        "size": [w, h],
        "background": list(bg),
        "noise_sigma": sigma,
        "text_px": px,
        "objects": objects,
        "events": events,
        "text": text,
    }
