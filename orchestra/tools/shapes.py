"""Coloured-shape detection: background model, colour naming in CIELAB, contour shape classification."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

# The colour-name table: each name's reference sRGB value. A pixel takes the name of the nearest
# reference in CIELAB (a perceptual space), so "dark red" is still red and light grey is "gray".
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "orange": (245, 140, 25),
    "yellow": (240, 215, 30),
    "green": (40, 160, 60),
    "cyan": (30, 195, 215),
    "blue": (35, 75, 210),
    "purple": (135, 55, 175),
    "pink": (240, 120, 185),
    "brown": (125, 80, 40),
    "black": (25, 25, 25),
    "gray": (128, 128, 128),
    "white": (245, 245, 245),
}
SHAPES = ("circle", "ellipse", "triangle", "square", "rectangle", "pentagon", "hexagon", "star", "cross")


def _lab(bgr: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(bgr.astype(np.float32) / 255.0, cv2.COLOR_BGR2LAB)


_NAMES = list(COLOURS)
_REF_LAB = _lab(np.array([[COLOURS[n][::-1] for n in _NAMES]], dtype=np.uint8))[0]


def colour_name(bgr: tuple[float, float, float] | np.ndarray) -> str:
    """Name of the table colour nearest to one BGR value (CIELAB distance)."""
    lab = _lab(np.asarray(bgr, dtype=np.float32).reshape(1, 1, 3).clip(0, 255).astype(np.uint8))[0, 0]
    return _NAMES[int(np.argmin(((_REF_LAB - lab) ** 2).sum(axis=1)))]


def label_colours(lab: np.ndarray) -> np.ndarray:
    """Index into the colour table for every pixel of a CIELAB image."""
    # channel by channel, summed in the order ``.sum(axis=-1)`` would: the same distances, in
    # contiguous arrays (a strided three-element reduction per pixel is several times slower)
    d = (lab[:, :, 0, None] - _REF_LAB[:, 0]) ** 2
    d += (lab[:, :, 1, None] - _REF_LAB[:, 1]) ** 2
    d += (lab[:, :, 2, None] - _REF_LAB[:, 2]) ** 2
    return d.argmin(axis=2).astype(np.int32)


@dataclass(frozen=True)
class Shape:
    """One detected object: colour, shape, bounding box (x, y, w, h), centre and area in pixels."""

    colour: str
    shape: str
    box: tuple[int, int, int, int]
    centre: tuple[float, float]
    area: float
    purity: float = 1.0  # share of the blob's pixels that carry its colour name
    agree: bool = True  # a second, independent shape reading gave the same name
    margin: float = 1.0  # fast reading: its fill's distance from the nearest decision boundary

    def as_dict(self) -> dict[str, object]:
        return {
            "colour": self.colour,
            "shape": self.shape,
            "box": list(self.box),
            "centre": [round(self.centre[0], 1), round(self.centre[1], 1)],
            "area": round(self.area),
        }


def background_lab(lab: np.ndarray) -> np.ndarray:
    """The background colour: the median CIELAB value of the image border."""
    border = np.concatenate([lab[0], lab[-1], lab[:, 0], lab[:, -1]])
    return np.median(border, axis=0)


def radial_corners(cnt: np.ndarray) -> tuple[int, float, np.ndarray]:
    """Corners of a convex outline as peaks of its radius-vs-angle profile about the centroid.

    Returns (corner count, radial spread = (max - min) / mean, relative harmonic amplitudes of the
    profile). A regular n-gon's profile has n peaks and a strong n-th harmonic; a circle's is flat; an
    ellipse's has two peaks.
    """
    m = cv2.moments(cnt)
    cx, cy = m["m10"] / max(m["m00"], 1e-9), m["m01"] / max(m["m00"], 1e-9)
    pts = cnt.reshape(-1, 2).astype(np.float64)
    seg = np.roll(pts, -1, axis=0) - pts
    steps = np.maximum(1, (np.hypot(seg[:, 0], seg[:, 1]) / 0.5).astype(int))
    owner = np.repeat(np.arange(len(pts)), steps)  # each segment cut into its ``steps`` half-pixel pieces
    frac = (np.arange(len(owner)) - np.repeat(np.cumsum(steps) - steps, steps)) / steps[owner]
    pts = pts[owner] + frac[:, None] * seg[owner]
    ang = (np.degrees(np.arctan2(pts[:, 1] - cy, pts[:, 0] - cx)) + 360.0) % 360.0
    rad = np.hypot(pts[:, 0] - cx, pts[:, 1] - cy)
    bins = np.full(360, -np.inf)
    np.maximum.at(bins, ang.astype(int) % 360, rad)  # the farthest outline point per degree
    ok = np.isfinite(bins)
    idx = np.arange(360)
    prof = np.interp(idx, np.concatenate([idx[ok] - 360, idx[ok], idx[ok] + 360]), np.tile(bins[ok], 3))
    kernel = np.exp(-0.5 * (np.arange(-9, 10) / 3.0) ** 2)
    prof = np.convolve(np.tile(prof, 3), kernel / kernel.sum(), mode="same")[360:720]
    spread = float((prof.max() - prof.min()) / max(prof.mean(), 1e-9))
    depth = prof.max() - prof.min()
    around = np.lib.stride_tricks.sliding_window_view(np.concatenate([prof[-12:], prof, prof[:12]]), 25)
    peaks = np.flatnonzero((prof >= around.max(axis=1)) & (prof > np.roll(prof, 1))).tolist()
    while len(peaks) > 1:  # drop the least prominent peak until every peak stands out
        dips = [
            prof[np.arange(p, q + (360 if q <= p else 0)) % 360].min()
            for p, q in zip(peaks, peaks[1:] + peaks[:1], strict=True)
        ]
        prom = [prof[p] - max(dips[k - 1], dips[k]) for k, p in enumerate(peaks)]
        k = int(np.argmin(prom))
        if prom[k] >= 0.15 * depth:
            break
        peaks.pop(k)
    harmonics = np.abs(np.fft.rfft(prof)) / len(prof) / max(prof.mean(), 1e-9) * 2
    return len(peaks), spread, harmonics


def classify_contour(cnt: np.ndarray) -> str:
    """Shape name from contour geometry: solidity for stars/crosses, radial-profile corner count for
    polygons, minimum-area-rectangle aspect for square vs rectangle and circle vs ellipse."""
    area = cv2.contourArea(cnt)
    hull = cv2.convexHull(cnt)
    solidity = area / max(cv2.contourArea(hull), 1.0)
    (_, _), (rw, rh), _ = cv2.minAreaRect(cnt)
    aspect = max(rw, rh) / max(min(rw, rh), 1.0)
    if solidity < 0.8:
        # concave: count the deep notches: a five-point star has 5, a plus/cross 4
        simple = cv2.approxPolyDP(cnt, 1.0, True)
        defects = cv2.convexityDefects(simple, cv2.convexHull(simple, returnPoints=False))
        size = np.sqrt(max(rw * rh, 1.0))
        deep = 0 if defects is None else int(np.sum(defects.reshape(-1, 4)[:, 3] / 256.0 > 0.08 * size))
        return "cross" if deep == 4 else "star"
    corners, spread, harm = radial_corners(hull)
    # a hexagon's outline has a clear 6th harmonic; a small digitised circle has a weak, mixed one
    hexlike = corners == 6 and harm[6] > 0.018 and harm[6] > 1.5 * max(harm[2:6].max(), harm[7:13].max())
    fill = area / max(rw * rh, 1.0)
    if spread < 0.07 or (spread < 0.13 and not hexlike):
        return "circle"
    if fill > 0.88:  # fills its minimum-area box: a (rotated) square or rectangle
        return "square" if aspect < 1.2 else "rectangle"
    if corners == 3:
        return "triangle"
    if corners == 4:
        return "square" if aspect < 1.2 else "rectangle"
    if corners == 5:
        return "pentagon"
    if corners == 6:
        return "hexagon"
    return "ellipse" if corners == 2 or aspect >= 1.2 else "circle"


def parts_of(share: np.ndarray, bg_name: int) -> list[int]:
    """The colours that each cover at least 15 % of a blob (not the background's name)."""
    return [int(c) for c in np.argsort(-share) if share[c] >= 0.15 and c != bg_name]


def _same_shape(a: str, b: str) -> bool:
    """Two shape readings agree (square/rectangle and circle/ellipse count as near enough)."""
    near = {"rectangle": "square", "ellipse": "circle"}
    return near.get(a, a) == near.get(b, b)


def _blobs(fg: np.ndarray, min_area: float) -> Iterator[tuple[int, int, int, int, np.ndarray, float]]:
    """The foreground's connected blobs of at least ``min_area`` pixels: ``(x, y, w, h, mask, area)``
    with the mask cropped to the blob's bounding box."""
    n, comp, stats, _ = cv2.connectedComponentsWithStats(fg, connectivity=8)
    for i in range(1, n):
        if stats[i, cv2.CC_STAT_AREA] < min_area:
            continue
        x, y, bw, bh = (int(stats[i, k]) for k in range(4))
        yield (
            x,
            y,
            bw,
            bh,
            (comp[y : y + bh, x : x + bw] == i).astype(np.uint8),
            float(stats[i, cv2.CC_STAT_AREA]),
        )


def detect_shapes(bgr: np.ndarray, min_area_frac: float = 0.0004) -> list[Shape]:
    """Find coloured objects on a background and name their colour and shape.

    Pixels farther than 25 Lab units from the background are foreground; each connected blob is
    named by the majority colour of its interior, and a blob made of several colours (touching
    shapes) is split into one object per colour that covers enough of it.
    """
    h, w = bgr.shape[:2]
    smooth = cv2.medianBlur(bgr, 5)
    smooth = cv2.bilateralFilter(smooth, 7, 40, 7)
    lab = _lab(smooth)
    bg = background_lab(lab)
    dist = np.sqrt(((lab - bg[None, None, :]) ** 2).sum(axis=2))
    fg = (dist > 25).astype(np.uint8)
    fg = cv2.morphologyEx(fg, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    fg = cv2.morphologyEx(fg, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
    min_area = max(40.0, min_area_frac * h * w)
    labels = label_colours(lab)
    bg_name = int(label_colours(bg.reshape(1, 1, 3).astype(np.float32))[0, 0])
    out: list[Shape] = []
    for x, y, bw, bh, blob, _ in _blobs(fg, min_area):
        core = cv2.erode(blob, np.ones((5, 5), np.uint8)) if min(bw, bh) > 12 else blob
        names = labels[y : y + bh, x : x + bw][core > 0]
        if names.size == 0:
            continue
        counts = np.bincount(names, minlength=len(_NAMES))
        share = counts / counts.sum()
        parts = parts_of(share, bg_name) or [int(np.argmax(counts))]
        purity = float(sum(share[c] for c in parts))  # the rest of the core is unexplained colour
        for c in parts:
            if len(parts) == 1:
                mask = blob
            else:
                mask = ((labels[y : y + bh, x : x + bw] == c) & (blob > 0)).astype(np.uint8)
                mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, np.ones((5, 5), np.uint8))
            contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
            for cnt in contours:
                area = cv2.contourArea(cnt)
                if area < min_area:
                    continue
                cnt = cnt + np.array([[x, y]])
                m = cv2.moments(cnt)
                bx, by, bww, bhh = cv2.boundingRect(cnt)
                name = classify_contour(cnt)
                out.append(
                    Shape(
                        colour=_NAMES[c],
                        shape=name,
                        box=(bx, by, bww, bhh),
                        centre=(m["m10"] / m["m00"], m["m01"] / m["m00"]),
                        area=float(area),
                        purity=purity,
                        agree=_same_shape(name, fill_margin(cnt)[0]),
                    )
                )
    out.sort(key=lambda s: (s.box[1] // 20, s.box[0]))
    return out


def fill_margin(cnt: np.ndarray) -> tuple[str, float]:
    """Shape name from how much of its minimum-area rectangle an outline fills (a square ~1, a
    circle ~0.79, a triangle ~0.5; concave outlines are stars) and the distance of that fill from
    the nearest decision boundary (0.9 and 0.65): the reading's margin."""
    area = cv2.contourArea(cnt)
    if area / max(cv2.contourArea(cv2.convexHull(cnt)), 1.0) < 0.8:
        return "star", 0.0
    (_, _), (rw, rh), _ = cv2.minAreaRect(cnt)
    fill = area / max(rw * rh, 1.0)
    long = max(rw, rh) / max(min(rw, rh), 1.0) >= 1.2
    margin = float(min(abs(fill - 0.9), abs(fill - 0.65)))
    if fill >= 0.9:
        return ("rectangle" if long else "square"), margin
    if fill >= 0.65:
        return ("ellipse" if long else "circle"), margin
    return "triangle", margin


def detect_shapes_fast(bgr: np.ndarray, min_area_frac: float = 0.0004) -> list[Shape]:
    """One global threshold (30 Lab units from the border's median colour) on the raw image, no
    smoothing or morphology, one object per connected blob named by its mean colour and
    :func:`fill_margin`. Touching shapes stay merged and noise specks can break a blob apart."""
    h, w = bgr.shape[:2]
    lab = _lab(bgr)
    dist = np.sqrt(((lab - background_lab(lab)[None, None, :]) ** 2).sum(axis=2))
    fg = (dist > 30).astype(np.uint8)
    out: list[Shape] = []
    for x, y, bw, bh, blob, area in _blobs(fg, max(40.0, min_area_frac * h * w)):
        contours, _ = cv2.findContours(blob, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cnt = max(contours, key=cv2.contourArea) + np.array([[x, y]])
        pix = bgr[y : y + bh, x : x + bw][blob > 0]
        colour = colour_name(pix.mean(axis=0))
        names = label_colours(_lab(pix.reshape(1, -1, 3)))[0]
        shape, margin = fill_margin(cnt)
        m = cv2.moments(cnt)
        out.append(
            Shape(
                colour=colour,
                shape=shape,
                box=(x, y, bw, bh),
                centre=(m["m10"] / max(m["m00"], 1e-9), m["m01"] / max(m["m00"], 1e-9)),
                area=area,
                purity=float(np.mean(names == _NAMES.index(colour))),
                margin=margin,
            )
        )
    out.sort(key=lambda s: (s.box[1] // 20, s.box[0]))
    return out
