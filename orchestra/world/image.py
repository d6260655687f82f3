"""Image renderers with exact ground truth: signs/labels, counted coloured shapes, bar and line charts."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from orchestra.io import atomic_write_bytes
from orchestra.world.fonts import FONT_NAMES, font

# Distinct, saturated colours (names are what questions and truth use).
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "green": (35, 155, 55),
    "blue": (35, 75, 215),
    "yellow": (235, 200, 25),
    "orange": (245, 130, 25),
    "purple": (135, 55, 175),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
_BOARDS = (
    ((25, 95, 45), (255, 255, 255)),
    ((25, 55, 130), (255, 255, 255)),
    ((245, 245, 240), (20, 20, 20)),
    ((250, 205, 40), (20, 20, 20)),
    ((150, 30, 30), (255, 255, 255)),
    ((35, 35, 35), (250, 250, 250)),
)


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _degrade(
    rng: np.random.Generator, img: Image.Image, noise: float, blur_max: float, sigma_max: float
) -> tuple[Image.Image, dict[str, float]]:
    """Mild blur, Gaussian pixel noise and (with noise > 0) a JPEG round trip."""
    blur = round(float(rng.uniform(0, blur_max * noise)), 3)
    sigma = round(float(sigma_max * noise), 3)
    quality = int(round(95 - 45 * noise - rng.uniform(0, 5))) if noise > 0 else 100
    if blur > 0.05:
        img = img.filter(ImageFilter.GaussianBlur(blur))
    if sigma > 0:
        arr = np.asarray(img, dtype=np.float32) + rng.normal(0, sigma, (img.height, img.width, 3))
        img = Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "RGB")
    if quality < 100:
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=quality)
        img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return img, {"blur_radius": blur, "noise_sigma": sigma, "jpeg_quality": quality}


def _background(rng: np.random.Generator, size: tuple[int, int], light: bool = True) -> Image.Image:
    w, h = size
    base = rng.integers(200, 246, 3) if light else rng.integers(60, 200, 3)
    top, bottom = base.astype(np.float32), np.clip(base + rng.integers(-25, 26, 3), 0, 255).astype(np.float32)
    ramp = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    arr = np.broadcast_to(top + (bottom - top) * ramp, (h, w, 3))
    return Image.fromarray(np.rint(arr).astype(np.uint8), "RGB")


def _clutter(rng: np.random.Generator, img: Image.Image, k: int) -> None:
    """``k`` background marks (lines, outlines, dots) in random muted colours: a busy real scene."""
    d = ImageDraw.Draw(img)
    w, h = img.size
    for _ in range(k):
        rgb = tuple(int(v) for v in rng.integers(60, 200, 3))
        x0, y0, x1, y1 = (float(v) for v in rng.uniform(0, 1, 4) * (w, h, w, h))
        kind = _int(rng, 0, 2)
        if kind == 0:
            d.line((x0, y0, x1, y1), fill=rgb, width=_int(rng, 1, 3))
        elif kind == 1:
            d.ellipse((min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)), outline=rgb, width=2)
        else:
            r = float(rng.uniform(2, 6))
            d.ellipse((x0 - r, y0 - r, x0 + r, y0 + r), fill=rgb)


def render_sign(
    rng: np.random.Generator, text: str, noise: float, size: tuple[int, int] = (480, 270)
) -> tuple[Image.Image, dict[str, Any]]:
    """A sign board showing ``text`` (one line) in a random font; a higher ``noise`` level gives
    smaller and fainter text, more rotation (up to 20 degrees), background clutter, blur, pixel
    noise and a harsher JPEG round trip."""
    w, h = size
    img = _background(rng, size, light=bool(rng.random() < 0.6))
    _clutter(rng, img, int(round(8 * noise * rng.random())))
    fname = FONT_NAMES[_int(rng, 0, len(FONT_NAMES) - 1)]
    px = _int(rng, int(46 - 24 * noise), int(66 - 30 * noise))
    while px > 20 and font(fname, px).getlength(text) > 0.8 * w:
        px -= 2
    f = font(fname, px)
    board_rgb, ink_rgb = _BOARDS[_int(rng, 0, len(_BOARDS) - 1)]
    fade = round(float(rng.uniform(0, 0.55 * noise)), 3)  # ink blended toward the board colour
    ink = tuple(int(round(i + (b - i) * fade)) for i, b in zip(ink_rgb, board_rgb, strict=True))
    x0, y0, x1, y1 = f.getbbox(text)
    pad_x, pad_y = _int(rng, 14, 28), _int(rng, 10, 22)
    layer = Image.new("RGBA", (x1 - x0 + 2 * pad_x, y1 - y0 + 2 * pad_y), (0, 0, 0, 0))
    d = ImageDraw.Draw(layer)
    d.rounded_rectangle(
        (0, 0, layer.width - 1, layer.height - 1),
        radius=10,
        fill=board_rgb + (255,),
        outline=(90, 90, 90, 255),
        width=2,
    )
    d.text((pad_x - x0, pad_y - y0), text, font=f, fill=ink + (255,))
    angle = round(float(rng.uniform(-30 * noise, 30 * noise)), 2) if noise > 0 else 0.0
    angle = max(-20.0, min(20.0, angle))
    layer = layer.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True)
    cx = (w - layer.width) // 2 + _int(rng, -20, 20) if layer.width < w - 40 else (w - layer.width) // 2
    cy = (h - layer.height) // 2 + _int(rng, -20, 20) if layer.height < h - 40 else (h - layer.height) // 2
    img.paste(layer, (cx, cy), layer)
    img, deg = _degrade(rng, img, noise, blur_max=2.0, sigma_max=20.0)
    truth = {
        "kind": "sign",
        "text": text,
        "font": fname,
        "font_px": px,
        "rotation_deg": angle,
        "ink_fade": fade,
        "level": noise,
        "size": [w, h],
        **deg,
    }
    return img, truth


def _triangle(cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    return [(cx, cy - r), (cx - 0.9 * r, cy + 0.75 * r), (cx + 0.9 * r, cy + 0.75 * r)]


def draw_shape(
    d: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, rgb: tuple[int, int, int]
) -> None:
    """Draw one filled shape of 'radius' ``r`` centred at (cx, cy)."""
    if shape == "circle":
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=rgb)
    elif shape == "square":
        s = 0.85 * r
        d.rectangle((cx - s, cy - s, cx + s, cy + s), fill=rgb)
    else:
        d.polygon(_triangle(cx, cy, r), fill=rgb)


def render_shapes(
    rng: np.random.Generator,
    noise: float,
    size: tuple[int, int] = (400, 300),
    n_colors: int | None = None,
    max_per_color: int = 6,
) -> tuple[Image.Image, dict[str, Any]]:
    """Non-overlapping filled circles/squares/triangles in 3-5 saturated colours on a plain background;
    a higher ``noise`` level packs them closer, makes some smaller, and adds blur, pixel noise and JPEG."""
    w, h = size
    gap, r_lo = 8 - 6 * noise, int(round(13 - 3 * noise))
    names = list(COLORS)
    k = n_colors or _int(rng, 3, 5)
    chosen = [names[i] for i in sorted(rng.choice(len(names), size=k, replace=False).tolist())]
    while True:
        wanted = [(c, SHAPES[_int(rng, 0, 2)]) for c in chosen for _ in range(_int(rng, 1, max_per_color))]
        placed: list[dict[str, Any]] = []
        for color, shape in wanted:
            for _ in range(300):
                r = _int(rng, r_lo, 21)
                cx, cy = _int(rng, r + 6, w - r - 7), _int(rng, r + 6, h - r - 7)
                if all((cx - p["cx"]) ** 2 + (cy - p["cy"]) ** 2 > (r + p["r"] + gap) ** 2 for p in placed):
                    placed.append({"shape": shape, "color": color, "cx": cx, "cy": cy, "r": r})
                    break
            else:
                break
        if len(placed) == len(wanted):
            break
    img = _background(rng, size, light=True)
    d = ImageDraw.Draw(img)
    for p in placed:
        draw_shape(d, p["shape"], p["cx"], p["cy"], p["r"], COLORS[p["color"]])
    img, deg = _degrade(rng, img, noise, blur_max=1.5, sigma_max=16.0)
    counts: dict[str, dict[str, int]] = {}
    for p in placed:
        counts.setdefault(p["color"], {}).setdefault(p["shape"], 0)
        counts[p["color"]][p["shape"]] += 1
    truth = {
        "kind": "shapes",
        "shapes": placed,
        "counts": counts,
        "palette": {c: list(COLORS[c]) for c in chosen},
        "level": noise,
        "size": [w, h],
        **deg,
    }
    return img, truth


def render_chart(
    rng: np.random.Generator,
    noise: float,
    kind: str = "bar",
    labels: list[str] | None = None,
    title: str | None = None,
    size: tuple[int, int] = (560, 380),
) -> tuple[Image.Image, dict[str, Any]]:
    """A bar chart (labels = names) or line chart (labels = years) with every value printed on it; a
    higher ``noise`` level shrinks the picture (down to half size) and adds blur, noise and JPEG."""
    w, h = size
    if labels is None:
        n = _int(rng, 4, 6) if kind == "bar" else _int(rng, 5, 7)
        start = _int(rng, 2008, 2018)
        labels = [str(start + i) for i in range(n)]
    n = len(labels)
    values = sorted(
        rng.choice(np.arange(10, 100), size=n, replace=False).tolist(), key=lambda _: rng.random()
    )
    values = [int(v) for v in values]
    y_max = 100 if max(values) < 90 else 120
    title = title or ("Index score" if kind == "line" else "Survey score")
    img = Image.new("RGB", size, (255, 255, 255))
    d = ImageDraw.Draw(img)
    left, right, top, bottom = 58, w - 20, 72, h - 48
    f_title, f_val, f_lab, f_tick = (
        font("dejavu-sans-bold", 22),
        font("dejavu-sans-bold", 22),
        font("dejavu-sans", 18),
        font("dejavu-sans", 15),
    )
    d.text((w / 2, 12), title, font=f_title, fill=(20, 20, 20), anchor="mt")

    def y_of(v: float) -> float:
        return bottom - (bottom - top) * v / y_max

    ticks = list(range(0, y_max + 1, 20))
    for t in ticks:
        d.line((left, y_of(t), right, y_of(t)), fill=(225, 225, 225), width=1)
        d.text((left - 8, y_of(t)), str(t), font=f_tick, fill=(90, 90, 90), anchor="rm")
    d.line((left, top - 6, left, bottom), fill=(40, 40, 40), width=2)
    d.line((left, bottom, right, bottom), fill=(40, 40, 40), width=2)
    slot = (right - left) / n
    xs = [left + slot * (i + 0.5) for i in range(n)]
    rgb = list(COLORS.values())[_int(rng, 0, len(COLORS) - 1)]
    if kind == "bar":
        for x, v in zip(xs, values, strict=True):
            d.rectangle((x - slot * 0.32, y_of(v), x + slot * 0.32, bottom - 1), fill=rgb)
    else:
        d.line([(x, y_of(v)) for x, v in zip(xs, values, strict=True)], fill=rgb, width=3)
        for x, v in zip(xs, values, strict=True):
            d.ellipse((x - 5, y_of(v) - 5, x + 5, y_of(v) + 5), fill=rgb)
    for x, v, lab in zip(xs, values, labels, strict=True):
        d.text((x, y_of(v) - 8), str(v), font=f_val, fill=(20, 20, 20), anchor="mb")
        d.text((x, bottom + 8), lab, font=f_lab, fill=(20, 20, 20), anchor="mt")
    shrink = round(1.0 - 0.5 * noise * float(rng.uniform(0.4, 1.0)), 3)  # a small screenshot
    if shrink < 1.0:
        img = img.resize((int(w * shrink), int(h * shrink)), Image.Resampling.LANCZOS)
    img, deg = _degrade(rng, img, noise, blur_max=0.8, sigma_max=6.0)
    truth = {
        "kind": "chart",
        "scale": shrink,
        "chart": kind,
        "title": title,
        "labels": list(labels),
        "values": values,
        "y_min": 0,
        "y_max": y_max,
        "y_ticks": ticks,
        "level": noise,
        "size": list(img.size),
        **deg,
    }
    return img, truth


def _clean(img: Image.Image) -> Image.Image:
    """A copy without any carried-over metadata (EXIF, DPI, text)."""
    return Image.frombytes("RGB", img.size, img.convert("RGB").tobytes())


def image_bytes(img: Image.Image, fmt: str, quality: int = 92) -> bytes:
    """PNG or JPEG bytes with no metadata chunks; same pixels give the same bytes."""
    buf = io.BytesIO()
    if fmt == "png":
        _clean(img).save(buf, "PNG", optimize=False, compress_level=6)
    elif fmt in ("jpg", "jpeg"):
        _clean(img).save(buf, "JPEG", quality=quality, optimize=False, progressive=False)
    else:
        raise ValueError(f"unknown image format {fmt!r}")
    return buf.getvalue()


def save_png(img: Image.Image, path: Path) -> None:
    atomic_write_bytes(Path(path), image_bytes(img, "png"))


def save_jpeg(img: Image.Image, path: Path, quality: int = 92) -> None:
    atomic_write_bytes(Path(path), image_bytes(img, "jpeg", quality))
