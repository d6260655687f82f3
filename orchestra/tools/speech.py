"""Spoken-number recognition offline: MFCC + DTW against word templates that espeak-ng renders at
build time (cached on disk by content hash), energy chunking, and a grammar-constrained search."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from orchestra.errors import ToolError
from orchestra.espeak import espeak, espeak_each, resample
from orchestra.espeak import version as espeak_version
from orchestra.tools.audio import audio_schema
from orchestra.tools.audio_dsp import sigmoid_conf
from orchestra.tools.base import FailureKinds, Observation, Tool
from orchestra.tools.media import FILE_FAILURES, Audio, MediaError, load_wav
from orchestra.tools.speech_dsp import (
    RATE,
    cepstra,
    chunks,
    frame_levels,
    mel_power,
    power_spectrum,
)
from orchestra.tools.speech_match import match
from orchestra.tools.speech_words import START, VOCABULARY, accepts, advance, words_to_number

#: template speakers (espeak-ng language + variant): the world's accents, each in variants the world
#: never speaks with (its speakers stay held out); the first FIRST_PASS voices
#: pick the candidate words. Accents the world never uses (en-029, en-gb-x-gbclan, en-us-nyc,
#: en-gb-x-gbcwmd with "", +m1, +f1, +m5, +f5, +m2, +f3) read 0.888 of 188 bench words instead of 0.947.
_LANGS = ("en-us", "en", "en-gb-x-rp", "en-gb-scotland")
_VARIANTS = ("+m6", "+m1", "+f1", "+m5", "+f5", "+m2", "+f3")
TEMPLATE_VOICES: tuple[str, ...] = tuple(  # 4 and 7 are coprime: i -> (i % 4, i % 7) meets every pair once
    _LANGS[i % len(_LANGS)] + _VARIANTS[i % len(_VARIANTS)] for i in range(len(_LANGS) * len(_VARIANTS))
)
FIRST_PASS = 5  # voices (every language at least once)
CANDIDATES = 8  # words the first pass keeps for the second
TEMPLATE_SPEED = 150
MAX_WORD_FRAMES = 130  # a span longer than 1.3 s is never one word
MAX_INNER_GAP = 12  # frames: a longer pause is between words, never inside one (a stop closure is shorter)
WORD_PENALTY = 16.0  # added per word (in frame-distance units): fewer, longer words win close calls
SKIP_COST = 4.0  # per frame of a chunk left out as noise (words match at 1.5-2.5 per frame)
NAME_VOICES = 28  # the names' templates: every template voice
KEEP_CACHED = 6  # template files kept in the cache dir: the number words and the names of five worlds
NAME_FIRST_PASS = 4  # of them, the voices that pick the candidate names (one per accent)


def _espeak(word: str, voice: str) -> np.ndarray:
    x, rate = espeak(word, voice, TEMPLATE_SPEED, error=ToolError)
    return resample(x, rate, RATE)


def _word_features(x: np.ndarray) -> np.ndarray:
    """Mel energies of the loud part of a clean one-word recording (first chunk start to last end)."""
    power = power_spectrum(x)
    found, _ = chunks(frame_levels(power))
    if not found:
        raise ToolError("espeak-ng rendered a silent word template")
    return mel_power(power[max(0, found[0].start - 2) : found[-1].end + 2])


def _cache_dir() -> Path:
    root = os.environ.get("ORCHESTRA_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    sub = "" if os.environ.get("ORCHESTRA_CACHE_DIR") else "orchestra"
    return Path(root).expanduser() / sub / "speech_templates"


@dataclass(frozen=True)
class Templates:
    """Word templates: the clean mel energies of every template end to end in ``frames`` (total,
    N_MELS) float32, template i in rows ``offsets[i]:offsets[i + 1]``; ``lengths`` (k,), ``words``
    (k,), voice by voice, in vocabulary order within a voice."""

    frames: np.ndarray
    offsets: np.ndarray
    words: tuple[str, ...]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


#: what this thread's calls loaded since :func:`loads_taken` last ran (a cold call reports it)
_LOADS = threading.local()


def _note_load(text: str) -> None:
    _LOADS.__dict__.setdefault("notes", []).append(text)


def loads_taken() -> list[str]:
    """What the calling thread loaded (templates read or rendered, with seconds) since the last call."""
    return _LOADS.__dict__.pop("notes", [])


def _cached(
    what: tuple[Any, ...], render: Callable[[], list[tuple[str, np.ndarray]]], label: str = "word"
) -> Templates:
    """Templates of ``render()`` (word, clean recording) pairs, kept under the cache dir in a file named
    by the SHA-256 of ``what`` (vocabulary, voices, speed), the espeak-ng version and the feature code.
    Processes that miss the file at once render it once: the first under a lock, the rest read it.
    Notes what it did and how long it took (:func:`loads_taken`)."""
    t0 = time.perf_counter()
    t, how = _find_or_build(what, render)
    took = time.perf_counter() - t0
    _note_load(f"{len(t.words)} {label} templates ({t.frames.nbytes / 1e6:.0f} MB) {how} in {took:.2f} s")
    return t


def _find_or_build(
    what: tuple[Any, ...], render: Callable[[], list[tuple[str, np.ndarray]]]
) -> tuple[Templates, str]:
    import inspect

    import orchestra.espeak
    from orchestra.tools import speech_dsp

    key = hashlib.sha256(
        repr(
            (*what, espeak_version(ToolError))
            + tuple(inspect.getsource(m) for m in (speech_dsp, orchestra.espeak))
        ).encode()
    ).hexdigest()[:20]
    path = _cache_dir() / f"{key}.npz"
    found = _load(path)
    if found is not None:
        return found, "read from the cache"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = (path.parent / ".build.lock").open("w")
    except OSError as e:
        raise ToolError(f"cannot cache the speech templates under {path.parent}: {e}") from e
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process renders (the worker pool starts them together)
        found = _load(path)  # the others read what it wrote
        if found is not None:
            return found, "read from the cache"
        return _build(path, render), "rendered with espeak-ng"


def _load(path: Path) -> Templates | None:
    """The templates stored at ``path``, marked used now; None if absent, torn or foreign."""
    try:
        with np.load(path) as z:
            t = Templates(z["frames"], z["offsets"], tuple(str(w) for w in z["words"]))
        os.utime(path)  # last used now: :func:`_prune` removes the least recently used
        return t
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # absent, or pruned meanwhile, or not ours: built again and replaced atomically


def _build(path: Path, render: Callable[[], list[tuple[str, np.ndarray]]]) -> Templates:
    """Render, take the features, store them atomically at ``path`` and prune the folder."""
    words, feats = zip(*((w, _word_features(x)) for w, x in render()), strict=True)
    offsets = np.concatenate([[0], np.cumsum([len(f) for f in feats])])
    t = Templates(np.concatenate(feats).astype(np.float32), offsets, tuple(words))
    try:
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        # uncompressed: a world's names read in 0.04 s, where decompressing took over a second
        np.savez(tmp, frames=t.frames, offsets=t.offsets, words=np.array(t.words))
        os.replace(tmp, path)
    except OSError as e:
        raise ToolError(f"cannot cache the speech templates under {path.parent}: {e}") from e
    _prune(path.parent)
    return t


def _prune(folder: Path, keep: int = KEEP_CACHED) -> None:
    """Remove all but the ``keep`` most recently used template files of ``folder`` (a world's names
    are about 60 MB, and every new world has new names); files being written are left alone."""
    files = [f for f in folder.glob("*.npz") if ".tmp." not in f.name]
    used = []
    for f in files:
        try:
            used.append((f.stat().st_mtime, f))
        except OSError:
            continue  # removed by another process meanwhile
    for _, f in sorted(used, reverse=True)[keep:]:
        f.unlink(missing_ok=True)


@functools.cache
def templates() -> Templates:
    """Every number word in every template voice (rendered once, then read from the cache dir)."""
    return _cached(
        (VOCABULARY, TEMPLATE_VOICES, TEMPLATE_SPEED),
        lambda: [(w, _espeak(w, v)) for v in TEMPLATE_VOICES for w in VOCABULARY],
    )


@functools.cache
def name_templates(names: tuple[str, ...]) -> Templates:
    """Every name in the first NAME_VOICES template voices, one espeak-ng call per voice (rendered once
    per name list, then read from the cache dir)."""

    def render() -> list[tuple[str, np.ndarray]]:
        out = []
        for voice in TEMPLATE_VOICES[:NAME_VOICES]:
            said = espeak_each(list(names), voice, TEMPLATE_SPEED, error=ToolError)
            out += [(n, resample(x, rate, RATE)) for n, (x, rate) in zip(names, said, strict=True)]
        return out

    return _cached(("names", names, TEMPLATE_VOICES[:NAME_VOICES], TEMPLATE_SPEED), render, "name")


def _name_scores(
    mel: np.ndarray, found: list[Any], noise: np.ndarray, names: tuple[str, ...]
) -> np.ndarray | None:
    """Each name's best DTW distance to the whole utterance (first chunk start to last chunk end): the
    first NAME_FIRST_PASS voices' templates, then every name voice's template of the CANDIDATES best;
    None when the utterance is longer than twice the longest name template (no name fits)."""
    t = name_templates(names)
    s, e = max(0, found[0].start - 2), min(len(mel), found[-1].end + 2)
    if e - s > 2 * int(t.lengths.max()):
        return None
    query, k = cepstra(mel[s:e]), len(names)
    best = match(query, mel[s:e], noise, t.frames, t.offsets, np.arange(k * NAME_FIRST_PASS))
    best = best.reshape(NAME_FIRST_PASS, k).min(axis=0)
    keep = np.argsort(best)[:CANDIDATES]
    more = np.array([v * k + w for v in range(NAME_FIRST_PASS, NAME_VOICES) for w in keep])
    d2 = match(query, mel[s:e], noise, t.frames, t.offsets, more).reshape(-1, len(keep)).min(axis=0)
    best[keep] = np.minimum(best[keep], d2)
    return best


@dataclass
class _Hyp:
    cost: float
    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    states: frozenset[str]


def recognise(audio: Audio, beam: int = 40, names: tuple[str, ...] = ()) -> dict[str, Any]:
    """Words, value (a number, or one of ``names``) and scores of what ``audio`` says.

    Chunks (:func:`chunks`) are grouped into words by a search over chunk boundaries: a group of up to
    three neighbouring chunks (at most 1.3 s) costs its frames times its best template's DTW distance
    (per word, the best of its templates) plus a word penalty; a chunk may be left out as noise at a
    fixed cost per frame. Only word sequences the number grammar allows survive (a beam of ``beam``
    hypotheses per boundary). With ``names``, each name is one more hypothesis: the whole utterance
    against that name's templates, its frames times the distance plus one word penalty. ``margin`` is
    the cost gap per frame to the best hypothesis that reads a different value."""
    if audio.rate != RATE:
        raise MediaError(f"the speech tool reads 16 kHz audio, this file is {audio.rate} Hz")
    x = audio.samples.astype(np.float64)
    if not np.any(x):
        raise MediaError("the audio is silent: no speech to recognise")
    power = power_spectrum(x)
    levels = frame_levels(power)
    found, floor = chunks(levels)
    if not found:
        raise MediaError("no speech found: the audio has no stretch louder than its noise floor")
    mel = mel_power(power)
    quiet = levels <= floor + 3.0
    noise = mel[quiet].mean(axis=0) if quiet.sum() >= 5 else mel[np.argsort(levels)[:5]].mean(axis=0)
    t = templates()
    vocab = list(VOCABULARY)
    first = len(vocab) * FIRST_PASS
    scores: dict[tuple[int, int], np.ndarray] = {}  # (first chunk, last chunk + 1) -> per-word distance

    def span_scores(a: int, b: int) -> np.ndarray:
        """Each word's best DTW distance to the span: all first-pass templates, then every voice's
        template of the CANDIDATES best words (the others keep their first-pass distance)."""
        if (a, b) not in scores:
            s, e = max(0, found[a].start - 2), min(len(mel), found[b - 1].end + 2)
            query = cepstra(mel[s:e])
            d1 = match(query, mel[s:e], noise, t.frames, t.offsets, np.arange(first))
            best = d1.reshape(FIRST_PASS, len(vocab)).min(axis=0)
            keep = np.argsort(best)[:CANDIDATES]
            more = np.array(
                [v * len(vocab) + w for v in range(FIRST_PASS, len(TEMPLATE_VOICES)) for w in keep]
            )
            d2 = match(query, mel[s:e], noise, t.frames, t.offsets, more).reshape(-1, len(keep)).min(axis=0)
            best[keep] = np.minimum(best[keep], d2)
            scores[(a, b)] = best
        return scores[(a, b)]

    hyps: list[list[_Hyp]] = [[] for _ in range(len(found) + 1)]
    hyps[0] = [_Hyp(0.0, (), (), START)]
    for a in range(len(found)):
        for h in sorted(hyps[a], key=lambda h: h.cost)[:beam]:
            frames = found[a].end - found[a].start
            hyps[a + 1].append(_Hyp(h.cost + SKIP_COST * frames, h.words, h.spans, h.states))
            for b in range(a + 1, min(len(found), a + 3) + 1):
                length = found[b - 1].end - found[a].start
                inner_gap = found[b - 1].start - found[b - 2].end if b > a + 1 else 0
                if length > MAX_WORD_FRAMES or inner_gap > MAX_INNER_GAP:
                    break
                dist = span_scores(a, b)
                for w, d in zip(vocab, dist, strict=True):
                    nxt = advance(h.states, w)
                    if nxt:
                        c = h.cost + d * length + WORD_PENALTY
                        hyps[b].append(_Hyp(c, (*h.words, w), (*h.spans, (a, b)), nxt))
    total = sum(c.end - c.start for c in found)
    heard: list[tuple[float, int | str, tuple[str, ...], tuple[tuple[int, int], ...]]] = [
        (h.cost, words_to_number(list(h.words)), h.words, h.spans)
        for h in hyps[-1]
        if h.words and accepts(h.states)
    ]
    named = _name_scores(mel, found, noise, names) if names else None
    if named is not None:
        frames = found[-1].end - found[0].start
        whole = ((0, len(found)),)
        heard += [
            (float(d) * frames + WORD_PENALTY, n, (n,), whole) for n, d in zip(names, named, strict=True)
        ]
    if not heard:
        what = "number or name" if names else "number"
        raise MediaError(f"no spoken {what} found: the sounds match no sequence of known words")
    heard.sort(key=lambda h: h[0])
    cost, value, said, spans = heard[0]
    rival = next((h for h in heard[1:] if h[1] != value), None)
    margin = (rival[0] - cost) / total if rival is not None else 10.0
    return {
        "words": " ".join(said).split(),
        "value": value,
        "kind": "name" if isinstance(value, str) else "number",
        "margin": round(float(margin), 3),
        "rival": " ".join(rival[2]) if rival is not None else None,
        "segments": [
            {"word": w, "start": round(found[a].start * 0.01, 3), "end": round(found[b - 1].end * 0.01, 3)}
            for w, (a, b) in zip(said, spans, strict=True)
        ],
        "chunks": len(found),
        "snr_db": round(min(c.snr_db for c in found), 1) if found else 0.0,
    }


class AudioSpeech(Tool):
    """Recognise a spoken English number, year or name (closed vocabulary, no downloaded weights).

    :func:`recognise`: MFCCs with spectral noise subtraction, DTW against espeak-ng word templates of
    voices other than the ones it is measured on, grammar-constrained grouping of energy chunks into
    words. ``names`` are the names it may hear besides numbers: the registry gives it the titles of
    the pages search serves (the names search already exposes), and they are part of its ``version``.
    ``confidence`` is ``sigmoid_conf`` of the cost margin to the best different value."""

    name: ClassVar[str] = "audio_speech"
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Transcribe a spoken English number, year or name in a WAV file (closed vocabulary: number "
        "words and the names of the pages search knows): returns the words and what they say "
        "('four hundred and twelve' -> 412, 'nineteen oh five' -> 1905, or the name), each word's time "
        "and a confidence."
    )
    input_schema: ClassVar[dict[str, Any]] = audio_schema()
    CALIBRATION: ClassVar[tuple[float, float]] = (0.5, 0.4)

    def __init__(self, names: tuple[str, ...] | list[str] = ()) -> None:
        self.names = tuple(sorted({" ".join(n.split()) for n in names} - {""}))
        if self.names:
            digest = hashlib.sha256("\n".join(self.names).encode()).hexdigest()[:12]
            self.version = f"{type(self).version}-names-{digest}"

    def config(self) -> dict[str, Any]:
        return {"names": list(self.names)} if self.names else {}

    def run(self, path: str) -> Observation:
        loads_taken()  # what an earlier call of this thread left
        result = recognise(load_wav(path), names=self.names)
        conf = sigmoid_conf(result["margin"], *self.CALIBRATION)
        said = " ".join(result["words"])
        value = result["value"]
        text = (
            f"Speech: '{said}'"
            + ("" if isinstance(value, str) else f" = {value}")
            + f" (confidence {conf:.2f})"
        )
        number = None if isinstance(value, str) else value
        data = {**result, "text": said, "number": number, "confidence": conf}
        loaded = loads_taken()
        if loaded:  # a cold call: what it loaded first, and how long that took
            data["loaded"] = loaded
        return Observation(tool=self.name, text=text, data=data)
