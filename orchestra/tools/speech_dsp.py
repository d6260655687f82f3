"""Speech DSP for the template recogniser: mel energies, MFCCs and energy-based chunking (the
templates are made with these, and their cache key hashes this module; matching is in speech_match)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestra.tools.audio_dsp import _frames
from orchestra.tools.media import MediaError

RATE = 16_000
WIN, HOP, NFFT = 400, 160, 512  # 25 ms Hann windows every 10 ms
N_MELS, N_CEPS = 20, 10  # c1..c10 (c0, the level, is left out: levels differ between speakers and gains)
F_LO, F_HI = 100.0, 7000.0  # above mains hum and its harmonics' worst, below the 8 kHz Nyquist


def _mel(f: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)


def _mel_filters() -> np.ndarray:
    """(N_MELS, NFFT // 2 + 1) triangular filters equally spaced on the mel scale in [F_LO, F_HI]."""
    edges = 700.0 * (10 ** (np.linspace(_mel(F_LO), _mel(F_HI), N_MELS + 2) / 2595.0) - 1.0)
    bins = np.fft.rfftfreq(NFFT, 1.0 / RATE)
    fb = np.zeros((N_MELS, len(bins)))
    for i in range(N_MELS):
        lo, mid, hi = edges[i : i + 3]
        fb[i] = np.clip(np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), 0.0, None)
    return fb


_FB = _mel_filters()
_DCT = np.cos(np.pi / N_MELS * (np.arange(N_MELS)[None, :] + 0.5) * np.arange(1, N_CEPS + 1)[:, None])


def power_spectrum(x: np.ndarray) -> np.ndarray:
    """(frames, NFFT // 2 + 1) power spectra of the pre-emphasised signal (25 ms Hann, 10 ms hop)."""
    x = np.append(x[:1], x[1:] - 0.97 * x[:-1]).astype(np.float64)
    return np.abs(np.fft.rfft(_frames(x, WIN, HOP) * np.hanning(WIN)[None, :], NFFT, axis=1)) ** 2


def mel_power(power: np.ndarray) -> np.ndarray:
    """(frames, N_MELS) mel filterbank energies of power spectra."""
    return power @ _FB.T


def cepstra(mel: np.ndarray) -> np.ndarray:
    """c1..c10 of mel energies (frames, N_MELS), each coefficient normalised to zero mean and unit
    variance over the frames (:func:`match` does the same to every template)."""
    c = np.log(mel + 1e-10) @ _DCT.T
    return (c - c.mean(0)) / (c.std(0) + 1e-6)


@dataclass(frozen=True)
class Chunk:
    """A run of loud frames [start, end) (10 ms frames) and its mean level over the floor (dB)."""

    start: int
    end: int
    snr_db: float


def frame_levels(power: np.ndarray) -> np.ndarray:
    """Each frame's level (dB) in the speech band 200-4000 Hz."""
    f = np.fft.rfftfreq(NFFT, 1.0 / RATE)
    band = (f >= 200) & (f <= 4000)
    return 10 * np.log10(power[:, band].sum(axis=1) + 1e-12)


def chunks(levels: np.ndarray, min_gap: int = 3, min_len: int = 4) -> tuple[list[Chunk], float]:
    """Loud stretches of ``levels`` (dB per frame) and the noise floor (dB). The floor is the 10th
    percentile, the top the 98th; a Schmitt trigger turns on above floor + max(8 dB, 30 % of the
    range) and off below floor + max(5 dB, 20 %); gaps under ``min_gap`` frames close; runs under
    ``min_len`` frames drop."""
    if len(levels) < 10:
        raise MediaError(f"audio too short for speech ({len(levels) * HOP / RATE:.2f} s)")
    floor, top = float(np.percentile(levels, 10)), float(np.percentile(levels, 98))
    span = top - floor
    if span < 10.0:
        return [], floor
    on_thr, off_thr = floor + max(8.0, 0.3 * span), floor + max(5.0, 0.2 * span)
    loud = np.zeros(len(levels), dtype=bool)
    state = False
    for i, v in enumerate(levels):
        state = v > on_thr if not state else v > off_thr
        loud[i] = state
    runs: list[list[int]] = []
    i = 0
    while i < len(loud):
        if loud[i]:
            j = i
            while j < len(loud) and loud[j]:
                j += 1
            if runs and i - runs[-1][1] < min_gap:
                runs[-1][1] = j
            else:
                runs.append([i, j])
            i = j
        else:
            i += 1
    return [
        Chunk(a, b, round(float(np.mean(levels[a:b])) - floor, 1)) for a, b in runs if b - a >= min_len
    ], floor
