"""Speech DSP for the template recogniser: noise-combined MFCCs, energy-based chunking and compiled DTW."""

from __future__ import annotations

from dataclasses import dataclass

import numba
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


@numba.njit(cache=True, nogil=True)
def _dtw(query: np.ndarray, cep: np.ndarray, m: int) -> float:  # pragma: no cover (compiled)
    """acc[n, m] / (n + m) for one template, its cepstra ``cep`` (N_CEPS, >= m) by coefficient, row by
    row: acc[i, j] = min(acc[i-1, j] + c, acc[i, j-1] + c, acc[i-1, j-1] + 2c), c the Euclidean
    distance of query frame i and template frame j. A row's distances are computed first, across the
    template's frames (a loop the compiler vectorises), then the recursion runs along the row."""
    n, d = query.shape
    prev = np.full(m + 1, np.inf)
    cur = np.empty(m + 1)
    row = np.empty(m)
    prev[0] = 0.0
    for i in range(n):
        row[:] = 0.0
        for e in range(d):
            qe = query[i, e]
            for j in range(m):
                diff = qe - cep[e, j]
                row[j] += diff * diff
        cur[0] = np.inf
        for j in range(1, m + 1):
            c = np.sqrt(row[j - 1])
            cur[j] = min(min(prev[j], cur[j - 1]) + c, prev[j - 1] + 2.0 * c)
        prev, cur = cur, prev
    return prev[m] / (n + m)


@numba.njit(cache=True, nogil=True)
def _match(  # pragma: no cover (compiled)
    query: np.ndarray,
    frames: np.ndarray,
    offsets: np.ndarray,
    which: np.ndarray,
    speech: float,
    noise: np.ndarray,
    dct: np.ndarray,
) -> np.ndarray:
    """:func:`match` after its scalars are known: per template, its frames in the noise, their
    normalised cepstra (in one scratch table), then the DTW."""
    n_ceps, n_mels = dct.shape
    longest = 1
    for t in which:
        longest = max(longest, offsets[t + 1] - offsets[t])
    cep = np.empty((n_ceps, longest))
    logm = np.empty(n_mels)
    out = np.empty(len(which))
    for r in range(len(which)):
        a, m = offsets[which[r]], offsets[which[r] + 1] - offsets[which[r]]
        own = 0.0
        for f in range(a, a + m):
            for b in range(n_mels):
                own += frames[f, b]
        gain = speech / (own / m)
        for f in range(m):
            for b in range(n_mels):
                logm[b] = np.log(frames[a + f, b] * gain + noise[b] + 1e-10)
            for e in range(n_ceps):
                s = 0.0
                for b in range(n_mels):
                    s += logm[b] * dct[e, b]
                cep[e, f] = s
        for e in range(n_ceps):
            mu = 0.0
            for f in range(m):
                mu += cep[e, f]
            mu /= m
            var = 0.0
            for f in range(m):
                var += (cep[e, f] - mu) ** 2
            sd = np.sqrt(var / m) + 1e-6
            for f in range(m):
                cep[e, f] = (cep[e, f] - mu) / sd
        out[r] = _dtw(query, cep, m)
    return out


def match(
    query: np.ndarray,
    span: np.ndarray,
    noise: np.ndarray,
    frames: np.ndarray,
    offsets: np.ndarray,
    which: np.ndarray,
) -> np.ndarray:
    """Length-normalised DTW distances of ``query`` (the span's :func:`cepstra`, (n, N_CEPS)) to the
    templates ``which`` of ``frames`` (clean mel energies end to end, template i in rows
    ``offsets[i]:offsets[i + 1]``). Each template is first heard in the span's noise (parallel model
    combination: scaled to the span's speech energy, its mean energy less the noise's, plus the noise's
    mel energies) and turned into normalised cepstra as the query was. DTW: steps (1,0) and (0,1) at
    weight 1, (1,1) at weight 2, Euclidean frame distances, the path cost divided by n + m. Compiled
    (numba), one template at a time, so nothing is padded or held for a batch."""
    speech = max(float(span.sum(1).mean() - noise.sum()), 1e-3 * float(noise.sum()) + 1e-12)
    return _match(
        np.ascontiguousarray(query, dtype=np.float64),
        np.ascontiguousarray(frames),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(which, dtype=np.int64),
        speech,
        np.asarray(noise, dtype=np.float64),
        _DCT,
    )
