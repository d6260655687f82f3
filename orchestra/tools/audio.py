"""Audio perception tools: DTMF (Goertzel), beep/tone analysis, Morse decoding, time-range segments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from orchestra.tools.base import FailureKinds, Observation, Tool
from orchestra.tools.media import FILE_FAILURES, Audio, MediaError, load_wav, output_path, write_wav

DTMF_LOW = (697.0, 770.0, 852.0, 941.0)
DTMF_HIGH = (1209.0, 1336.0, 1477.0, 1633.0)
DTMF_KEYS = ("123A", "456B", "789C", "*0#D")

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


def _frames(x: np.ndarray, n: int, hop: int) -> np.ndarray:
    if len(x) < n:
        x = np.pad(x, (0, n - len(x)))
    count = 1 + (len(x) - n) // hop
    idx = np.arange(n)[None, :] + hop * np.arange(count)[:, None]
    return x[idx]


def goertzel_power(frames: np.ndarray, freqs: np.ndarray, rate: int) -> np.ndarray:
    """Goertzel recurrence over every frame at every frequency: returns |X(f)|^2, shape (frames, freqs)."""
    coef = 2.0 * np.cos(2.0 * np.pi * freqs / rate)[None, :]
    s1 = np.zeros((frames.shape[0], len(freqs)))
    s2 = np.zeros_like(s1)
    for k in range(frames.shape[1]):
        s0 = frames[:, k : k + 1] + coef * s1 - s2
        s2, s1 = s1, s0
    return s1 * s1 + s2 * s2 - coef * s1 * s2


@dataclass(frozen=True)
class Segment:
    """A stretch of tone: start/end seconds, dominant frequency (Hz) and level (dBFS)."""

    start: float
    end: float
    freq: float
    level_db: float

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


def dtmf_decode(audio: Audio, min_tone_s: float = 0.03) -> list[dict[str, Any]]:
    """DTMF keys with start/end times: per 25 ms frame, the strongest row and column tone (Goertzel)
    must dominate its group by 6 dB, hold >= 25 % of the frame's power, and twist within +-10 dB;
    runs of the same key (single-frame dropouts bridged) of at least ``min_tone_s`` become keys."""
    rate = audio.rate
    n, hop = int(round(0.025 * rate)), int(round(0.010 * rate))
    win = np.hanning(n)
    fr = _frames(audio.samples.astype(np.float64), n, hop) * win[None, :]
    freqs = np.array(DTMF_LOW + DTMF_HIGH)
    pw = goertzel_power(fr, freqs, rate) * 2.0 / win.sum() ** 2  # mean power A^2/2 of each tone
    frame_power = (fr**2).sum(axis=1) / (win**2).sum() + 1e-12
    low, high = pw[:, :4], pw[:, 4:]
    li, hi = low.argmax(axis=1), high.argmax(axis=1)
    lp, hp = low.max(axis=1), high.max(axis=1)
    l2, h2 = np.sort(low, axis=1)[:, -2], np.sort(high, axis=1)[:, -2]
    twist = 10 * np.log10((hp + 1e-15) / (lp + 1e-15))
    valid = (lp > 4 * l2) & (hp > 4 * h2) & ((lp + hp) / frame_power > 0.25) & (np.abs(twist) < 10)
    valid &= frame_power > 1e-7
    sym = [DTMF_KEYS[li[i]][hi[i]] if valid[i] else "" for i in range(len(valid))]
    for i in range(1, len(sym) - 1):  # bridge one-frame dropouts inside a key
        if not sym[i] and sym[i - 1] and sym[i - 1] == sym[i + 1]:
            sym[i] = sym[i - 1]
    keys: list[dict[str, Any]] = []
    i = 0
    min_frames = max(2, int(round((min_tone_s - 0.025) / 0.010)) + 1)
    while i < len(sym):
        j = i
        while j < len(sym) and sym[j] == sym[i]:
            j += 1
        if sym[i] and j - i >= min_frames:
            start = (i * hop + n / 2) / rate - 0.005
            end = ((j - 1) * hop + n / 2) / rate + 0.005
            keys.append({"key": sym[i], "start": round(start, 3), "end": round(end, 3)})
        i = j
    return keys


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


def tone_segments(audio: Audio, merge_gap_s: float = 0.02, min_len_s: float = 0.02) -> list[Segment]:
    """Tonal stretches from the strongest spectral peak per 20 ms frame (5 ms hop): frames 12 dB over
    the background (10th percentile) start a tone; its edges sit where the peak falls under half the
    tone's own median amplitude. Gaps under ``merge_gap_s`` are bridged, bits under ``min_len_s`` dropped."""
    x, rate = audio.samples.astype(np.float64), audio.rate
    n, hop = int(round(0.02 * rate)), int(round(0.005 * rate))
    win = np.hanning(n)
    spec = np.abs(np.fft.rfft(_frames(x, n, hop) * win[None, :], axis=1))
    band = slice(max(1, int(50 * n / rate)), int(0.95 * spec.shape[1]))
    amp = spec[:, band].max(axis=1) * 2.0 / win.sum()  # ~ sinusoid amplitude
    if amp.max() < 1e-4:
        return []
    floor, top = float(np.percentile(amp, 10)), float(np.percentile(amp, 99.5))
    if top < 4 * floor:
        # no on/off contrast: a steady sinusoid's peak is ~1.4x the RMS, white noise's ~0.35x
        tonal = np.median(amp) > 0.8 * np.sqrt(np.mean(x**2)) and np.median(amp) > 1e-3
        on = np.full(len(amp), bool(tonal))
    else:
        on = amp > max(4 * floor, 0.05 * top)
    runs: list[list[int]] = []
    for i in np.flatnonzero(on):
        if runs and (i - runs[-1][1]) * hop / rate <= merge_gap_s + hop / rate:
            runs[-1][1] = int(i)
        else:
            runs.append([int(i), int(i)])
    for run in runs:  # edges where the amplitude crosses half of this tone's own level
        half = 0.5 * float(np.median(amp[run[0] : run[1] + 1]))
        while run[0] < run[1] and amp[run[0]] < half:
            run[0] += 1
        while run[1] > run[0] and amp[run[1]] < half:
            run[1] -= 1
    out: list[Segment] = []
    for a, b in runs:
        start = max(0.0, (a * hop + n / 2 - hop / 2) / rate)
        end = min(len(x) / rate, (b * hop + n / 2 + hop / 2) / rate)
        if end - start < min_len_s:
            continue
        s0, s1 = int(start * rate), int(end * rate)
        trim = (s1 - s0) // 10
        seg = x[s0 + trim : s1 - trim] if s1 - s0 - 2 * trim > 32 else x[s0:s1]
        level = 20 * np.log10(np.sqrt(np.mean(seg**2)) * np.sqrt(2) + 1e-12)
        out.append(Segment(start=start, end=end, freq=peak_frequency(seg, rate), level_db=float(level)))
    return out


def morse_decode(segments: list[Segment]) -> dict[str, Any]:
    """Decode ITU Morse from tone segments: marks split into dots/dashes by 1-D two-means on their
    durations (unit = dot length), gaps into element (<2 units), letter (<5) and word gaps."""
    if not segments:
        return {"text": "", "code": "", "unit_s": 0.0}
    marks = np.array([s.duration for s in segments])
    gaps = np.array([b.start - a.end for a, b in zip(segments, segments[1:], strict=False)])
    if marks.max() / marks.min() >= 1.8:
        lo, hi = marks.min(), marks.max()
        for _ in range(20):
            thr = (lo + hi) / 2
            lo, hi = marks[marks <= thr].mean(), marks[marks > thr].mean()
        unit = float((lo * np.sum(marks <= thr) + hi / 3 * np.sum(marks > thr)) / len(marks))
    elif len(gaps):
        unit = float(min(np.min(gaps), marks.mean()))
        if marks.mean() < 2 * unit:
            unit = float(marks.mean())
    else:
        unit = float(marks.mean())
    code, letters, words, symbol = [], [], [], ""
    for i, m in enumerate(marks):
        symbol += "." if m < 2 * unit else "-"
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
        "code": " ".join(code).replace(" / ", " / ").strip(" /"),
        "unit_s": round(unit, 4),
    }


def _audio_schema(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"path": {"type": "string", "description": "path of a WAV file"}}
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": ["path"]}


class AudioDTMF(Tool):
    """Decode telephone keypad (DTMF) tones."""

    name: ClassVar[str] = "audio_dtmf"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Decode DTMF telephone-keypad tones in a WAV file (Goertzel filters on the 8 standard frequencies). "
        "Returns the key sequence (0-9, *, #, A-D) with each key's start/end time in seconds."
    )
    input_schema: ClassVar[dict[str, Any]] = _audio_schema()

    def run(self, path: str) -> Observation:
        keys = dtmf_decode(load_wav(path))
        digits = "".join(k["key"] for k in keys)
        text = f"DTMF keys: {digits}" if digits else "No DTMF tones found."
        return Observation(tool=self.name, text=text, data={"digits": digits, "keys": keys})


class AudioTones(Tool):
    """Count beeps and measure their pitch, duration and timing."""

    name: ClassVar[str] = "audio_tones"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Find beeps/tones in a WAV file: how many, each one's start and end time (s), duration and "
        "dominant pitch (Hz), from a spectral-peak envelope. Use for 'how many beeps', 'what pitch', 'when'."
    )
    input_schema: ClassVar[dict[str, Any]] = _audio_schema()

    def run(self, path: str) -> Observation:
        audio = load_wav(path)
        segs = tone_segments(audio)
        if not segs:
            return Observation(tool=self.name, text="No tones found.", data={"count": 0, "tones": []})
        parts = [f"{s.start:.2f}-{s.end:.2f}s {s.freq:.0f} Hz" for s in segs[:20]]
        more = f" (+{len(segs) - 20} more)" if len(segs) > 20 else ""
        text = f"{len(segs)} tone(s): " + "; ".join(parts) + more
        return Observation(
            tool=self.name,
            text=text,
            data={
                "count": len(segs),
                "tones": [s.as_dict() for s in segs],
                "duration_s": round(audio.duration, 3),
            },
        )


class AudioMorse(Tool):
    """Decode Morse code sent as tone pulses."""

    name: ClassVar[str] = "audio_morse"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Decode International (ITU) Morse code played as tone pulses in a WAV file: letters, digits and "
        "common punctuation; the unit length is estimated from the pulses. Unknown patterns read '?'."
    )
    input_schema: ClassVar[dict[str, Any]] = _audio_schema()

    def run(self, path: str) -> Observation:
        audio = load_wav(path)
        segs = tone_segments(audio, merge_gap_s=0.01, min_len_s=0.015)
        result = morse_decode(segs)
        text = f"Morse: {result['text']} ({result['code']})" if result["text"] else "No Morse code found."
        return Observation(tool=self.name, text=text, data={**result, "pulses": len(segs)})


class AudioSegment(Tool):
    """Cut a time range out of a WAV file and describe it."""

    name: ClassVar[str] = "audio_segment"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Cut [start, end] seconds out of a WAV file into a new 16-bit mono WAV (out_path, or a temp file) "
        "and "
        "report its duration, RMS/peak level (dBFS), dominant frequency and the tones inside it."
    )
    input_schema: ClassVar[dict[str, Any]] = _audio_schema(
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
        segs = tone_segments(sub) if len(cut) >= int(0.03 * audio.rate) else []
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
