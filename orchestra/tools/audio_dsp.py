"""Audio DSP for the audio tools: frames, single-bin DFTs, tone segmentation and DTMF, fast and careful."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestra.tools.media import Audio

DTMF_LOW = (697.0, 770.0, 852.0, 941.0)
DTMF_HIGH = (1209.0, 1336.0, 1477.0, 1633.0)
DTMF_KEYS = ("123A", "456B", "789C", "*0#D")
#: mean of an exponential (noise power) over its 25th percentile: turns a low percentile into a mean
_P25_TO_MEAN = 1.0 / -np.log(0.75)


def sigmoid_conf(score: float, centre: float, width: float) -> float:
    """The one confidence mapping of the audio tools: a logistic of a signal score (dB of margin),
    0.5 at ``centre``; monotone, in [0, 1], rounded to 3 places."""
    return round(float(1.0 / (1.0 + np.exp(-(score - centre) / width))), 3)


def _frames(x: np.ndarray, n: int, hop: int) -> np.ndarray:
    if len(x) < n:
        x = np.pad(x, (0, n - len(x)))
    count = 1 + (len(x) - n) // hop
    idx = np.arange(n)[None, :] + hop * np.arange(count)[:, None]
    return x[idx]


def goertzel_power(frames: np.ndarray, freqs: np.ndarray, rate: int) -> np.ndarray:
    """|X(f)|^2 of every frame at every frequency, shape (frames, freqs): the Goertzel single-bin DFT,
    evaluated for all frames at once as one product with the frequencies' complex exponentials."""
    phase = 2 * np.pi * np.outer(np.arange(frames.shape[1]), np.asarray(freqs, dtype=np.float64)) / rate
    re, im = frames @ np.cos(phase), frames @ np.sin(phase)
    return re * re + im * im


@dataclass(frozen=True)
class Segment:
    """A stretch of tone: start/end seconds, dominant frequency (Hz), level (dBFS) and SNR (dB)."""

    start: float
    end: float
    freq: float
    level_db: float
    snr_db: float = 0.0

    @property
    def duration(self) -> float:
        return self.end - self.start

    def as_dict(self) -> dict[str, float]:
        return {
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "duration": round(self.duration, 3),
            "freq_hz": round(self.freq, 1),
            "level_dbfs": round(self.level_db, 1),
        }


def peak_frequency(x: np.ndarray, rate: int) -> float:
    """Dominant frequency (Hz) by a zero-padded Hann FFT with parabolic peak interpolation."""
    if len(x) < 16:
        return 0.0
    nfft = 1 << int(np.ceil(np.log2(max(len(x) * 4, 4096))))
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x)), nfft))
    lo = int(40 * nfft / rate)
    k = lo + int(np.argmax(spec[lo:-1]))
    a, b, c = np.log(spec[k - 1] + 1e-12), np.log(spec[k] + 1e-12), np.log(spec[k + 1] + 1e-12)
    denom = a - 2 * b + c
    off = 0.5 * (a - c) / denom if abs(denom) > 1e-12 else 0.0
    return float((k + off) * rate / nfft)


def _segment(x: np.ndarray, rate: int, start: float, end: float, snr_db: float) -> Segment:
    s0, s1 = int(start * rate), int(end * rate)
    trim = (s1 - s0) // 10
    seg = x[s0 + trim : s1 - trim] if s1 - s0 - 2 * trim > 32 else x[s0:s1]
    level = 20 * np.log10(np.sqrt(np.mean(seg**2)) * np.sqrt(2) + 1e-12)
    return Segment(start, end, peak_frequency(seg, rate), float(level), round(float(snr_db), 1))


def runs_of(on: np.ndarray) -> list[tuple[int, int]]:
    """[first, last] index of every run of True in ``on``."""
    d = np.diff(np.concatenate([[0], on.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), (np.flatnonzero(d == -1) - 1).tolist(), strict=True))


def irregular(onsets: list[float] | list[int], ratio: float = 1.7) -> bool:
    """Whether one onset-to-onset interval is >= ``ratio`` x their median: a pulse missing in a train."""
    iv = np.diff(np.asarray(onsets, dtype=np.float64))
    return bool(len(iv) >= 2 and iv.max() >= ratio * np.median(iv))


def hysteresis(score: np.ndarray, hi: float | np.ndarray, lo: float | np.ndarray) -> np.ndarray:
    """Frames inside runs above ``lo`` that reach ``hi`` somewhere (a Schmitt trigger, both ways)."""
    out = np.zeros(len(score), dtype=bool)
    hi_at = score > hi
    for a, b in runs_of(score > lo):
        if hi_at[a : b + 1].any():
            out[a : b + 1] = True
    return out


def tone_segments(
    audio: Audio, merge_gap_s: float = 0.02, min_len_s: float = 0.02
) -> tuple[list[Segment], dict[str, float]]:
    """Careful tone finder. A 20 ms Hann STFT (5 ms hop); each frequency bin's noise floor (its 25th
    percentile over time, so steady hum and carriers count as floor) divides its power; the whitened
    power, smoothed over 5 frames (a matched filter for >= 40 ms tones), peaks per frame over the
    band. A Schmitt trigger (on above max(10, 2 % of the loudest), off below 40 % of that) finds
    tones; edges are refined on the tone's own unsmoothed bins, where it falls under a quarter of
    its median power. Gaps under ``merge_gap_s`` are bridged, bits under ``min_len_s`` dropped.
    Also returns the evidence the confidence is made of: the weakest tone's SNR (dB over the
    on-threshold) and the strongest rejected blip (dB over the off-threshold; -inf when none)."""
    x, rate = audio.samples.astype(np.float64), audio.rate
    n, hop = int(round(0.02 * rate)), int(round(0.005 * rate))
    win = np.hanning(n)
    pw = np.abs(np.fft.rfft(_frames(x, n, hop) * win[None, :], axis=1)) ** 2
    band = slice(max(1, int(50 * n / rate)), int(0.95 * pw.shape[1]))
    pw = pw[:, band]
    floor = np.percentile(pw, 25, axis=0) * _P25_TO_MEAN + 1e-18 * n
    raw = pw / floor[None, :]
    white = raw
    if len(raw) >= 5:
        padded = np.concatenate([raw[:2], raw, raw[-2:]])
        white = sum(padded[i : i + len(raw)] for i in range(5)) / 5
    score = white.max(axis=1)
    if pw.max() < (1e-4 * win.sum() / 2) ** 2 or len(score) < 5:
        return [], {"weakest_db": 0.0, "reject_db": -np.inf}
    top = float(np.percentile(score, 99.5))
    hi = max(10.0, 0.02 * top)
    lo = 0.4 * hi
    on = hysteresis(score, hi, lo)
    runs = [list(r) for r in runs_of(on)]
    merged: list[list[int]] = []
    for a, b in runs:
        if merged and (a - merged[-1][1] - 1) * hop / rate <= merge_gap_s:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    segs: list[Segment] = []
    reject = -np.inf
    for a, b in merged:
        k = int(np.argmax(white[a : b + 1].sum(axis=0)))
        trace = raw[:, max(0, k - 1) : k + 2].max(axis=1)  # the tone's own bins, unsmoothed
        own = float(np.median(trace[a : b + 1]))
        snr = 10 * np.log10(float(np.median(score[a : b + 1])) / hi)
        for _ in range(3):  # onsets refined on the unsmoothed trace: grow back what smoothing blurred
            if a > 0 and trace[a - 1] >= 0.25 * own:
                a -= 1
            if b < len(trace) - 1 and trace[b + 1] >= 0.25 * own:
                b += 1
        while a < b and trace[a] < 0.25 * own:
            a += 1
        while b > a and trace[b] < 0.25 * own:
            b -= 1
        start = max(0.0, (a * hop + n / 2 - hop / 2) / rate)
        end = min(len(x) / rate, (b * hop + n / 2 + hop / 2) / rate)
        if end - start < min_len_s:
            reject = max(reject, 10 * np.log10(float(score[a : b + 1].max()) / lo))
            continue
        segs.append(_segment(x, rate, start, end, snr))
    blips = score > lo
    blips[on] = False
    if blips.any():
        reject = max(reject, float(10 * np.log10(score[blips].max() / lo)))
    weakest = min((s.snr_db for s in segs), default=0.0)
    return segs, {"weakest_db": weakest, "reject_db": reject}


def tone_segments_fast(
    audio: Audio, frame_s: float = 0.02, threshold: float = 0.05, min_frames: int = 1
) -> tuple[list[Segment], dict[str, float]]:
    """Fast tone finder: fixed non-overlapping ``frame_s`` rectangular frames; a frame is loud when
    its strongest spectral peak (50 Hz to 0.95 Nyquist, as a sinusoid amplitude) beats a fixed
    ``threshold`` (-26 dBFS); runs of at least ``min_frames`` loud frames are tones. No noise floor,
    no overlap, no smoothing. Evidence for the confidence: the on/off contrast (dB between the
    quietest loud frame and the loudest quiet one) and the share of frames within 3 dB of the
    threshold."""
    x, rate = audio.samples.astype(np.float64), audio.rate
    n = max(16, int(round(frame_s * rate)))
    count = len(x) // n
    if count == 0:
        return [], {"contrast_db": -10.0, "ambiguous": 1.0}
    spec = np.abs(np.fft.rfft(x[: count * n].reshape(count, n), axis=1)) * 2.0 / n
    amp = spec[:, max(1, int(50 * n / rate)) : int(0.95 * spec.shape[1])].max(axis=1) + 1e-9
    on = amp > threshold
    segs = [
        _segment(x, rate, a * n / rate, (b + 1) * n / rate, 20 * np.log10(amp[a : b + 1].min() / threshold))
        for a, b in runs_of(on)
        if b - a + 1 >= min_frames
    ]
    ambiguous = float(np.mean(np.abs(20 * np.log10(amp / threshold)) < 3.0))
    if on.any() and (~on).any():
        contrast = float(20 * np.log10(amp[on].min() / amp[~on].max()))
    else:
        contrast = -10.0  # all loud or all quiet: no on/off evidence at all
    return segs, {"contrast_db": contrast, "ambiguous": ambiguous}


def _key(lp_i: int, hp_i: int) -> str:
    return DTMF_KEYS[lp_i][hp_i]


def dtmf_decode(audio: Audio, min_tone_s: float = 0.03) -> tuple[list[dict[str, Any]], float]:
    """Careful DTMF decoder; returns the keys and a score (dB) for the confidence. Per 20 ms Hann
    frame (5 ms hop) the power at the 8 DTMF frequencies is divided by each frequency's noise floor
    (its 25th percentile over time); the strongest row plus strongest column, median-smoothed over 3
    frames, drive a Schmitt trigger (on above max(12, 3 % of the loudest), off below a third of it).
    Each run of >= ``min_tone_s`` is classified on its whole inner length (one long Goertzel per
    frequency): the best row and column must beat the runner-up of their group by 6 dB and twist
    stay within +-10 dB. Score: the smallest of every key's SNR over the on-threshold and its row /
    column dominance over 6 dB, less 6 dB per rejected candidate."""
    x, rate = audio.samples.astype(np.float64), audio.rate
    n, hop = int(round(0.020 * rate)), int(round(0.005 * rate))
    win = np.hanning(n)
    freqs = np.array(DTMF_LOW + DTMF_HIGH)
    pw = goertzel_power(_frames(x, n, hop) * win[None, :], freqs, rate)
    floor = np.percentile(pw, 25, axis=0) * _P25_TO_MEAN + 1e-18 * n
    white = pw / floor[None, :]
    score = white[:, :4].max(axis=1) + white[:, 4:].max(axis=1)
    if len(score) >= 3:
        score = np.median(np.stack([score, np.roll(score, 1), np.roll(score, -1)]), axis=0)
    if pw.max() < (2e-4 * win.sum() / 2) ** 2:
        return [], 0.0
    hi = max(12.0, 0.03 * float(np.percentile(score, 99.5)))
    on = hysteresis(score, hi, hi / 3)
    keys: list[dict[str, Any]] = []
    worst, rejected = 60.0, 0
    for a, b in runs_of(on):
        start = (a * hop + n / 2 - hop / 2) / rate
        end = (b * hop + n / 2 + hop / 2) / rate
        if end - start < min_tone_s:
            rejected += 1
            continue
        s0, s1 = int(start * rate), int(end * rate)
        trim = (s1 - s0) // 8
        seg = x[s0 + trim : s1 - trim]
        p = goertzel_power((seg * np.hanning(len(seg)))[None, :], freqs, rate)[0]
        low, high = np.sort(p[:4]), np.sort(p[4:])
        dom = 10 * np.log10(min(low[-1] / (low[-2] + 1e-18), high[-1] / (high[-2] + 1e-18)))
        twist = 10 * np.log10((high[-1] + 1e-18) / (low[-1] + 1e-18))
        if dom < 6 or abs(twist) > 10:
            rejected += 1
            continue
        snr = 10 * np.log10(float(np.median(score[a : b + 1])) / hi)
        worst = min(worst, snr, dom - 6)
        key = _key(int(np.argmax(p[:4])), int(np.argmax(p[4:])))
        keys.append({"key": key, "start": round(start, 3), "end": round(end, 3)})
    return keys, worst - 6.0 * rejected


def dtmf_decode_fast(
    audio: Audio, frame_s: float = 0.025, threshold: float = 1.5e-3
) -> tuple[list[dict[str, Any]], float]:
    """Fast DTMF decoder (the classic block Goertzel); returns the keys and a score (dB) for the
    confidence. Fixed non-overlapping 25 ms rectangular blocks; a block holds a key when its strongest
    row and column tone each have mean power over a fixed ``threshold`` (-25 dBFS per tone) and beat
    the runner-up of their group by 6 dB; a key needs two blocks in a row (debounce). No noise
    floor, no smoothing. Score: the smallest per-key median dominance over 6 dB or weaker-tone
    level over the threshold (dB), less 8 dB for each doubt: a key lasting >= 1.7x the median key
    (two keys merged?), keys touching with no quiet block between, one key-to-key interval >= 1.7x
    the median (a key missed?), a quiet block within 6 dB of the threshold."""
    x, rate = audio.samples.astype(np.float64), audio.rate
    n = int(round(frame_s * rate))
    count = len(x) // n
    if count == 0:
        return [], 0.0
    freqs = np.array(DTMF_LOW + DTMF_HIGH)
    pw = goertzel_power(x[: count * n].reshape(count, n), freqs, rate) * 2.0 / n**2
    low, high = np.sort(pw[:, :4], axis=1), np.sort(pw[:, 4:], axis=1)
    dom = np.minimum(low[:, -1] / (low[:, -2] + 1e-18), high[:, -1] / (high[:, -2] + 1e-18))
    valid = (low[:, -1] > threshold) & (high[:, -1] > threshold) & (dom > 4.0)
    rows, cols = pw[:, :4].argmax(1), pw[:, 4:].argmax(1)
    sym = [_key(int(i), int(j)) if v else "" for i, j, v in zip(rows, cols, valid, strict=True)]
    keys: list[dict[str, Any]] = []
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(sym):
        j = i
        while j < len(sym) and sym[j] == sym[i]:
            j += 1
        if sym[i] and j - i >= 2:
            keys.append({"key": sym[i], "start": round(i * n / rate, 3), "end": round(j * n / rate, 3)})
            spans.append((i, j))
        i = j
    if not keys:
        return [], 0.0
    weak = np.minimum(low[:, -1], high[:, -1])
    score = min(
        min(
            10 * np.log10(float(np.median(dom[a:b]))) - 6,
            10 * np.log10(float(np.median(weak[a:b])) / threshold),
        )
        for a, b in spans
    )
    lens = np.array([b - a for a, b in spans])
    if lens.max() >= 1.7 * np.median(lens):
        score -= 8
    if any(b1 == a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False)):
        score -= 8
    if len(spans) >= 3 and irregular([a for a, _ in spans]):
        score -= 8
    quiet = weak[~valid]
    if len(quiet) and quiet.max() > threshold / 4:
        score -= 8
    return keys, float(score)
