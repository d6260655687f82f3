"""Audio renderers (16 kHz mono int16) with exact ground truth: DTMF digits, beep trains, Morse, speech."""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.errors import WorldError
from orchestra.espeak import espeak, resample
from orchestra.io import atomic_write_bytes
from orchestra.world.speech import BRITISH, number_words, speaker, year_words

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


def _tone(
    freqs: tuple[float, ...], dur: float, amp: float, weights: tuple[float, ...] | None = None
) -> np.ndarray:
    n = int(round(dur * SAMPLE_RATE))
    t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
    w = weights or (1.0,) * len(freqs)
    x = sum(wi * np.sin(2 * np.pi * f * t) for f, wi in zip(freqs, w, strict=True)) / len(freqs)
    ramp = min(int(0.005 * SAMPLE_RATE), n // 2)
    if ramp:
        env = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, ramp))
        x[:ramp] *= env
        x[-ramp:] *= env[::-1]
    return amp * x


def _level(noise: float) -> float:
    """The difficulty level in [0, 1] that scales timing, fading and interference (noise uses ``noise``)."""
    return float(np.clip(noise, 0.0, 1.0))


def _assemble(
    rng: np.random.Generator,
    parts: list[tuple[float, np.ndarray]],
    end_s: float,
    noise: float,
    hums: tuple[tuple[float, ...], ...],
    amp: float,
    noise_std: float | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Place (onset_s, samples) parts on a silent track of ``end_s`` seconds and degrade it the way a
    real recording is: with probability level / 2 a steady interfering tone (one of ``hums``, at 15-55 %
    of ``amp``), white noise of std 0.3 * noise (or ``noise_std``), and a recording gain of 0 to
    -24 * level dB."""
    lv = _level(noise)
    track = np.zeros(int(round(end_s * SAMPLE_RATE)), dtype=np.float64)
    for onset, x in parts:
        i = int(round(onset * SAMPLE_RATE))
        track[i : i + len(x)] += x[: len(track) - i]
    hum: list[float] = []
    if hums and rng.random() < 0.5 * lv:
        hum = list(hums[int(rng.integers(len(hums)))])
        t = np.arange(len(track)) / SAMPLE_RATE
        h_amp = amp * float(rng.uniform(0.15, 0.55))
        track += h_amp * sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)) for f in hum) / len(hum)
    std = 0.3 * noise if noise_std is None else noise_std
    if std > 0:
        track += rng.normal(0.0, std, len(track))
    gain_db = -float(rng.uniform(0.0, 24.0 * lv))
    track *= 10 ** (gain_db / 20)
    x = np.clip(np.rint(track * 32767), -32768, 32767).astype(np.int16)
    return x, {"noise_std": round(std, 4), "gain_db": round(gain_db, 2), "interference_hz": hum}


def _r(x: float) -> float:
    return round(float(x), 4)


def _other_tone(rng: np.random.Generator, freq: float) -> tuple[tuple[float, ...], ...]:
    """Steady interferers for a tone at ``freq``: mains hum with harmonics or a carrier >= 200 Hz away."""
    away = [f for f in range(300, 2500, 50) if abs(f - freq) >= 200]
    return ((50.0, 150.0), (60.0, 180.0), (float(away[int(rng.integers(len(away)))]),))


def render_dtmf(rng: np.random.Generator, digits: str, noise: float) -> tuple[np.ndarray, dict[str, Any]]:
    """Standard DTMF key tones for ``digits`` (0-9, *, #, A-D), one tone per key with silent gaps.
    A higher level means shorter keys and gaps (down to 45 ms, the ITU Q.24 minimum), row/column
    twist and per-key level changes up to +-4 / -6 dB, a dial tone or hum underneath, more noise."""
    bad = [d for d in digits if d not in DTMF_FREQS]
    if bad or not digits:
        raise WorldError(f"cannot dial {digits!r} with DTMF")
    lv = _level(noise)
    amp = float(rng.uniform(0.35, 0.6))
    t = _r(rng.uniform(0.2, 0.5))
    parts, onsets, durs = [], [], []
    for d in digits:
        dur = _r(rng.uniform(0.10 - 0.055 * lv, 0.18 - 0.09 * lv))
        twist = float(rng.uniform(-4 * lv, 4 * lv))
        gain = 10 ** (-float(rng.uniform(0, 6 * lv)) / 20)
        w = (10 ** (twist / 40), 10 ** (-twist / 40))
        parts.append((t, _tone(DTMF_FREQS[d], dur, amp * gain, w)))
        onsets.append(t)
        durs.append(dur)
        t = _r(t + dur + rng.uniform(0.08 - 0.035 * lv, 0.15 - 0.08 * lv))
    end = _r(t + 0.3)
    x, deg = _assemble(rng, parts, end, noise, ((350.0, 440.0), (440.0, 480.0), (50.0, 150.0)), amp)
    truth = {
        "kind": "dtmf",
        "digits": digits,
        "onsets_s": onsets,
        "durations_s": durs,
        "tone_pairs_hz": [list(DTMF_FREQS[d]) for d in digits],
        "sample_rate": SAMPLE_RATE,
        "duration_s": end,
        "level": round(float(noise), 4),
        **deg,
    }
    return x, truth


def render_beeps(
    rng: np.random.Generator, noise: float, count: int | None = None, freq_hz: int | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """A train of ``count`` equal-pitch sine beeps (pitch a multiple of 100 Hz) with jittered spacing.
    A higher level means shorter beeps and gaps, more spacing jitter, beeps up to 14 dB quieter than
    the loudest, a steady hum or carrier underneath, more noise and a lower recording gain."""
    lv = _level(noise)
    count = count if count is not None else int(rng.integers(2, 10))
    freq_hz = freq_hz if freq_hz is not None else int(rng.integers(4, 16)) * 100
    amp = float(rng.uniform(0.35, 0.6))
    dur = _r(rng.uniform(0.10 - 0.05 * lv, 0.20 - 0.08 * lv))
    gap = float(rng.uniform(0.15 - 0.08 * lv, 0.35 - 0.15 * lv))
    t = _r(rng.uniform(0.2, 0.5))
    parts, onsets = [], []
    for _ in range(count):
        gain = 10 ** (-float(rng.uniform(0, 14 * lv)) / 20)
        parts.append((t, _tone((freq_hz,), dur, amp * gain)))
        onsets.append(t)
        t = _r(t + dur + gap * rng.uniform(0.8 - 0.2 * lv, 1.2 + 0.2 * lv))
    end = _r(t + 0.3)
    x, deg = _assemble(rng, parts, end, noise, _other_tone(rng, freq_hz), amp)
    truth = {
        "kind": "beeps",
        "count": count,
        "freq_hz": freq_hz,
        "onsets_s": onsets,
        "durations_s": [dur] * count,
        "sample_rate": SAMPLE_RATE,
        "duration_s": end,
        "level": round(float(noise), 4),
        **deg,
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
    """``text`` keyed in Morse with ITU timing (PARIS: unit = 1.2 / wpm seconds). A higher level keys
    it faster and by a shakier hand (each element and gap off by up to +-18 % * level, dash weight
    3 +- 0.5 * level units), with slow fading (QSB) down to -15 dB, a hum or carrier, more noise."""
    code = morse_code(text)
    lv = _level(noise)
    wpm = wpm if wpm is not None else round(float(rng.uniform(16 + 4 * lv, 22 + 6 * lv)), 2)
    unit = 1.2 / wpm
    freq = int(rng.integers(11, 18)) * 50
    amp = float(rng.uniform(0.35, 0.6))
    weight = 3.0 + float(rng.uniform(-0.5, 0.5)) * lv
    jit = 0.18 * lv

    def wobble(units: float) -> float:
        return units * unit * (1 + float(rng.uniform(-jit, jit)))

    start = _r(rng.uniform(0.2, 0.5))
    t = start
    parts, elements = [], []
    for wi, word in enumerate(code):
        if wi:
            t += wobble(7) - wobble(1)
        for ci, ch in enumerate(word.split(" ")):
            if ci:
                t += wobble(3) - wobble(1)
            for sym in ch:
                dur = wobble(1 if sym == "." else weight)
                elements.append([_r(t), _r(dur)])
                parts.append((t, _tone((freq,), dur, amp)))
                t += dur + wobble(1)
    end = _r(t + 0.4)
    depth, period, phase = float(rng.uniform(0, 0.82 * lv)), float(rng.uniform(0.8, 2.5)), rng.uniform(0, 6.3)
    parts = [(on, x * (1 - depth * (0.5 + 0.5 * np.sin(2 * np.pi * on / period + phase)))) for on, x in parts]
    x, deg = _assemble(rng, parts, end, noise, _other_tone(rng, freq), amp)
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
        "level": round(float(noise), 4),
        "fade_depth": round(depth, 3),
        **deg,
    }
    return x, truth


def render_speech(
    rng: np.random.Generator, value: int | str, noise: float, year: bool = False
) -> tuple[np.ndarray, dict[str, Any]]:
    """The number (or, with ``year``, the year) ``value`` said in English words by espeak-ng: see
    :func:`_say`. The truth lists the words spoken."""
    try:
        n = int(value)
    except ValueError as e:
        raise WorldError(f"cannot speak {value!r}: not a whole number") from e
    who = speaker(rng)
    british = who["lang"] in BRITISH
    words = year_words(n, british) if year else number_words(n, british)
    return _say(rng, who, words, str(n), noise, {"year": year})


def render_spoken_name(
    rng: np.random.Generator, name: str, noise: float
) -> tuple[np.ndarray, dict[str, Any]]:
    """The name ``name`` said by espeak-ng as it spells it (the speech tool's templates are espeak-ng's
    readings of the same names): see :func:`_say`."""
    words = name.split()
    if not words:
        raise WorldError("cannot speak an empty name")
    return _say(rng, speaker(rng), words, " ".join(words), noise, {"name": True})


def _say(
    rng: np.random.Generator,
    who: dict[str, Any],
    words: list[str],
    text: str,
    noise: float,
    extra: dict[str, Any],
) -> tuple[np.ndarray, dict[str, Any]]:
    """``words`` said by the speaker ``who`` (voice, 120-180 words per minute, a 60-150 ms pause between
    words) at peak 0.3-0.6. A higher level means white noise at a lower SNR (36 - 20 * level dB against
    the speech's RMS), maybe mains hum, and a lower recording gain."""
    gap = who["word_gap_10ms"]
    raw, rate = espeak(" ".join(words), who["voice"], who["speed_wpm"], gap, error=WorldError)
    x = resample(raw, rate, SAMPLE_RATE)
    amp = float(rng.uniform(0.3, 0.6))
    x *= amp / float(np.max(np.abs(x)))
    active = x[np.abs(x) > 0.02 * amp]
    rms = float(np.sqrt(np.mean(active**2)))
    snr_db = 36.0 - 20.0 * _level(noise)
    start = _r(rng.uniform(0.2, 0.5))
    end = _r(start + len(x) / SAMPLE_RATE + 0.3)
    hums = ((50.0, 150.0), (60.0, 180.0))
    out, deg = _assemble(rng, [(start, x)], end, noise, hums, 0.3 * amp, noise_std=rms * 10 ** (-snr_db / 20))
    truth = {
        "kind": "speech",
        "text": text,
        "words": words,
        **extra,
        "voice": who["voice"],
        "speed_wpm": who["speed_wpm"],
        "word_gap_ms": who["word_gap_10ms"] * 10,
        "onset_s": start,
        "sample_rate": SAMPLE_RATE,
        "duration_s": end,
        "level": round(float(noise), 4),
        "snr_db": round(snr_db, 2),
        **deg,
    }
    return out, truth


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
