"""Matching an utterance against speech templates: each template heard in the utterance's noise, its
cepstra and its DTW distance, compiled with numba (the templates' features are in speech_dsp)."""

from __future__ import annotations

import numba
import numpy as np

from orchestra.tools.speech_dsp import _DCT, N_MELS, cepstra


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


def warm() -> None:
    """Load the compiled matcher (from numba's cache on disk, or compile it) with the argument types a
    read passes: a tool worker does this at start, so its first speech call does not wait for it."""
    mel = np.ones((2, N_MELS))
    match(cepstra(mel), mel, mel[0], mel.astype(np.float32), np.array([0, 2]), np.array([0]))
