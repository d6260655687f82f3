"""The speech tool's closed vocabulary: English number words, the grammar of cardinals and spoken
years (a small NFA over word classes), and words -> number."""

from __future__ import annotations

from collections.abc import Iterable

from orchestra.errors import ToolError
from orchestra.espeak import TENS, UNITS

_UNITS, _TEENS, _TENS = UNITS[1:10], UNITS[10:], TENS[2:]
VALUES: dict[str, int] = {
    "zero": 0,
    **{w: i + 1 for i, w in enumerate(_UNITS)},
    **{w: i + 10 for i, w in enumerate(_TEENS)},
    **{w: 10 * (i + 2) for i, w in enumerate(_TENS)},
}
#: word -> class: Z zero, U one-nine, E ten-nineteen, T twenty-ninety, H hundred, K thousand, A and, O oh
CLASSES: dict[str, str] = {
    "zero": "Z",
    **dict.fromkeys(_UNITS, "U"),
    **dict.fromkeys(_TEENS, "E"),
    **dict.fromkeys(_TENS, "T"),
    "hundred": "H",
    "thousand": "K",
    "and": "A",
    "oh": "O",
}
VOCABULARY: tuple[str, ...] = tuple(CLASSES)


def _nfa() -> tuple[dict[str, dict[str, set[str]]], frozenset[str]]:
    """States and accepting states of cardinals 0..999,999 ("and" optional after hundred/thousand)
    and years 1000..2099 said in pairs (nineteen eighty four, nineteen oh five, nineteen hundred).
    Arcs are keyed by word class, or by a word where only that word fits."""
    arcs: dict[str, dict[str, set[str]]] = {}
    accept: set[str] = set()

    def arc(a: str, cls: str, b: str) -> None:
        arcs.setdefault(a, {}).setdefault(cls, set()).add(b)

    arc("s", "Z", "zero")
    accept.add("zero")
    for p in ("1", "2"):  # a block of 1..999 before (1) or after (2) "thousand"
        start = "s" if p == "1" else "k"
        for a in (start, "ka"):
            if p == "1" and a == "ka":
                continue
            arc(a, "U", f"u{p}")
            arc(a, "E", f"e{p}")
            arc(a, "T", f"t{p}")
        arc(f"u{p}", "H", f"h{p}")
        arc(f"t{p}", "U", f"tu{p}")
        arc(f"h{p}", "A", f"ha{p}")
        for a in (f"h{p}", f"ha{p}"):
            arc(a, "U", f"end{p}")
            arc(a, "E", f"end{p}")
            arc(a, "T", f"ht{p}")
        arc(f"ht{p}", "U", f"end{p}")
        done = (f"u{p}", f"e{p}", f"t{p}", f"tu{p}", f"h{p}", f"ht{p}", f"end{p}")
        accept.update(done)
        if p == "1":
            for d in done:
                arc(d, "K", "k")
    accept.add("k")
    arc("k", "A", "ka")
    # years 1000..2099: a pair of two-digit groups, the first ten..twenty (an arc may name a word)
    arc("s", "E", "y1")
    arc("s", "twenty", "y1")
    for a in ("y1",):
        arc(a, "H", "y_end")
        arc(a, "O", "y_oh")
        arc(a, "E", "y_end")
        arc(a, "T", "y2t")
    arc("y_oh", "U", "y_end")
    arc("y2t", "U", "y_end")
    accept.update({"y_end", "y2t"})
    return arcs, frozenset(accept)


ARCS, ACCEPT = _nfa()
START: frozenset[str] = frozenset({"s"})


def advance(states: frozenset[str], word: str) -> frozenset[str]:
    """The NFA states after ``word`` (empty: no number starts with these words)."""
    cls = CLASSES[word]
    return frozenset(b for a in states for key in (cls, word) for b in ARCS.get(a, {}).get(key, ()))


def accepts(states: Iterable[str]) -> bool:
    return any(s in ACCEPT for s in states)


def _pair(words: list[str]) -> tuple[int, list[str]] | None:
    """A leading two-digit group (10..99) and the words after it, or None."""
    if not words or CLASSES[words[0]] not in "ET":
        return None
    if CLASSES[words[0]] == "T" and len(words) > 1 and CLASSES[words[1]] == "U":
        return VALUES[words[0]] + VALUES[words[1]], words[2:]
    return VALUES[words[0]], words[1:]


def words_to_number(words: list[str]) -> int:
    """The number ``words`` say: a cardinal ("four hundred and twelve" -> 412) or a year in pairs
    ("nineteen oh five" -> 1905, "twenty ten" -> 2010, "nineteen hundred" -> 1900)."""
    state = START
    for w in words:
        if w not in CLASSES:
            raise ToolError(f"{w!r} is not a number word")
        state = advance(state, w)
    if not accepts(state):
        raise ToolError(f"{' '.join(words)!r} is not a number")
    head = _pair(words)
    if head is not None and head[1] and "K" not in {CLASSES[w] for w in words}:
        hi, rest = head
        if rest == ["hundred"]:
            return hi * 100
        if rest[0] == "oh":
            return hi * 100 + VALUES[rest[1]]
        tail = _pair(rest)
        if tail is not None and not tail[1]:
            return hi * 100 + tail[0]
    total, cur = 0, 0
    for w in words:
        if w == "hundred":
            cur *= 100
        elif w == "thousand":
            total, cur = total + cur * 1000, 0
        elif w != "and":
            cur += VALUES[w]
    return total + cur
