"""Audio renderers (16 kHz mono int16) with exact ground truth: DTMF digits, beep trains, Morse, speech."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.errors import WorldError
from orchestra.io import atomic_write_bytes

SAMPLE_RATE = 16_000
DTMF_ROWS = (697, 770, 852, 941)
DTMF_COLS = (1209, 1336, 1477, 1633)
DTMF_KEYS = ("123A", "456B", "789C", "*0#D")
DTMF_FREQS: dict[str, tuple[int, int]] = {
    k: (DTMF_ROWS[r], DTMF_COLS[c]) for r, row in enumerate(DTMF_KEYS) for c, k in enumerate(row)
}
# ITU-R M.1677-1: dot = 1 unit, dash = 3, gap inside a character = 1, between characters = 3, words = 7.
MORSE: dict[str, str] = {
    "A": ".-",
    "B": "-...",
    "C": "-.-.",
    "D": "-..",
    "E": ".",
    "F": "..-.",
    "G": "--.",
    "H": "....",
    "I": "..",
    "J": ".---",
    "K": "-.-",
    "L": ".-..",
    "M": "--",
    "N": "-.",
    "O": "---",
    "P": ".--.",
    "Q": "--.-",
    "R": ".-.",
    "S": "...",
    "T": "-",
    "U": "..-",
    "V": "...-",
    "W": ".--",
    "X": "-..-",
    "Y": "-.--",
    "Z": "--..",
    "0": "-----",
    "1": ".----",
    "2": "..---",
    "3": "...--",
    "4": "....-",
    "5": ".....",
    "6": "-....",
    "7": "--...",
    "8": "---..",
    "9": "----.",
}


def _tone(freqs: tuple[float, ...], dur: float, amp: float) -> np.ndarray:
    n = int(round(dur * SAMPLE_RATE))
    t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
    x = sum(np.sin(2 * np.pi * f * t) for f in freqs) / len(freqs)
    ramp = min(int(0.005 * SAMPLE_RATE), n // 2)
    if ramp:
        env = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, ramp))
        x[:ramp] *= env
        x[-ramp:] *= env[::-1]
    return amp * x


def _assemble(
    rng: np.random.Generator, parts: list[tuple[float, np.ndarray]], end_s: float, noise: float
) -> tuple[np.ndarray, float]:
    """Place (onset_s, samples) parts on a silent track of ``end_s`` seconds, add white noise, to int16."""
    track = np.zeros(int(round(end_s * SAMPLE_RATE)), dtype=np.float64)
    for onset, x in parts:
        i = int(round(onset * SAMPLE_RATE))
        track[i : i + len(x)] += x[: len(track) - i]
    std = 0.3 * noise
    if std > 0:
        track += rng.normal(0.0, std, len(track))
    return np.clip(np.rint(track * 32767), -32768, 32767).astype(np.int16), round(std, 4)


def _r(x: float) -> float:
    return round(float(x), 4)


def render_dtmf(rng: np.random.Generator, digits: str, noise: float) -> tuple[np.ndarray, dict[str, Any]]:
    """Standard DTMF key tones for ``digits`` (0-9, *, #, A-D), one tone per key with silent gaps."""
    bad = [d for d in digits if d not in DTMF_FREQS]
    if bad or not digits:
        raise WorldError(f"cannot dial {digits!r} with DTMF")
    amp = float(rng.uniform(0.35, 0.6))
    t = _r(rng.uniform(0.2, 0.5))
    parts, onsets, durs = [], [], []
    for d in digits:
        dur = _r(rng.uniform(0.10, 0.18))
        parts.append((t, _tone(DTMF_FREQS[d], dur, amp)))
        onsets.append(t)
        durs.append(dur)
        t = _r(t + dur + rng.uniform(0.08, 0.15))
    end = _r(t + 0.3)
    x, std = _assemble(rng, parts, end, noise)
    truth = {
        "kind": "dtmf",
        "digits": digits,
        "onsets_s": onsets,
        "durations_s": durs,
        "tone_pairs_hz": [list(DTMF_FREQS[d]) for d in digits],
        "sample_rate": SAMPLE_RATE,
        "duration_s": end,
        "noise_std": std,
    }
    return x, truth


def render_beeps(
    rng: np.random.Generator, noise: float, count: int | None = None, freq_hz: int | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """A train of ``count`` equal-pitch sine beeps (pitch a multiple of 100 Hz) with jittered spacing."""
    count = count if count is not None else int(rng.integers(2, 10))
    freq_hz = freq_hz if freq_hz is not None else int(rng.integers(4, 16)) * 100
    amp = float(rng.uniform(0.35, 0.6))
    dur = _r(rng.uniform(0.10, 0.20))
    gap = float(rng.uniform(0.15, 0.35))
    t = _r(rng.uniform(0.2, 0.5))
    parts, onsets = [], []
    for _ in range(count):
        parts.append((t, _tone((freq_hz,), dur, amp)))
        onsets.append(t)
        t = _r(t + dur + gap * rng.uniform(0.8, 1.2))
    end = _r(t + 0.3)
    x, std = _assemble(rng, parts, end, noise)
    truth = {
        "kind": "beeps",
        "count": count,
        "freq_hz": freq_hz,
        "onsets_s": onsets,
        "durations_s": [dur] * count,
        "sample_rate": SAMPLE_RATE,
        "duration_s": end,
        "noise_std": std,
    }
    return x, truth


def morse_code(text: str) -> list[str]:
    """The Morse code of each word of ``text`` (letters and digits), characters separated by spaces."""
    words = text.upper().split()
    try:
        return [" ".join(MORSE[ch] for ch in w) for w in words]
    except KeyError as e:
        raise WorldError(f"no Morse code for {e.args[0]!r} in {text!r}") from e


def render_morse(
    rng: np.random.Generator, text: str, noise: float, wpm: float | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """``text`` keyed in Morse with standard ITU timing (PARIS: unit = 1.2 / wpm seconds)."""
    code = morse_code(text)
    wpm = wpm if wpm is not None else round(float(rng.uniform(16, 22)), 2)
    unit = 1.2 / wpm
    freq = int(rng.integers(11, 18)) * 50
    amp = float(rng.uniform(0.35, 0.6))
    start = _r(rng.uniform(0.2, 0.5))
    u = 0
    parts, elements = [], []
    for wi, word in enumerate(code):
        if wi:
            u += 7 - 3
        for ci, ch in enumerate(word.split(" ")):
            if ci:
                u += 3 - 1
            for sym in ch:
                n = 1 if sym == "." else 3
                elements.append([_r(start + u * unit), _r(n * unit)])
                parts.append((start + u * unit, _tone((freq,), n * unit, amp)))
                u += n + 1
    end = _r(start + (u - 1) * unit + 0.4)
    x, std = _assemble(rng, parts, end, noise)
    truth = {
        "kind": "morse",
        "text": text.upper(),
        "code": " / ".join(code),
        "wpm": wpm,
        "unit_s": _r(unit),
        "freq_hz": freq,
        "elements": elements,
        "sample_rate": SAMPLE_RATE,
        "duration_s": end,
        "noise_std": std,
    }
    return x, truth


def speech_available() -> bool:
    return shutil.which("espeak-ng") is not None


def render_speech(rng: np.random.Generator, text: str, noise: float) -> tuple[np.ndarray, dict[str, Any]]:
    """``text`` spoken by espeak-ng (if installed), resampled to 16 kHz."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise WorldError("espeak-ng is not installed; speech rendering is unavailable")
    speed = int(rng.integers(130, 170))
    try:
        out = subprocess.run(
            [exe, "-v", "en", "-s", str(speed), "--stdout", text], check=True, capture_output=True, timeout=30
        ).stdout
        with wave.open(io.BytesIO(out)) as w:
            rate, raw = w.getframerate(), w.readframes(w.getnframes())
    except (OSError, subprocess.SubprocessError, wave.Error, EOFError) as e:
        raise WorldError(f"espeak-ng failed on {text!r}: {e}") from e
    src = np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32768.0
    n = int(round(len(src) * SAMPLE_RATE / rate))
    speech = np.interp(np.arange(n) * rate / SAMPLE_RATE, np.arange(len(src)), src)
    start = _r(rng.uniform(0.2, 0.5))
    end = _r(start + n / SAMPLE_RATE + 0.3)
    x, std = _assemble(rng, [(start, speech)], end, noise)
    truth = {
        "kind": "speech",
        "text": text,
        "speed_wpm": speed,
        "onset_s": start,
        "sample_rate": SAMPLE_RATE,
        "duration_s": end,
        "noise_std": std,
    }
    return x, truth


def wav_bytes(samples: np.ndarray) -> bytes:
    """A plain 16-bit mono PCM WAV at 16 kHz (RIFF header only, no tags)."""
    if samples.dtype != np.int16 or samples.ndim != 1:
        raise WorldError("wav_bytes expects a 1-D int16 array")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(samples.astype("<i2").tobytes())
    return buf.getvalue()


def save_wav(samples: np.ndarray, path: Path) -> None:
    atomic_write_bytes(Path(path), wav_bytes(samples))
