"""Answer comparison: OmniGAIA's exact-match rule, our numeric match, and the rewards' answer equality.

The bottom of the library (nothing of orchestra imported): evaluation scores with :func:`exact_match`
and :func:`numeric_match`, the reference solutions check expected values with :func:`numeric_match`,
and training credits a final answer with :func:`answers_equal`.

- :func:`normalize` / :func:`exact_match`: the protocol's rule, case and whitespace only, punctuation
  and number formats kept, so "Paris." is not "Paris".
- :func:`numeric_match`: our own lenient extra, reported beside the protocol's scores, never in
  their place: two numbers within 1% (thousands commas, a sign, a trailing % read), else exact match.
- :func:`answers_equal`: case-folded, whitespace-collapsed equality, or two numbers equal to 1e-9.
"""

from __future__ import annotations

import math
import re

__all__ = ["answers_equal", "exact_match", "normalize", "numeric_match"]

_WS = re.compile(r"\s+")
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?%?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def normalize(text: str) -> str:
    """Lowercase, every whitespace run (newlines and tabs included) one space, stripped; nothing else."""
    return _WS.sub(" ", text.lower()).strip()


def exact_match(pred: str, gold: str) -> int:
    """1 if the normalised prediction equals the normalised gold answer; an empty prediction is 0."""
    p = normalize(pred)
    return int(bool(p) and p == normalize(gold))


def _number(text: str) -> float | None:
    s = text.strip()
    if not _NUMBER.fullmatch(s) or not any(c.isdigit() for c in s):
        return None
    return float(s.rstrip("%").replace(",", ""))


def numeric_match(pred: str, gold: str, rel_tol: float = 0.01, abs_tol: float = 1e-9) -> int:
    """1 if both sides are one number each and ``math.isclose`` within the tolerances; else exact match.

    A number may have thousands commas ("1,234"), a sign, decimals and a trailing % (dropped, not
    divided: "12%" is 12). Not part of the protocol: a lenient extra reported beside exact match.
    """
    a, b = _number(pred), _number(gold)
    if a is None or b is None:
        return exact_match(pred, gold)
    return int(math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol))


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


def _float(text: str) -> float | None:
    try:
        return float(text.replace(",", "") if _THOUSANDS.fullmatch(text) else text)
    except ValueError:
        return None


def answers_equal(a: str, b: str) -> bool:
    """Equal after whitespace and case normalisation, or both numbers and numerically equal."""
    a, b = _folded(a), _folded(b)
    if a == b:
        return True
    na, nb = _float(a), _float(b)
    return na is not None and nb is not None and math.isclose(na, nb, rel_tol=1e-9, abs_tol=1e-12)
