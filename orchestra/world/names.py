"""Pronounceable generated names, near-namesake variants and URL slugs for the world's entities."""

from __future__ import annotations

import re

import numpy as np

# 'l', 'c', 'j', 'q', 'w', 'x', 'y' are left out: they are easy to confuse in OCR (l/I) or Morse-heavy.
_ONSETS = ("b", "d", "f", "g", "h", "k", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "dr")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "r", "s", "m")


def make_word(
    rng: np.random.Generator, min_syllables: int = 2, max_syllables: int = 3, max_len: int = 9
) -> str:
    """One capitalised pronounceable word of letters a-z, at most ``max_len`` letters."""
    while True:
        n = int(rng.integers(min_syllables, max_syllables + 1))
        parts = []
        for i in range(n):
            onset = _ONSETS[int(rng.integers(len(_ONSETS)))]
            coda = _CODAS[int(rng.integers(len(_CODAS)))] if i == n - 1 else ""
            parts.append(onset + _VOWELS[int(rng.integers(len(_VOWELS)))] + coda)
        word = "".join(parts)
        if 4 <= len(word) <= max_len:
            return word.capitalize()


def one_letter_variant(rng: np.random.Generator, word: str) -> str:
    """``word`` with one vowel (or, failing that, one consonant) replaced: a near-namesake."""
    letters = list(word.lower())
    vowels = [i for i, ch in enumerate(letters) if ch in _VOWELS and i > 0]
    if vowels:
        i = vowels[int(rng.integers(len(vowels)))]
        choices = [v for v in _VOWELS if v != letters[i]]
    else:
        i = int(rng.integers(1, len(letters)))
        choices = [c for c in "bdfgkmnprstvz" if c != letters[i]]
    letters[i] = choices[int(rng.integers(len(choices)))]
    return "".join(letters).capitalize()


def slugify(title: str) -> str:
    """The wiki slug of a title: lowercase letters/digits joined by underscores."""
    slug = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
    return slug or "page"
