"""Tesseract OCR with preprocessing: grayscale, rescale, denoise, deskew, Otsu; best variant by confidence."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

import cv2
import numpy as np

from orchestra.tools.media import MediaError

TESSERACT_TIMEOUT_S = 30.0
_TARGET_TEXT_HEIGHT = 34.0  # px: Tesseract reads best with glyphs roughly 30-40 px tall


@dataclass(frozen=True)
class OcrWord:
    """One word Tesseract found, with its confidence (0-100) and box in the input image's pixels."""

    text: str
    conf: float
    left: int
    top: int
    width: int
    height: int
    line: tuple[int, int, int]

    @property
    def cx(self) -> float:
        return self.left + self.width / 2.0

    @property
    def cy(self) -> float:
        return self.top + self.height / 2.0


@dataclass
class OcrResult:
    """Text read from an image: lines, words, mean word confidence, and how it was preprocessed."""

    lines: list[str]
    words: list[OcrWord] = field(default_factory=list)
    conf: float = 0.0
    angle: float = 0.0
    variant: str = ""
    agree: int = 1  # preprocessing variants whose reading equals this one (this one included)
    passes: int = 1  # Tesseract passes made

    @property
    def min_conf(self) -> float:
        """The lowest Tesseract confidence (0-100) of a word with a letter or digit; 0 when none."""
        good = [w.conf for w in self.words if w.conf >= 0 and any(c.isalnum() for c in w.text)]
        return float(min(good)) if good else 0.0

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def tesseract_binary() -> str:
    """Path of the Tesseract executable (Debian's ``tesseract-ocr``); MediaError if missing."""
    found = shutil.which("tesseract") or (
        "/usr/bin/tesseract" if os.path.exists("/usr/bin/tesseract") else None
    )
    if not found:
        raise MediaError("the tesseract binary is not installed (apt-get install tesseract-ocr)")
    return found


def tesseract_words(gray: np.ndarray, psm: int = 6, whitelist: str | None = None) -> list[OcrWord]:
    """Run Tesseract on one grayscale image and parse its TSV output into words."""
    ok, png = cv2.imencode(".png", gray)
    if not ok:
        raise MediaError("could not encode the image for Tesseract")
    cmd = [tesseract_binary(), "stdin", "stdout", "--psm", str(psm), "-l", "eng"]
    if whitelist:
        cmd += ["-c", f"tessedit_char_whitelist={whitelist}"]
    cmd += ["tsv"]
    env = dict(os.environ, OMP_THREAD_LIMIT="1")
    try:
        proc = subprocess.run(
            cmd, input=png.tobytes(), capture_output=True, timeout=TESSERACT_TIMEOUT_S, env=env, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise MediaError(f"tesseract timed out after {TESSERACT_TIMEOUT_S}s") from e
    if proc.returncode != 0:
        raise MediaError(
            f"tesseract failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace')[:300]}"
        )
    words: list[OcrWord] = []
    for row in proc.stdout.decode("utf-8", errors="replace").splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12 or cols[0] != "5":
            continue
        text = cols[11].strip()
        if not text:
            continue
        words.append(
            OcrWord(
                text=text,
                conf=float(cols[10]),
                left=int(cols[6]),
                top=int(cols[7]),
                width=int(cols[8]),
                height=int(cols[9]),
                line=(int(cols[2]), int(cols[3]), int(cols[4])),
            )
        )
    return words


def _group_lines(words: list[OcrWord]) -> list[str]:
    lines: dict[tuple[int, int, int], list[OcrWord]] = {}
    for w in words:
        lines.setdefault(w.line, []).append(w)
    ordered = sorted(lines.values(), key=lambda ws: (min(w.top for w in ws), min(w.left for w in ws)))
    return [" ".join(w.text for w in sorted(ws, key=lambda w: w.left)) for ws in ordered]


def to_gray(img: np.ndarray) -> np.ndarray:
    return img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)


def binarize(gray: np.ndarray) -> np.ndarray:
    """Otsu threshold, polarity fixed so the text (the minority) is black on white."""
    _, bw = cv2.threshold(gray, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    if np.count_nonzero(bw) < bw.size / 2:
        bw = 255 - bw
    return bw


def _text_height(bw: np.ndarray) -> float | None:
    """Typical glyph height in a black-on-white image: the area-weighted median height of the
    glyph-sized ink blobs, so specks and broken rim fragments do not drag it down."""
    n, _, stats, _ = cv2.connectedComponentsWithStats(255 - bw, connectivity=8)
    if n <= 1:
        return None
    h, w, area = stats[1:, cv2.CC_STAT_HEIGHT], stats[1:, cv2.CC_STAT_WIDTH], stats[1:, cv2.CC_STAT_AREA]
    keep = (h >= 4) & (area >= 12) & (h < bw.shape[0] * 0.8) & (w < bw.shape[1] * 0.5)
    if not np.any(keep):
        return None
    order = np.argsort(h[keep])
    hs, ws = h[keep][order], area[keep][order].astype(np.float64)
    return float(hs[int(np.searchsorted(np.cumsum(ws), ws.sum() / 2))])


def rotate(img: np.ndarray, angle: float, border: int = 255) -> np.ndarray:
    """Rotate about the centre by ``angle`` degrees (counter-clockwise), growing the canvas to fit."""
    if abs(angle) < 1e-6:
        return img
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2.0, h / 2.0), angle, 1.0)
    cos, sin = abs(m[0, 0]), abs(m[0, 1])
    nw, nh = int(h * sin + w * cos + 0.5), int(h * cos + w * sin + 0.5)
    m[0, 2] += nw / 2.0 - w / 2.0
    m[1, 2] += nh / 2.0 - h / 2.0
    value = border if img.ndim == 2 else (border, border, border)
    return cv2.warpAffine(img, m, (nw, nh), flags=cv2.INTER_LINEAR, borderValue=value)


def estimate_skew(bw: np.ndarray, max_angle: float = 30.0) -> float:
    """Angle (degrees) that makes text lines horizontal, by maximising the row-profile variance."""
    ink = (bw < 128).astype(np.uint8) * 255
    scale = min(1.0, 400.0 / max(ink.shape))
    small = cv2.resize(ink, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA) if scale < 1 else ink
    if np.count_nonzero(small) < 20:
        return 0.0

    def score(a: float) -> float:
        prof = rotate(small, a, border=0).sum(axis=1, dtype=np.float64)
        return float(np.var(prof))

    coarse = np.arange(-max_angle, max_angle + 0.01, 2.0)
    best = float(coarse[int(np.argmax([score(a) for a in coarse]))])
    fine = np.arange(best - 2.0, best + 2.01, 0.5)
    best = float(fine[int(np.argmax([score(a) for a in fine]))])
    return best if abs(best) >= 0.75 else 0.0


def _pad(img: np.ndarray, px: int = 20) -> np.ndarray:
    return cv2.copyMakeBorder(img, px, px, px, px, cv2.BORDER_CONSTANT, value=255)


def _score(words: list[OcrWord]) -> float:
    good = [w for w in words if w.conf >= 0 and any(c.isalnum() for c in w.text)]
    if not good:
        return -1.0
    return float(np.mean([w.conf for w in good]))


def find_text_box(gray: np.ndarray) -> tuple[tuple[int, int, int, int], bool] | None:
    """Bounding box (x0, y0, x1, y1) of the glyph-like blobs of the likelier text polarity, and
    whether that text is light on dark.

    Both polarities of an Otsu split are searched for blobs shaped like glyphs (not touching the
    border, plausible size and fill, heights consistent); the polarity whose glyphs add up to the
    most height wins. This finds light text on a dark board as well as dark text on paper.
    """
    h, w = gray.shape
    _, bw = cv2.threshold(gray, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    if bw.min() == bw.max() or gray[bw > 0].mean() - gray[bw == 0].mean() < 40:
        return None  # no two tones with text-like contrast: a flat or merely noisy picture
    best: tuple[float, np.ndarray, bool] | None = None
    for light, fg in ((True, bw), (False, 255 - bw)):
        n, _, st, _ = cv2.connectedComponentsWithStats(fg, connectivity=8)
        x, y, cw, ch, area = (st[1:, i] for i in range(5))
        fill = area / np.maximum(cw * ch, 1)
        ok = (
            (x > 0)
            & (y > 0)
            & (x + cw < w)
            & (y + ch < h)
            & (ch >= 6)
            & (ch < 0.6 * h)
            & (cw < 0.6 * w)
            & (area >= 15)
            & (fill > 0.08)
            & (fill < 0.95)
            & (ch < 8 * cw)
            & (cw < 4 * ch)
        )
        if not np.any(ok):
            continue
        med = np.median(ch[ok])
        ok &= (ch > 0.4 * med) & (ch < 2.5 * med)
        score = float(ch[ok].sum())
        if best is None or score > best[0]:
            best = (score, np.stack([x[ok], y[ok], x[ok] + cw[ok], y[ok] + ch[ok]], axis=1), light)
    if best is None:
        return None
    boxes = best[1]
    margin = int(0.15 * np.median(boxes[:, 3] - boxes[:, 1])) + 3
    box = (
        max(0, int(boxes[:, 0].min()) - margin),
        max(0, int(boxes[:, 1].min()) - margin),
        min(w, int(boxes[:, 2].max()) + margin),
        min(h, int(boxes[:, 3].max()) + margin),
    )
    return box, best[2]


_JUNK = set("|_\u2014\u2013~=[]{}()'\"`")


_DIGIT_LOOKALIKES = str.maketrans({"O": "0", "o": "0", "l": "1", "I": "1"})


def _numeric(text: str) -> str:
    """A token with digits whose only letters look like digits (O, o, l, I) is a number: '2O1' -> '201'."""
    letters = {c for c in text if c.isalpha()}
    if any(c.isdigit() for c in text) and letters and letters <= set("OolI"):
        return text.translate(_DIGIT_LOOKALIKES)
    return text


def _clean(words: list[OcrWord]) -> list[OcrWord]:
    """Drop tokens made only of rule/border characters, strip stray bars from word ends, and read
    digit-lookalike letters inside numbers as digits."""
    out = []
    for word in words:
        text = _numeric(word.text.strip("|[](){}_"))
        if text and not set(text) <= _JUNK:
            out.append(OcrWord(text, word.conf, word.left, word.top, word.width, word.height, word.line))
    return out


def _clean_ink(bw: np.ndarray, text_h: float | None) -> np.ndarray:
    """Whiten ink blobs (black on white) that are not text: blobs touching the image edge (stray
    corners), thin frames enclosing the rest (a board's rim), long thin rules, hairlines much
    thinner than the typical stroke, and specks farther than about half a glyph from any
    glyph-sized blob (broken rim fragments; i-dots stay)."""
    ink = (bw < 128).astype(np.uint8)
    n, lab, st, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    h, w = bw.shape
    x, y, cw, ch = st[:, 0], st[:, 1], st[:, 2], st[:, 3]
    fill = st[:, 4] / np.maximum(cw * ch, 1)
    drop = (x == 0) | (y == 0) | (x + cw >= w) | (y + ch >= h)
    drop |= (cw > 0.6 * w) & (ch > 0.6 * h) & (fill < 0.35)
    drop |= (cw > 12 * ch) | (ch > 12 * cw)
    thick = np.zeros(n)
    np.maximum.at(thick, lab.ravel(), cv2.distanceTransform(ink, cv2.DIST_L2, 3).ravel())
    solid = ~drop & (st[:, 4] >= 12)
    solid[0] = False
    if np.any(solid):  # hairline blobs much thinner than the typical stroke are rules or rims
        drop |= thick < 0.45 * float(np.median(thick[solid]))
    if text_h:
        big = (ch >= 0.5 * text_h) & ~drop
        big[0] = False
        r = max(1, int(0.5 * text_h))
        near = cv2.dilate(big[lab].astype(np.uint8), np.ones((2 * r + 1, 2 * r + 1), np.uint8))
        touches = np.zeros(n, bool)
        touches[np.unique(lab[(near > 0) & (ink > 0)])] = True
        if np.any(big):  # marks inside a text line's band (a hyphen between words) are kept too
            rows = np.zeros(h, bool)
            for k in np.flatnonzero(big):
                rows[y[k] : y[k] + ch[k]] = True
            xl, xr = x[big].min() - r, (x[big] + cw[big]).max() + r
            cy, cx = np.clip(y + ch // 2, 0, h - 1), x + cw // 2
            touches |= rows[cy] & (cx >= xl) & (cx <= xr)
        drop |= ~big & ~touches
    drop[0] = False
    out = bw.copy()
    out[drop[lab] & (ink > 0)] = 255
    return out


def _read_region(
    gray: np.ndarray, psms: list[int], whitelist: str | None, tag: str, light_text: bool | None = None
) -> OcrResult:
    den = cv2.medianBlur(gray, 3)
    den = cv2.GaussianBlur(den, (3, 3), 0)
    height = _text_height(binarize(den))
    scale = float(np.clip(_TARGET_TEXT_HEIGHT / height, 0.5, 4.0)) if height else 1.0
    if max(gray.shape) * scale > 3000:
        scale = 3000.0 / max(gray.shape)
    if abs(scale - 1.0) > 0.1:
        interp = cv2.INTER_CUBIC if scale > 1 else cv2.INTER_AREA
        den = cv2.resize(den, None, fx=scale, fy=scale, interpolation=interp)
    if light_text is None:
        bw = binarize(den)
    else:  # a cropped text box: polarity known, and whatever touches the crop edge is not text
        _, bw = cv2.threshold(den, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
        bw = 255 - bw if light_text else bw
    bw = _clean_ink(bw, _text_height(bw))
    angle = estimate_skew(bw)
    # grey variant: normalise polarity to dark text on light background like the binary one
    light, dark = den[bw > 128], den[bw <= 128]
    g = 255 - den if light.size and dark.size and light.mean() < dark.mean() else den
    bw_r, g_r = _pad(rotate(bw, angle)), _pad(rotate(g, angle))
    bw_r = cv2.morphologyEx(bw_r, cv2.MORPH_CLOSE, np.ones((2, 2), np.uint8))
    best = OcrResult(lines=[], conf=0.0, angle=angle, variant=f"{tag}/none")
    best_score, texts = -2.0, []
    for p in psms:
        for name, im in (("binary", bw_r), ("gray", g_r)):
            words = _clean(tesseract_words(im, psm=p, whitelist=whitelist))
            s = _score(words)
            texts.append("\n".join(_group_lines(words)) if s >= 0 else None)
            if s > best_score:
                best_score = s
                best = OcrResult(
                    lines=_group_lines(words),
                    words=words,
                    conf=max(s, 0.0),
                    angle=angle,
                    variant=f"{tag}/{name}/psm{p}/x{scale:.2f}",
                )
            best.agree, best.passes = texts.count(best.text) if best.lines else 0, len(texts)
            if best_score >= 90 and best.agree >= 2:  # two preprocessings agree, both sure: done
                return best
    return best


def read_text(img: np.ndarray, psm: int | None = None, whitelist: str | None = None) -> OcrResult:
    """OCR with preprocessing; tries a few variants and keeps the one Tesseract is surest of.

    The text region is located first (either polarity, see :func:`find_text_box`) and cropped, so
    a sign board's edge or colour does not upset the threshold. Variants: (denoised gray, Otsu
    binary) x (page layout psm 6, then sparse text psm 11, or the given ``psm``), rescaled to
    ~34 px glyphs and deskewed by the row-profile angle; the whole image is tried as well when the
    crop reads poorly or no two variants agree. ``agree`` counts the variants (and the crop / full
    pair) that read the kept text. Word boxes are in the preprocessed image's pixels.
    """
    gray = _min_size(to_gray(img))
    psms = [psm] if psm is not None else [6, 11]
    found = find_text_box(cv2.medianBlur(gray, 5))
    results = []
    if found is not None:
        (x0, y0, x1, y1), light = found
        results.append(_read_region(gray[y0:y1, x0:x1], psms, whitelist, "crop", light))
        if results[-1].conf >= 85 and results[-1].agree >= 2:
            return results[-1]
    results.append(_read_region(gray, psms, whitelist, "full"))
    best = max(results, key=lambda r: r.conf)
    if len(results) == 2:  # the crop and the full image were both read: they vote as well
        other = results[0] if best is results[1] else results[1]
        best.agree += int(bool(best.lines) and other.text == best.text and other.agree >= 1)
        best.passes += other.passes
    return best


def _min_size(gray: np.ndarray) -> np.ndarray:
    """Tiny images enlarged 4x (at least 16 px a side) so Tesseract accepts them."""
    if gray.shape[0] < 16 or gray.shape[1] < 16:
        gray = cv2.resize(
            gray, (max(16, gray.shape[1] * 4), max(16, gray.shape[0] * 4)), interpolation=cv2.INTER_CUBIC
        )
    return gray


def read_text_fast(img: np.ndarray, psm: int | None = None, whitelist: str | None = None) -> OcrResult:
    """One Tesseract pass (single text line, psm 7, or the given ``psm``) on the located text box in
    gray, polarity flipped to dark on light: no rescaling, denoising, binarisation, ink cleanup,
    deskew or second variant. Cheap; misses small, rotated, faint or blurred text that
    :func:`read_text` recovers. ``angle`` is the text's skew, measured (for the confidence) but not
    corrected."""
    gray = _min_size(to_gray(img))
    found = find_text_box(cv2.medianBlur(gray, 5))
    if found is not None:
        (x0, y0, x1, y1), light = found
        gray = gray[y0:y1, x0:x1]
        gray = 255 - gray if light else gray
    words = _clean(tesseract_words(_pad(gray), psm=psm or 7, whitelist=whitelist))
    s = _score(words)
    lines = _group_lines(words) if s >= 0 else []
    angle = estimate_skew(binarize(gray))
    return OcrResult(lines, words, max(s, 0.0), angle, f"fast/crop/psm{psm or 7}", agree=0)
