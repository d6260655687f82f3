"""Image perception tools: OCR, coloured-shape counting, chart reading, crop/zoom, short description."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from orchestra.errors import ToolError
from orchestra.io import atomic_write_bytes
from orchestra.tools.base import FailureKinds, Observation, Tool, check_mode, mode_property, ramp
from orchestra.tools.chart import find_axes, read_chart, read_chart_fast
from orchestra.tools.media import FILE_FAILURES, MediaError, cv_guard, load_image, output_path
from orchestra.tools.ocr import OcrResult, read_text, read_text_fast
from orchestra.tools.shapes import COLOURS, SHAPES, Shape, colour_name, detect_shapes, detect_shapes_fast

#: an OpenCV step outside cv_guard (resize, PNG encoding) may refuse an odd image with cv2.error
_FAILURES: FailureKinds = (*FILE_FAILURES, cv2.error)


def _schema(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {
        "path": {"type": "string", "description": "path of an image file (PNG, JPEG, ...)"}
    }
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": ["path"]}


_MODE = mode_property(
    "fast: one cheap pass, no cleanup (misses hard files); careful (default): the full "
    "preprocessing and cross-checks"
)


def ocr_confidence(res: OcrResult, mode: str) -> float:
    """Confidence (0-1) of an OCR reading; see :class:`ImageOCR`."""
    if not res.lines:
        return 0.0
    words = ramp(res.min_conf, 60.0, 95.0)
    if mode == "fast":  # one pass, no deskew: skewed text is where a raw pass misreads
        return round(words * ramp(-abs(res.angle), -10.0, -4.0), 3)
    return round(words * (1.0 if res.agree >= 2 else 0.5), 3)


def shapes_confidence(
    shapes: list[Shape], mode: str, colour: str | None = None, shape: str | None = None
) -> float:
    """Confidence (0-1) of a shape count; see :class:`ImageCountObjects`."""
    if not shapes:
        return 0.0
    each = []
    for s in shapes:
        sure = ramp(s.purity, 0.60, 0.80) if mode == "fast" else ramp(s.purity, 0.80, 0.95)
        if shape is not None and (colour is None or s.colour == colour):  # its shape decides the count
            sure *= ramp(s.margin, 0.01, 0.05) if mode == "fast" else (1.0 if s.agree else 0.5)
        each.append(sure)
    return round(min(each), 3)


def summarise_shapes(shapes: list[Shape]) -> str:
    if not shapes:
        return "no coloured objects"
    counts = Counter(f"{s.colour} {s.shape}" for s in shapes)
    return ", ".join(
        f"{n} {k}{'s' if n > 1 else ''}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])
    )


class ImageOCR(Tool):
    """Read the text in an image.

    ``careful`` locates the text, rescales, denoises, binarises and deskews it and runs Tesseract on
    several variants (binary / gray x psm 6 / 11, the crop and the whole image), keeping the surest;
    ``fast`` makes one Tesseract pass on the located text box, with no rescaling, binarisation or
    deskew. ``confidence`` (0-1): the weakest word's Tesseract confidence mapped linearly from 60
    (-> 0) to 95 (-> 1); careful multiplies it by 0.5 unless two variants read the same text (a
    lone reading is unconfirmed); fast multiplies it by a skew factor, 1 for text within 4 degrees
    of horizontal falling linearly to 0 at 10 degrees (the measured skew it did not correct). 0
    with no text. ``tesseract_conf`` keeps the mean word confidence (0-100).
    """

    name: ClassVar[str] = "image_ocr"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Read text in an image (signs, labels, captions, numbers) with Tesseract OCR after locating the text "
        "and correcting polarity, scale, noise and rotation up to about 30 degrees (mode careful; mode fast: "
        "one raw pass). Returns the lines and a 0-1 confidence."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(
        {
            "psm": {
                "type": "integer",
                "description": "Tesseract page-segmentation mode (default: tries 6 then 11)",
            },
            **_MODE,
        }
    )

    def run(self, path: str, psm: int | None = None, mode: str = "careful") -> Observation:
        reader = read_text_fast if check_mode(mode) == "fast" else read_text
        res = cv_guard(reader, load_image(path), psm)
        text = res.text if res.lines else "(no text found)"
        conf = ocr_confidence(res, mode)
        return Observation(
            tool=self.name,
            text=f"Text (confidence {conf:.2f}): {text}",
            data={
                "text": res.text,
                "lines": res.lines,
                "confidence": conf,
                "mode": mode,
                "tesseract_conf": round(res.conf, 1),
                "agreeing_passes": res.agree,
                "passes": res.passes,
                "deskew_deg" if mode == "careful" else "skew_deg": res.angle,
                "variant": res.variant,
                "words": [{"text": w.text, "conf": round(w.conf, 1)} for w in res.words],
            },
        )


class ImageCountObjects(Tool):
    """Count coloured objects, optionally of one colour and/or shape.

    ``careful`` smooths (median + bilateral), thresholds at 25 Lab units from the background, cleans
    the mask (open/close), names colours per pixel and splits blobs of several colours, and
    classifies shapes by their radial profile; ``fast`` thresholds the raw image once (30 units),
    names each blob by its mean colour and shapes by a polygon's vertex count. ``confidence``
    (0-1) is the weakest object's for the count asked: its colour purity (share of its pixels that
    carry its colour name, or the split colours; a merged or misnamed blob is impure) mapped
    linearly from 0.80 (-> 0) to 0.95 (-> 1) (fast: 0.60 to 0.80), and, when a shape is asked for
    and the object has the asked colour (or none is asked), how sure its shape is (careful: halved
    when a second shape reading disagrees; fast: the fill ratio's margin from the nearest shape
    boundary, 0.01 -> 0 to 0.05 -> 1); 0 when nothing is found.
    """

    name: ClassVar[str] = "image_count_objects"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Count filled coloured objects in an image by colour and shape (OpenCV colour segmentation + contour "
        f"geometry). Colours: {', '.join(COLOURS)}. Shapes: {', '.join(SHAPES)}. Both filters are optional."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(
        {
            "colour": {"type": "string", "enum": list(COLOURS), "description": "only this colour"},
            "shape": {"type": "string", "enum": list(SHAPES), "description": "only this shape"},
            "color": {"type": "string", "enum": list(COLOURS), "description": "same as colour"},
            **_MODE,
        }
    )

    def run(
        self,
        path: str,
        colour: str | None = None,
        shape: str | None = None,
        color: str | None = None,
        mode: str = "careful",
    ) -> Observation:
        detect = detect_shapes_fast if check_mode(mode) == "fast" else detect_shapes
        colour = colour or color
        if colour is not None and colour.lower() not in COLOURS:
            raise ToolError(f"unknown colour {colour!r}; valid: {', '.join(COLOURS)}")
        if shape is not None and shape.lower().rstrip("s") not in SHAPES:
            raise ToolError(f"unknown shape {shape!r}; valid: {', '.join(SHAPES)}")
        found = cv_guard(detect, load_image(path))
        sel = [
            s
            for s in found
            if (colour is None or s.colour == colour.lower())
            and (shape is None or s.shape == shape.lower().rstrip("s"))
        ]
        what = " ".join(x for x in (colour, shape) if x) or "object"
        by: dict[str, dict[str, int]] = {}
        for s in found:
            by.setdefault(s.colour, {}).setdefault(s.shape, 0)
            by[s.colour][s.shape] += 1
        text = f"{len(sel)} {what}(s). All objects: {summarise_shapes(found)}."
        return Observation(
            tool=self.name,
            text=text,
            data={
                "count": len(sel),
                "objects": [s.as_dict() for s in sel],
                "counts": by,
                "total": len(found),
                "confidence": shapes_confidence(
                    found, mode, colour and colour.lower(), shape and shape.lower().rstrip("s")
                ),
                "mode": mode,
            },
        )


class ImageReadChart(Tool):
    """Read the values of a bar or line chart.

    ``careful`` strips the axes, OCRs the upscaled tick labels, snaps them to their tick marks and
    refits without outliers, measures sub-pixel bar tops and markers, and reads the printed values;
    ``fast`` makes one native-scale tick OCR pass and uses the geometry alone. Each value's
    confidence (``value_confidences``) is 1 when a printed value agrees with the geometry, else the
    2 % tolerance over the geometric uncertainty (|value per px| x (tick-fit rms (+) 0.5 px)) mapped
    linearly from 1.5 (-> 0) to 4 (-> 1); ``confidence`` is the weakest value's.
    """

    name: ClassVar[str] = "image_read_chart"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Read a bar or line chart: finds the axes, OCRs the y-axis ticks to map pixels to values, measures "
        "each "
        "bar top / line point, reads category labels and any printed values (used when they agree with the "
        "geometry). Give `label` to get one category's value."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(
        {
            "label": {
                "type": "string",
                "description": "a category label (x-axis text) to return the value of",
            },
            **_MODE,
        }
    )

    def run(self, path: str, label: str | None = None, mode: str = "careful") -> Observation:
        reader = read_chart_fast if check_mode(mode) == "fast" else read_chart
        chart = cv_guard(reader, load_image(path))
        pairs = list(zip(chart.labels, chart.values, strict=True))
        data = {**chart.as_dict(), "mode": mode}
        if label is not None:
            match = [v for lab, v in pairs if lab.strip().lower() == str(label).strip().lower()]
            if not match:
                raise ToolError(f"no category {label!r} on the chart; labels read: {chart.labels}")
            data["value"] = match[0]
            text = f"{label}: {match[0]:g} ({chart.kind} chart '{chart.title}')"
        else:
            text = f"{chart.kind} chart '{chart.title}': " + ", ".join(f"{lab}={v:g}" for lab, v in pairs)
        return Observation(tool=self.name, text=text, data=data)


def describe(bgr: np.ndarray) -> dict[str, Any]:
    """A short structured description: size, background colour, objects, text, chart axes if any."""
    h, w = bgr.shape[:2]
    border = np.concatenate([bgr[0], bgr[-1], bgr[:, 0], bgr[:, -1]])
    shapes = detect_shapes(bgr)
    ocr = read_text(bgr)
    try:
        find_axes(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))
        looks_chart = True
    except MediaError:
        looks_chart = False
    return {
        "width": w,
        "height": h,
        "background": colour_name(np.median(border, axis=0)),
        "objects": summarise_shapes(shapes),
        "object_count": len(shapes),
        "text": ocr.text if ocr.conf >= 60 else "",
        "text_confidence": round(ocr.conf, 1),
        "chart_axes": looks_chart,
    }


def _sentence(d: dict[str, Any]) -> str:
    parts = [f"A {d['width']}x{d['height']} image on a {d['background']} background"]
    parts.append(f"with {d['objects']}")
    if d["chart_axes"]:
        parts.append("showing chart axes (try image_read_chart)")
    if d["text"]:
        parts.append(f"and the text {d['text']!r}")
    return " ".join(parts) + "."


class ImageDescribe(Tool):
    """A short description of an image built from its detections."""

    name: ClassVar[str] = "image_describe"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Describe an image briefly from what the detectors find: size, background colour, coloured objects "
        "by "
        "colour and shape, readable text, and whether it has chart axes. No free-form scene understanding."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema()

    def run(self, path: str) -> Observation:
        d = cv_guard(describe, load_image(path))
        return Observation(tool=self.name, text=_sentence(d), data=d)


class ImageCrop(Tool):
    """Crop and zoom a region, save it, and describe what is in it."""

    name: ClassVar[str] = "image_crop"
    failure_kinds: ClassVar[FailureKinds] = _FAILURES
    description: ClassVar[str] = (
        "Crop an image to box [x0, y0, x1, y1] (pixels; fractions 0-1 also accepted), enlarge it by `zoom` "
        "(1-8), "
        "save it as PNG (out_path or a temp file) and describe the crop: objects and OCR text inside it."
    )
    input_schema: ClassVar[dict[str, Any]] = _schema(
        {
            "box": {
                "type": "array",
                "items": {"type": "number"},
                "minItems": 4,
                "maxItems": 4,
                "description": "[x0, y0, x1, y1]",
            },
            "zoom": {"type": "number", "minimum": 1, "maximum": 8, "description": "enlargement (default 2)"},
            "out_path": {"type": "string", "description": "where to write the PNG (optional)"},
        }
    )

    def run(
        self,
        path: str,
        box: list[float] | None = None,
        zoom: float = 2.0,
        out_path: str | None = None,
    ) -> Observation:
        if box is None or len(box) != 4:
            raise ToolError("box must be [x0, y0, x1, y1]")
        img = load_image(path)
        h, w = img.shape[:2]
        x0, y0, x1, y1 = (float(v) for v in box)
        if max(x0, y0, x1, y1) <= 1.0:
            x0, x1, y0, y1 = x0 * w, x1 * w, y0 * h, y1 * h
        x0, y0 = max(0, int(round(x0))), max(0, int(round(y0)))
        x1, y1 = min(w, int(round(x1))), min(h, int(round(y1)))
        if x1 - x0 < 2 or y1 - y0 < 2:
            raise ToolError(f"box {box} is empty or outside the {w}x{h} image")
        zoom = float(np.clip(float(zoom), 1.0, 8.0))
        crop = img[y0:y1, x0:x1]
        if zoom > 1:
            crop = cv2.resize(crop, None, fx=zoom, fy=zoom, interpolation=cv2.INTER_CUBIC)
        ok, png = cv2.imencode(".png", crop)
        if not ok:
            raise MediaError("could not encode the crop as PNG")
        dest = output_path(Path(path), f"crop{x0},{y0},{x1},{y1}x{zoom}", ".png", out_path)
        atomic_write_bytes(dest, png.tobytes())
        d = cv_guard(describe, crop)
        return Observation(
            tool=self.name,
            text=f"Saved crop [{x0}, {y0}, {x1}, {y1}] x{zoom:g} to {dest}. " + _sentence(d),
            data={**d, "out_path": str(dest), "box": [x0, y0, x1, y1], "zoom": zoom},
        )
