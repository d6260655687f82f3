"""Audio perception tools: DTMF (Goertzel), beep/tone analysis, Morse decoding, time-range segments.

The DTMF, tone and Morse tools take ``mode``: "careful" (default: adaptive noise floors, Schmitt
triggers, matched filters) or "fast" (fixed windows and thresholds); both report ``confidence``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from orchestra.tools.audio_dsp import (
    Segment,
    _frames,
    dtmf_decode,
    dtmf_decode_fast,
    hysteresis,
    irregular,
    peak_frequency,
    runs_of,
    sigmoid_conf,
    tone_segments,
    tone_segments_fast,
)
from orchestra.tools.base import FailureKinds, Observation, Tool, check_mode, mode_property
from orchestra.tools.media import FILE_FAILURES, Audio, MediaError, load_wav, output_path, write_wav

__all__ = ["MORSE", "AudioDTMF", "AudioMorse", "AudioSegment", "AudioTones", "Segment", "dtmf_decode"]

MORSE: dict[str, str] = {
    ".-": "A",
    "-...": "B",
    "-.-.": "C",
    "-..": "D",
    ".": "E",
    "..-.": "F",
    "--.": "G",
    "....": "H",
    "..": "I",
    ".---": "J",
    "-.-": "K",
    ".-..": "L",
    "--": "M",
    "-.": "N",
    "---": "O",
    ".--.": "P",
    "--.-": "Q",
    ".-.": "R",
    "...": "S",
    "-": "T",
    "..-": "U",
    "...-": "V",
    ".--": "W",
    "-..-": "X",
    "-.--": "Y",
    "--..": "Z",
    "-----": "0",
    ".----": "1",
    "..---": "2",
    "...--": "3",
    "....-": "4",
    ".....": "5",
    "-....": "6",
    "--...": "7",
    "---..": "8",
    "----.": "9",
    ".-.-.-": ".",
    "--..--": ",",
    "..--..": "?",
    "-..-.": "/",
    "-....-": "-",
    ".--.-.": "@",
    "---...": ":",
    "-...-": "=",
}


def morse_marks(audio: Audio) -> tuple[list[tuple[float, float]], float]:
    """Careful Morse keying: (start, end) of each mark and the weakest mark's SNR (dB).
    The carrier is the 32 ms-STFT bin whose power varies most (95th over 25th percentile: steady hum
    and carriers do not), refined by a parabolic fit; a matched 16 ms Hann filter at that frequency
    (2 ms hop) gives the envelope, median-smoothed over 5 steps. The noise floor is the envelope's
    25th percentile (as a Rayleigh sigma); a Schmitt trigger follows fading: on above max(4 sigma,
    half the local peak within +-0.3 s), off below max(3 sigma, 35 % of it). Marks < 10 ms drop."""
    x, rate = audio.samples.astype(np.float64), audio.rate
    n, hop = int(round(0.032 * rate)), int(round(0.016 * rate))
    spec = np.abs(np.fft.rfft(_frames(x, n, hop) * np.hanning(n)[None, :], axis=1)) ** 2
    lo_k, hi_k = int(150 * n / rate), int(3000 * n / rate)
    contrast = np.percentile(spec[:, lo_k:hi_k], 95, axis=0) / (
        np.percentile(spec[:, lo_k:hi_k], 25, axis=0) + 1e-18
    )
    k = lo_k + int(np.argmax(contrast))
    if spec[:, k].max() < (1e-4 * n / 4) ** 2:
        return [], 0.0
    loud = spec[spec[:, k] >= np.percentile(spec[:, k], 80)].mean(axis=0)
    a, b, c = np.log(loud[k - 1 : k + 2] + 1e-18)
    den = a - 2 * b + c
    freq = (k + (0.5 * (a - c) / den if abs(den) > 1e-12 else 0.0)) * rate / n
    m, step = int(round(0.016 * rate)), int(round(0.002 * rate))
    w = np.hanning(m)
    basis = w * np.exp(-2j * np.pi * freq * np.arange(m) / rate)
    fr = _frames(x, m, step)
    env = np.abs(fr @ basis) * 2 / w.sum()
    pad = np.concatenate([env[:2], env, env[-2:]])
    env = np.median(np.stack([pad[i : i + len(env)] for i in range(5)]), axis=0)
    sigma = float(np.percentile(env, 25)) / np.sqrt(2 * np.log(4 / 3)) + 1e-9
    half = int(round(0.3 * rate / step))
    idx = np.clip(np.arange(len(env))[:, None] + np.arange(-half, half + 1, 4)[None, :], 0, len(env) - 1)
    local = np.maximum(env[idx].max(axis=1), 0.15 * float(np.percentile(env, 99)))
    on = hysteresis(env, np.maximum(4 * sigma, 0.5 * local), np.maximum(3 * sigma, 0.35 * local))
    marks, snrs = [], []
    for i, j in runs_of(on):
        start, end = (i * step + m / 2) / rate, ((j + 1) * step + m / 2) / rate
        if end - start >= 0.01:
            marks.append((start, end))
            snrs.append(20 * np.log10(float(np.median(env[i : j + 1])) / (4 * sigma)))
    return marks, float(min(snrs, default=0.0))


def morse_decode(marks: list[tuple[float, float]]) -> dict[str, Any]:
    """Decode ITU Morse from (start, end) marks: dots/dashes by 1-D two-means on their durations (split
    at the clusters' geometric mean), the unit from the dots and the short gaps, gaps into element
    (< 2 units), letter (< 5) and word gaps. ``margin`` (units): how far the closest mark or gap sits
    from its decision threshold, the decoder's own doubt."""
    if not marks:
        return {"text": "", "code": "", "unit_s": 0.0, "margin": 0.0}
    st = np.array([a for a, _ in marks])
    marks_d = np.array([b - a for a, b in marks])
    gaps = st[1:] - np.array([b for _, b in marks])[:-1]
    lo, hi = float(marks_d.min()), float(marks_d.max())
    if hi / lo >= 1.8:
        thr = np.sqrt(lo * hi)
        for _ in range(20):
            lo, hi = marks_d[marks_d <= thr].mean(), marks_d[marks_d > thr].mean()
            thr = float(np.sqrt(lo * hi))
        dots = marks_d[marks_d <= thr]
        unit = float(np.median(np.concatenate([dots, gaps[gaps < 2 * dots.mean()]])))
    else:
        unit = float(min(np.min(gaps), marks_d.mean())) if len(gaps) else float(marks_d.mean())
        if marks_d.mean() < 2 * unit:
            unit = float(marks_d.mean())
        thr = 2 * unit
    margin = float(np.min(np.abs(marks_d - thr))) / unit
    if len(gaps):
        margin = min(
            margin, float(np.min(np.minimum(np.abs(gaps - 2 * unit), np.abs(gaps - 5 * unit)))) / unit
        )
    code, letters, words, symbol = [], [], [], ""
    for i, d in enumerate(marks_d):
        symbol += "." if d <= thr else "-"
        gap = gaps[i] if i < len(gaps) else np.inf
        if gap >= 2 * unit:
            letters.append(MORSE.get(symbol, "?"))
            code.append(symbol)
            symbol = ""
            if gap >= 5 * unit:
                words.append("".join(letters))
                letters = []
                code.append("/")
    return {
        "text": " ".join(words),
        "code": " ".join(code).strip(" /"),
        "unit_s": round(unit, 4),
        "margin": round(margin, 3),
    }


def audio_schema(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"path": {"type": "string", "description": "path of a WAV file"}}
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": ["path"]}


_MODE = mode_property(
    "careful (default): adaptive noise floor and thresholds, matched filters; "
    "fast: fixed windows and thresholds, cheaper but misses on noisy, quiet or rapid audio"
)


class AudioDTMF(Tool):
    """Decode telephone keypad (DTMF) tones.

    careful: :func:`dtmf_decode` (per-frequency noise floor, Schmitt trigger, whole-tone Goertzel);
    fast: :func:`dtmf_decode_fast` (fixed 25 ms blocks, fixed level threshold). ``confidence`` is
    ``sigmoid_conf`` of the decoder's score (dB): the weakest key's SNR / row-column dominance
    margin, less penalties for rejected candidates (careful) or for suspicious timing - a key twice
    as long as the others, keys touching, quiet frames near the threshold (fast). No keys: 0.2."""

    name: ClassVar[str] = "audio_dtmf"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Decode DTMF telephone-keypad tones in a WAV file (Goertzel filters on the 8 standard frequencies). "
        "Returns the key sequence (0-9, *, #, A-D) with each key's start/end time in seconds, and a "
        "confidence."
    )
    input_schema: ClassVar[dict[str, Any]] = audio_schema(_MODE)
    CALIBRATION: ClassVar[dict[str, tuple[float, float]]] = {"careful": (0.0, 3.0), "fast": (-1.5, 2.0)}

    def run(self, path: str, mode: str = "careful") -> Observation:
        mode = check_mode(mode)
        audio = load_wav(path)
        keys, score = dtmf_decode(audio) if mode == "careful" else dtmf_decode_fast(audio)
        digits = "".join(k["key"] for k in keys)
        conf = sigmoid_conf(score, *self.CALIBRATION[mode]) if keys else 0.2
        text = f"DTMF keys: {digits} (confidence {conf:.2f})" if digits else "No DTMF tones found."
        return Observation(
            tool=self.name, text=text, data={"digits": digits, "keys": keys, "mode": mode, "confidence": conf}
        )


class AudioTones(Tool):
    """Count beeps and measure their pitch, duration and timing.

    careful: :func:`tone_segments` (whitened STFT, per-bin noise floor, smoothed, Schmitt trigger);
    fast: :func:`tone_segments_fast` (fixed 20 ms frames, spectral peak over a fixed -26 dBFS).
    ``confidence`` is ``sigmoid_conf`` of a score (dB): careful - the weakest tone's SNR over the
    on-threshold, less how far the strongest rejected blip rose over the off-threshold; fast - the
    smaller of the on/off contrast and the weakest tone's level over the threshold, less 30 dB per
    unit share of frames within 3 dB of the threshold and 8 dB when one beep-to-beep interval is
    >= 1.7x the median (a beep missed?). None found: 0.3."""

    name: ClassVar[str] = "audio_tones"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Find beeps/tones in a WAV file: how many, each one's start and end time (s), duration and "
        "dominant pitch (Hz), from a spectral-peak envelope. Use for 'how many beeps', 'what pitch', 'when'."
    )
    input_schema: ClassVar[dict[str, Any]] = audio_schema(_MODE)
    CALIBRATION: ClassVar[dict[str, tuple[float, float]]] = {"careful": (-1.0, 2.0), "fast": (0.2, 2.0)}

    def run(self, path: str, mode: str = "careful") -> Observation:
        mode = check_mode(mode)
        audio = load_wav(path)
        if mode == "careful":
            segs, ev = tone_segments(audio)
            score = ev["weakest_db"] - max(0.0, ev["reject_db"])
        else:
            segs, ev = tone_segments_fast(audio)
            score = (
                min(ev["contrast_db"], min((s.snr_db for s in segs), default=0.0)) - 30.0 * ev["ambiguous"]
            )
            score -= 8.0 if irregular([s.start for s in segs]) else 0.0
        conf = sigmoid_conf(score, *self.CALIBRATION[mode]) if segs else 0.3
        base = {"mode": mode, "confidence": conf, "duration_s": round(audio.duration, 3)}
        if not segs:
            return Observation(tool=self.name, text="No tones found.", data={"count": 0, "tones": [], **base})
        parts = [f"{s.start:.2f}-{s.end:.2f}s {s.freq:.0f} Hz" for s in segs[:20]]
        more = f" (+{len(segs) - 20} more)" if len(segs) > 20 else ""
        text = f"{len(segs)} tone(s): " + "; ".join(parts) + more
        return Observation(
            tool=self.name,
            text=text,
            data={"count": len(segs), "tones": [s.as_dict() for s in segs], **base},
        )


class AudioMorse(Tool):
    """Decode Morse code sent as tone pulses.

    careful: :func:`morse_marks` (carrier found by its on/off contrast, matched filter, fading-aware
    Schmitt trigger); fast: :func:`tone_segments_fast` (fixed 10 ms frames, spectral peak over a fixed
    -24 dBFS); both then :func:`morse_decode`. ``confidence`` is ``sigmoid_conf`` of a score: the
    smaller of the weakest mark's SNR (dB; fast: on/off contrast less 30 dB per unit share of frames
    near the threshold) and 20 dB per unit of the decoder's timing margin; an unknown letter '?'
    scores -20. Nothing decoded: 0.2."""

    name: ClassVar[str] = "audio_morse"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Decode International (ITU) Morse code played as tone pulses in a WAV file: letters, digits and "
        "common punctuation; the unit length is estimated from the pulses. Unknown patterns read '?'."
    )
    input_schema: ClassVar[dict[str, Any]] = audio_schema(_MODE)
    CALIBRATION: ClassVar[dict[str, tuple[float, float]]] = {"careful": (3.5, 2.5), "fast": (0.2, 2.0)}

    def run(self, path: str, mode: str = "careful") -> Observation:
        mode = check_mode(mode)
        audio = load_wav(path)
        if mode == "careful":
            marks, snr = morse_marks(audio)
        else:
            segs, ev = tone_segments_fast(audio, frame_s=0.01, threshold=0.06)
            marks = [(s.start, s.end) for s in segs]
            snr = ev["contrast_db"] - 30.0 * ev["ambiguous"]
        result = morse_decode(marks)
        score = -20.0 if "?" in result["text"] else min(snr, 20.0 * result["margin"])
        conf = sigmoid_conf(score, *self.CALIBRATION[mode]) if result["text"] else 0.2
        text = (
            f"Morse: {result['text']} ({result['code']}; confidence {conf:.2f})"
            if result["text"]
            else "No Morse code found."
        )
        data = {**result, "pulses": len(marks), "mode": mode, "confidence": conf}
        return Observation(tool=self.name, text=text, data=data)


class AudioSegment(Tool):
    """Cut a time range out of a WAV file and describe it."""

    name: ClassVar[str] = "audio_segment"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Cut [start, end] seconds out of a WAV file into a new 16-bit mono WAV (out_path, or a temp file) "
        "and "
        "report its duration, RMS/peak level (dBFS), dominant frequency and the tones inside it."
    )
    input_schema: ClassVar[dict[str, Any]] = audio_schema(
        {
            "start": {"type": "number", "description": "start time in seconds", "minimum": 0},
            "end": {"type": "number", "description": "end time in seconds (default: end of file)"},
            "out_path": {"type": "string", "description": "where to write the cut (optional)"},
        }
    )

    def run(
        self, path: str, start: float = 0.0, end: float | None = None, out_path: str | None = None
    ) -> Observation:
        audio = load_wav(path)
        start = float(start)
        end = audio.duration if end is None else float(end)
        if start < 0 or end <= start:
            raise MediaError(f"bad time range [{start}, {end}]: need 0 <= start < end")
        if start >= audio.duration:
            raise MediaError(f"start {start}s is past the end of the audio ({audio.duration:.3f}s)")
        end = min(end, audio.duration)
        cut = audio.samples[int(round(start * audio.rate)) : int(round(end * audio.rate))]
        dest = output_path(Path(path), f"seg{start:.4f}-{end:.4f}", ".wav", out_path)
        write_wav(dest, cut, audio.rate)
        rms = float(np.sqrt(np.mean(cut.astype(np.float64) ** 2))) if len(cut) else 0.0
        peak = float(np.max(np.abs(cut))) if len(cut) else 0.0
        sub = Audio(samples=cut, rate=audio.rate, channels=1, sample_width=2)
        segs = tone_segments(sub)[0] if len(cut) >= int(0.03 * audio.rate) else []
        data = {
            "out_path": str(dest),
            "start": start,
            "end": round(end, 4),
            "duration_s": round(end - start, 4),
            "rms_dbfs": round(20 * np.log10(rms + 1e-12), 1),
            "peak_dbfs": round(20 * np.log10(peak + 1e-12), 1),
            "dominant_hz": round(peak_frequency(cut.astype(np.float64), audio.rate), 1),
            "tones": [
                {**s.as_dict(), "start": round(s.start + start, 3), "end": round(s.end + start, 3)}
                for s in segs
            ],
        }
        text = (
            f"Wrote {end - start:.2f}s segment to {dest}: RMS {data['rms_dbfs']} dBFS, "
            f"dominant {data['dominant_hz']} Hz, {len(segs)} tone(s)."
        )
        return Observation(tool=self.name, text=text, data=data)
