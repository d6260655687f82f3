"""Spoken numbers and years: English number words, rendered by espeak-ng with a seeded voice, speed,
pause between words and noise level; the words spoken are the ground truth."""

from __future__ import annotations

from typing import Any

import numpy as np

from orchestra.errors import WorldError
from orchestra.espeak import TENS, UNITS

#: the world's speakers: espeak-ng languages x voice variants (the recogniser's templates use others)
WORLD_LANGS: tuple[str, ...] = ("en-us", "en", "en-gb-x-rp", "en-gb-scotland")
WORLD_VARIANTS: tuple[str, ...] = ("", "+m3", "+f2", "+m7", "+f4")
#: languages whose speakers say "and" after "hundred" / "thousand" ("four hundred and twelve")
BRITISH: frozenset[str] = frozenset({"en", "en-gb-x-rp", "en-gb-scotland"})


def _under_100(n: int) -> list[str]:
    if n < 20:
        return [UNITS[n]]
    return [TENS[n // 10]] + ([UNITS[n % 10]] if n % 10 else [])


def number_words(n: int, british: bool = False) -> list[str]:
    """The English cardinal of ``0 <= n < 1,000,000`` in words ("and" after hundred / thousand if
    ``british``)."""
    if not 0 <= n < 1_000_000:
        raise WorldError(f"cannot say {n}: spoken numbers are 0..999999")
    if n < 100:
        return _under_100(n)
    if n < 1000:
        rest = n % 100
        head = [UNITS[n // 100], "hundred"]
        return head + ((["and"] if british else []) + _under_100(rest) if rest else [])
    rest = n % 1000
    words = number_words(n // 1000) + ["thousand"]
    if not rest:
        return words
    return words + (["and"] if british and rest < 100 else []) + number_words(rest, british)


def year_words(y: int, british: bool = False) -> list[str]:
    """A year as people say it: 1984 "nineteen eighty four", 1905 "nineteen oh five", 1900 "nineteen
    hundred", 2007 "two thousand (and) seven", 2000 "two thousand", 1000 "one thousand"; 1000..2099."""
    if not 1000 <= y <= 2099:
        raise WorldError(f"cannot say the year {y}: spoken years are 1000..2099")
    hi, lo = divmod(y, 100)
    if y == 1000 or 2000 <= y <= 2009:
        return number_words(y, british)
    if lo == 0:
        return _under_100(hi) + ["hundred"]
    return _under_100(hi) + (["oh", UNITS[lo]] if lo < 10 else _under_100(lo))


def speaker(rng: np.random.Generator) -> dict[str, Any]:
    """A world speaker: voice (language + variant), speed (words per minute) and pause between words."""
    lang = WORLD_LANGS[int(rng.integers(len(WORLD_LANGS)))]
    variant = WORLD_VARIANTS[int(rng.integers(len(WORLD_VARIANTS)))]
    return {
        "lang": lang,
        "voice": lang + variant,
        "speed_wpm": int(rng.integers(120, 181)),
        "word_gap_10ms": int(rng.integers(6, 16)),
    }
