"""Bar and line chart reading: axes, OCR'd tick labels -> pixel-to-value map, bar tops and line points."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from orchestra.tools.media import MediaError
from orchestra.tools.ocr import OcrWord, tesseract_words

_NUM = re.compile(r"^-?\d+(?:[.,]\d+)?%?$")
_UP = 3.0  # OCR upscale for the small chart text


@dataclass
class Chart:
    """What was read off a chart: kind, title, and one (label, value) per bar or line point."""

    kind: str
    title: str
    labels: list[str]
    values: list[float]
    geometry_values: list[float]
    printed_values: list[float | None]
    axis: dict[str, float] = field(default_factory=dict)
    confidences: list[float] = field(default_factory=list)

    @property
    def confidence(self) -> float:
        """The weakest value's confidence (0-1)."""
        return min(self.confidences, default=0.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "labels": self.labels,
            "values": self.values,
            "geometry_values": self.geometry_values,
            "printed_values": self.printed_values,
            "axis": self.axis,
            "value_confidences": self.confidences,
            "confidence": self.confidence,
        }


def geometry_confidence(a: float, rms: float, value: float) -> float:
    """Confidence (0-1) that a value read off the geometry is within 2 %: the 2 % tolerance over the
    value's uncertainty (|a| x (tick-fit rms residual (+) 0.5 px edge quantisation)), mapped
    linearly from 1.5 (-> 0) to 4 (-> 1)."""
    sigma = abs(a) * float(np.hypot(rms, 0.5))
    return float(np.clip((0.02 * abs(value) / max(sigma, 1e-9) - 1.5) / 2.5, 0.0, 1.0))


def _ocr(
    gray: np.ndarray, x0: int, y0: int, x1: int, y1: int, psm: int, digits: bool, up: float = _UP
) -> list[OcrWord]:
    """OCR one region, upscaled by ``up``; word boxes come back in full-image pixels."""
    x0, y0 = max(0, x0), max(0, y0)
    x1, y1 = min(gray.shape[1], x1), min(gray.shape[0], y1)
    if x1 - x0 < 4 or y1 - y0 < 4:
        return []
    crop = gray[y0:y1, x0:x1]
    if up != 1.0:
        crop = cv2.resize(crop, None, fx=up, fy=up, interpolation=cv2.INTER_CUBIC)
    crop = cv2.copyMakeBorder(crop, 12, 12, 12, 12, cv2.BORDER_REPLICATE)
    words = tesseract_words(crop, psm=psm, whitelist="0123456789.,-%" if digits else None)
    return [
        OcrWord(
            w.text,
            w.conf,
            int(x0 + (w.left - 12) / up),
            int(y0 + (w.top - 12) / up),
            int(w.width / up),
            int(w.height / up),
            w.line,
        )
        for w in words
    ]


def _number(text: str) -> float | None:
    t = text.strip().rstrip("%").replace(",", "")
    return float(t) if _NUM.match(text.strip()) and t not in ("", "-") else None


def find_axes(gray: np.ndarray) -> tuple[int, int, int]:
    """(x of the y-axis, y of the x-axis, top of the y-axis) from the longest dark straight lines."""
    h, w = gray.shape
    dark = (gray < 110).astype(np.uint8)
    horiz = cv2.morphologyEx(dark, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (w // 3, 1)))
    vert = cv2.morphologyEx(dark, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (1, h // 3)))
    rows, cols = np.flatnonzero(horiz.sum(axis=1)), np.flatnonzero(vert.sum(axis=0))
    if len(rows) == 0 or len(cols) == 0:
        raise MediaError("no chart axes found (need a dark horizontal and vertical axis line)")
    x_axis_y = int(rows.max())  # the lowest long horizontal line
    y_axis_x = int(cols.min())  # the leftmost long vertical line
    ys = np.flatnonzero(vert[:, y_axis_x])
    return y_axis_x, x_axis_y, int(ys.min())


def _snap(gray: np.ndarray, axis_x: int, y: float, lo: int, hi: int) -> float:
    """Move a tick label's centre onto the tick mark or grid line beside it (a darker row), if any."""
    strip = gray[:, axis_x + 2 : axis_x + 14].astype(np.float64).mean(axis=1)
    left = gray[:, max(0, axis_x - 7) : max(1, axis_x - 1)].astype(np.float64).mean(axis=1)
    best, best_y = 0.0, y
    for yy in range(max(lo, int(y) - 6), min(hi, int(y) + 7)):
        for prof in (strip, left):
            around = np.median(prof[max(0, yy - 8) : yy + 9])
            if around - prof[yy] > max(best, 8.0):
                best, best_y = around - prof[yy], float(yy)
    return best_y


def strip_axes(gray: np.ndarray, axis_x: int, axis_y: int) -> np.ndarray:
    """The chart with both axis lines and everything dark joined to them (tick marks) painted white,
    so tick labels are read without a stray '-' beside them."""
    dark = (gray < 110).astype(np.uint8)
    n, lab = cv2.connectedComponents(dark, connectivity=8)
    on_axis = np.unique(np.concatenate([lab[:, axis_x], lab[axis_y, :]]))
    out = gray.copy()
    out[np.isin(lab, on_axis[on_axis > 0])] = 255
    return out


def value_map(gray: np.ndarray, axis_x: int, axis_y: int, top: int) -> tuple[float, float, int, float]:
    """Fit value = a * y + b from the OCR'd y-tick labels left of the axis; returns (a, b, n ticks,
    rms residual of the kept ticks in pixels)."""
    words = _ocr(strip_axes(gray, axis_x, axis_y), 0, top - 15, axis_x - 1, axis_y + 15, psm=11, digits=True)
    pts = [
        (_snap(gray, axis_x, w.cy, top - 10, axis_y + 3), v)
        for w in words
        if (v := _number(w.text)) is not None and w.conf > 30
    ]
    if len(pts) < 2:
        raise MediaError(f"could not read the y-axis tick labels ({len(pts)} found, need 2)")
    ys, vs = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    keep = np.ones(len(pts), bool)
    for _ in range(3):  # drop misread ticks: refit without the worst outlier while it is off
        a, b = np.polyfit(ys[keep], vs[keep], 1)
        err = np.abs(a * ys + b - vs)
        span = max(vs[keep].max() - vs[keep].min(), 1e-9)
        worst = int(np.argmax(np.where(keep, err, -1)))
        if keep.sum() <= 2 or err[worst] < 0.02 * span:
            break
        keep[worst] = False
    return _checked_fit(a, b, ys[keep], vs[keep])


def _checked_fit(a: float, b: float, ys: np.ndarray, vs: np.ndarray) -> tuple[float, float, int, float]:
    if a >= 0:
        raise MediaError("y-axis tick labels do not increase upwards; cannot map pixels to values")
    rms = float(np.sqrt(np.mean(((a * ys + b - vs) / a) ** 2))) if len(ys) > 2 else 1.0
    return float(a), float(b), len(ys), rms


def _series_mask(bgr: np.ndarray) -> np.ndarray:
    hsv = cv2.cvtColor(bgr, cv2.COLOR_BGR2HSV)
    return ((hsv[:, :, 1] > 70) & (hsv[:, :, 2] > 50)).astype(np.uint8)


def _edge_top(gray_col: np.ndarray, y_guess: int) -> float:
    """Sub-pixel top edge of a bar: where a column crosses halfway between background and bar."""
    lo, hi = max(0, y_guess - 4), min(len(gray_col) - 1, y_guess + 4)
    bg, fill = float(np.median(gray_col[max(0, y_guess - 12) : max(1, y_guess - 5)])), float(gray_col[hi])
    half = (bg + fill) / 2
    for y in range(lo, hi):
        a, b = float(gray_col[y]), float(gray_col[y + 1])
        if (a - half) * (b - half) <= 0 and a != b:
            return y + (a - half) / (a - b) + 0.5
    return float(y_guess)


def read_chart(bgr: np.ndarray) -> Chart:
    """Read a bar or line chart: each category's value from geometry, and the printed value when one
    is printed next to the bar top or point and agrees with the geometry within 4 % of the axis span."""
    gray = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    h, w = gray.shape
    axis_x, axis_y, top = find_axes(gray)
    a, b, nticks, rms = value_map(gray, axis_x, axis_y, top)
    span = abs(a) * (axis_y - top)
    mask = _series_mask(bgr)
    mask[: max(0, top - 10)] = 0
    mask[axis_y - 1 :] = 0
    mask[:, : axis_x + 2] = 0
    n, lab, st, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    bars = [
        i
        for i in range(1, n)
        if st[i, 2] >= 8 and st[i, 1] + st[i, 3] >= axis_y - 4 and st[i, 4] > 0.7 * st[i, 2] * st[i, 3]
    ]
    points: list[tuple[float, float, int, int]] = []  # (x centre, y of value, x0, x1)
    if bars:
        kind = "bar"
        for i in sorted(bars, key=lambda i: st[i, 0]):
            x0, bw = int(st[i, 0]), int(st[i, 2])
            cols = range(x0 + bw // 4, x0 + bw - bw // 4)
            tops = [_edge_top(gray[:, c], int(np.flatnonzero(lab[:, c] == i).min())) for c in cols]
            points.append((x0 + bw / 2.0, float(np.median(tops)), x0, x0 + bw))
    else:
        kind = "line"
        cats = _ocr(
            strip_axes(gray, axis_x, axis_y), 0, axis_y + 2, w, min(h, axis_y + 45), psm=11, digits=False
        )
        xs = sorted(wd.cx for wd in cats if wd.cx > axis_x)
        if not xs:
            raise MediaError("line chart without readable category labels under the x-axis")
        dt = cv2.distanceTransform(mask, cv2.DIST_L2, 5)
        for x in xs:
            c0, c1 = max(0, int(x) - 6), min(w, int(x) + 7)
            win = dt[:, c0:c1]
            if win.max() >= 2.5:  # a marker: the thickest spot near the label's x
                ys, xs_ = np.nonzero(win >= win.max() - 0.75)
                points.append((c0 + float(xs_.mean()), float(ys.mean()), int(x) - 15, int(x) + 15))
            elif np.any(mask[:, int(x)]):  # a bare line: its centre row in the label's column
                rows = np.flatnonzero(mask[:, int(x)])
                points.append((x, float(rows.mean()), int(x) - 15, int(x) + 15))
    if not points:
        raise MediaError("no bars or line points found in the plot area")
    cleaned = gray.copy()
    cleaned[mask > 0] = 255
    under = cats if kind == "line" else None
    labels = _category_labels(
        strip_axes(gray, axis_x, axis_y),
        axis_y,
        [p[0] for p in points],
        [(p[2], p[3]) for p in points],
        under,
    )
    # printed values: one OCR pass over the plot with the series painted out, each number given to
    # the bar top / point just below it
    plot_words = _ocr(cleaned, axis_x + 2, max(0, top - 40), w, axis_y - 1, psm=11, digits=True)
    numbers = [(wd, v) for wd in plot_words if (v := _number(wd.text)) is not None and wd.conf > 30]
    geom, printed, final, confs = [], [], [], []
    for _, y, x0, x1 in points:
        g = a * y + b
        pad = max(6, (x1 - x0) // 2)
        nums = [v for wd, v in numbers if x0 - pad <= wd.cx <= x1 + pad and y - 45 <= wd.cy <= y]
        if not nums:  # a closer look at just the space above this bar / point
            words = _ocr(cleaned, int(x0 - pad), int(y - 42), int(x1 + pad), int(y - 2), psm=7, digits=True)
            nums = [v for wd in words if (v := _number(wd.text)) is not None]
        p = min(nums, key=lambda v: abs(v - g)) if nums else None
        geom.append(round(g, 2))
        printed.append(p)
        agree = p is not None and abs(p - g) <= 0.04 * span
        final.append(p if agree else round(g, 2))
        confs.append(1.0 if agree else round(geometry_confidence(a, rms, g), 3))
    title_words = _ocr(gray, 0, 0, w, max(top - 12, 5), psm=6, digits=False) if top > 20 else []
    title = " ".join(wd.text for wd in title_words if wd.conf > 40)
    return Chart(
        kind=kind,
        title=title,
        labels=labels,
        values=final,
        geometry_values=geom,
        printed_values=printed,
        axis=_axis(axis_x, axis_y, a, b, nticks, rms),
        confidences=confs,
    )


def _axis(axis_x: int, axis_y: int, a: float, b: float, nticks: int, rms: float) -> dict[str, Any]:
    """What a reading says of its axes: where they are, the tick fit (value = a * row + b)."""
    return {
        "x_axis_y": axis_y,
        "y_axis_x": axis_x,
        "value_per_px": round(-a, 5),
        "value_at_axis": round(a * axis_y + b, 3),
        "ticks_read": nticks,
        "tick_rms_px": round(rms, 2),
    }


def read_chart_fast(bgr: np.ndarray) -> Chart:
    """Read a chart from its geometry alone, cheaply: one OCR pass over the y-tick labels at the
    native scale (no axis stripping, tick snapping or outlier refit), each bar's top as the first
    series row in its centre column (no sub-pixel edge), line points as the series centre under
    each category label; printed values are not read."""
    gray = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    h, w = gray.shape
    axis_x, axis_y, top = find_axes(gray)
    words = _ocr(gray, 0, top - 15, axis_x - 1, axis_y + 15, psm=11, digits=True, up=1.0)
    pts = [(wd.cy, v) for wd in words if (v := _number(wd.text)) is not None and wd.conf > 30]
    if len(pts) < 2:
        raise MediaError(f"could not read the y-axis tick labels ({len(pts)} found, need 2)")
    ys, vs = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    a, b, nticks, rms = _checked_fit(*np.polyfit(ys, vs, 1), ys, vs)
    mask = _series_mask(bgr)
    mask[: max(0, top - 10)] = 0
    mask[axis_y - 1 :] = 0
    mask[:, : axis_x + 2] = 0
    n, lab, st, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    bars = [i for i in range(1, n) if st[i, 2] >= 8 and st[i, 1] + st[i, 3] >= axis_y - 4]
    bars = [i for i in bars if st[i, 4] > 0.7 * st[i, 2] * st[i, 3]]
    under = _ocr(gray, 0, axis_y + 2, w, min(h, axis_y + 45), psm=11, digits=False, up=1.0)
    points: list[tuple[float, float, int, int]] = []
    if bars:
        kind = "bar"
        for i in sorted(bars, key=lambda i: st[i, 0]):
            x0, bw = int(st[i, 0]), int(st[i, 2])
            points.append(
                (x0 + bw / 2.0, float(np.flatnonzero(lab[:, x0 + bw // 2] == i).min()), x0, x0 + bw)
            )
    else:
        kind = "line"
        for x in sorted(wd.cx for wd in under if wd.cx > axis_x):
            rows = np.flatnonzero(mask[:, int(x)])
            if rows.size:
                points.append((x, float(rows.mean()), int(x) - 15, int(x) + 15))
    if not points:
        raise MediaError("no bars or line points found in the plot area")
    labels = _category_labels(gray, axis_y, [p[0] for p in points], [(p[2], p[3]) for p in points], under)
    geom = [round(a * y + b, 2) for _, y, _, _ in points]
    return Chart(
        kind=kind,
        title="",
        labels=labels,
        values=geom,
        geometry_values=geom,
        printed_values=[None] * len(geom),
        axis=_axis(axis_x, axis_y, a, b, nticks, rms),
        confidences=[round(geometry_confidence(a, rms, g), 3) for g in geom],
    )


def _category_labels(
    gray: np.ndarray,
    axis_y: int,
    xs: list[float],
    spans: list[tuple[int, int]],
    words: list[OcrWord] | None = None,
) -> list[str]:
    """The text under the x-axis nearest each bar/point (words grouped by their nearest x)."""
    if words is None:
        words = _ocr(
            gray, 0, axis_y + 2, gray.shape[1], min(gray.shape[0], axis_y + 45), psm=11, digits=False
        )
    groups: list[list[OcrWord]] = [[] for _ in xs]
    for wd in words:
        k = int(np.argmin([abs(wd.cx - x) for x in xs]))
        slot = max(spans[k][1] - spans[k][0], 30)
        if abs(wd.cx - xs[k]) <= slot and wd.conf > 20:
            groups[k].append(wd)
    return [
        " ".join(wd.text for wd in sorted(g, key=lambda t: t.left)) or f"#{i + 1}"
        for i, g in enumerate(groups)
    ]
