"""Canonical text of values (answers, references, claims) and the one deterministic token counter."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from orchestra.errors import OrchestraError

__all__ = ["ValueFormatError", "count_tokens", "format_value"]

_TOKEN = re.compile(r"\w+|[^\w\s]")


class ValueFormatError(OrchestraError):
    """A value has no text form (None: a sub-task that produced nothing)."""


def count_tokens(text: str) -> int:
    """Deterministic token count: every run of word characters and every other non-space char is one.

    The fallback for readers without a tokenizer of their own (policies count with theirs).
    """
    return len(_TOKEN.findall(text))


def format_value(value: Any, *, code: bool = False) -> str:
    """A value as text, canonically: what ``#E<n>`` substitutes, what an answer and a claim show.

    Integers (and integral floats) print without a decimal point, other floats with up to 10
    significant digits, booleans as ``true``/``false`` (``True``/``False`` in code), lists joined
    with ``", "`` (a Python list literal in code), dicts as sorted JSON. In code mode strings are
    quoted as Python literals so ``#E1 * 2`` or ``len(#E2)`` stays a valid expression.
    """
    if isinstance(value, bool):
        return repr(value) if code else str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"float({str(value)!r})" if code else str(value)
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return format(value, ".10g")
    if isinstance(value, str):
        return repr(value) if code else value
    if isinstance(value, list | tuple):
        parts = [format_value(v, code=code) for v in value]
        return "[" + ", ".join(parts) + "]" if code else ", ".join(parts)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    if value is None:
        raise ValueFormatError("a reference resolves to no value (None)")
    return repr(value) if code else str(value)
