"""The modality-bypass check: a text-only solver (web_search, page_browser; no modal input), its KB reader."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from orchestra.errors import ToolError
from orchestra.schemas import CheckOutcome, RewriteCandidate
from orchestra.text import format_value
from orchestra.tools.base import Tool
from orchestra.tools.pages import normalize_url

__all__ = ["BypassResult", "PageReader", "PageView", "modality_bypass", "solve_text_only"]

# Bounds of the text-only solver: it stays cheap (well under a millisecond per candidate once the
# page caches are warm) whatever the question looks like.
MAX_SPANS = 12  # searched spans per question
MAX_PAGES = 8  # browsed pages per question
MAX_HOPS = 2  # the question's names, then the names those pages link to
MAX_NUMBERS = 24  # numbers combined pairwise (552 ordered pairs at most)
SEARCH_K = 10

_QUOTED = re.compile(r"\"([^\"\n]{1,80})\"|“([^”\n]{1,80})”|‘([^’\n]{1,80})’|(?<!\w)'([^'\n]{1,80})'(?!\w)")
_CAPITALISED = re.compile(
    r"[A-Z][A-Za-z0-9]*(?:[-'’][A-Za-z0-9]+)*(?:\s+[A-Z][A-Za-z0-9]*(?:[-'’][A-Za-z0-9]+)*)*"
)
_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w]|\.\d)")
_NUMBER_TEXT = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"\w")
# Words that ask for an operation (a solver reading the question knows a "gap" is a subtraction).
_OP_CUES: dict[str, re.Pattern[str]] = {
    "+": re.compile(r"\b(sum|total|plus|add|added|adding|combined|after|later|more)\b"),
    "-": re.compile(
        r"\b(difference|differ|gap|minus|subtract\w*|between|apart|more|less|fewer|after|before|"
        r"older|younger|later|earlier|exceeds?)\b"
    ),
    "*": re.compile(r"\b(product|multipl\w*|times|twice|double|triple)\b"),
    "/": re.compile(r"\b(divided|divide|dividing|ratio|quotient|per|average|split|shared?)\b"),
}
# Capitalised words that start questions and clauses, never a page title worth a search.
_STOP = frozenset(
    "a according add after an and answer are as at before between by compute consider count divide find "
    "first for from give given hint how if in is it its look multiply name next note of on or please read "
    "report suppose take that the then there these this those to use using what when where which who whose "
    "why with".split()
)


@dataclass(frozen=True)
class PageView:
    """A page as page_browser shows it: its URL, title and ``(label, value)`` facts."""

    url: str
    title: str
    facts: tuple[tuple[str, str], ...]


class PageReader:
    """Exact-title lookups (the real web_search tool) and page facts (the real page_browser tool),
    cached for the whole run: verification asks for the same few hundred pages over and over.
    ``searchable`` False: the seed source has no knowledge base, so no title is found (no call)."""

    def __init__(self, search: Tool, browser: Tool, k: int = SEARCH_K, searchable: bool = True) -> None:
        self.search, self.browser, self.k, self.searchable = search, browser, k, searchable
        self._titles: dict[str, str | None] = {}
        self._pages: dict[str, PageView | str] = {}
        self.calls = {"web_search": 0, "page_browser": 0}

    def find_title(self, title: str) -> str | None:
        """The URL of the page titled exactly ``title`` (case-insensitive, as the world's search), or None."""
        key = " ".join(title.split()).casefold()
        if key not in self._titles:
            if not _WORD.search(key) or not self.searchable:
                self._titles[key] = None
                return None
            self.calls["web_search"] += 1
            obs = self.search(query=title, k=self.k)
            if not obs.ok:
                raise ToolError(f"web_search failed on {title!r}: {obs.error}")
            hits = [h for h in obs.data.get("results", []) if " ".join(h["title"].split()).casefold() == key]
            self._titles[key] = hits[0]["url"] if hits else None
        return self._titles[key]

    def page(self, url: str) -> PageView:
        """The page at ``url``; a ToolError (the browser's own message) when it cannot be read."""
        key = normalize_url(url)
        if key not in self._pages:
            self.calls["page_browser"] += 1
            obs = self.browser(url=url)
            if obs.ok:
                facts = tuple((str(f["label"]), str(f["value"])) for f in obs.data.get("facts", []))
                self._pages[key] = PageView(
                    str(obs.data.get("url", url)), str(obs.data.get("title", "")), facts
                )
            else:
                self._pages[key] = str(obs.error)
        got = self._pages[key]
        if isinstance(got, str):
            raise ToolError(got)
        return got


@dataclass
class BypassResult:
    """What the text-only solver found: ``how`` it reached the answer (None: it did not)."""

    how: str | None
    spans: list[str] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)
    numbers: int = 0

    @property
    def reached(self) -> bool:
        return self.how is not None


def question_spans(question: str) -> tuple[list[str], list[str]]:
    """(names to search: quoted strings, then capitalised phrases split at question words; numbers)."""
    names: list[str] = []
    for m in _QUOTED.finditer(question):
        names.append(next(g for g in m.groups() if g is not None).strip())
    for m in _CAPITALISED.finditer(question):
        run: list[str] = []
        for word in m.group(0).split() + [""]:
            bare = re.sub(r"['’]s$", "", word)
            if bare and bare.casefold() not in _STOP:
                run.append(bare)
            elif run:
                names.append(" ".join(run))
                run = []
    unique: dict[str, str] = {}
    for n in names:
        if n:
            unique.setdefault(n.casefold(), n)  # the first spelling of a name is the one searched
    return list(unique.values())[:MAX_SPANS], [m.group(0) for m in _NUMBER.finditer(question)]


def as_number(text: str) -> float | None:
    """A numeral (``1,234`` and ``-3.5`` too) as a float, else None."""
    s = text.strip()
    if not _NUMBER_TEXT.fullmatch(s):
        return None
    return float(s.replace(",", ""))


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def asked_operations(question: str) -> frozenset[str]:
    """The arithmetic a question's wording asks for (``+ - * /``); all four when it names none."""
    text = question.casefold()
    ops = frozenset(op for op, cue in _OP_CUES.items() if cue.search(text))
    return ops or frozenset(_OP_CUES)


def _combinations(numbers: list[float], target: float, ops: frozenset[str]) -> str | None:
    """The first ``a op b`` over two distinct entries equal to ``target``: ``a + b``, ``a * b``,
    ``a - b`` and ``|a - b|``, ``round(a / b)``, each only when ``ops`` holds its operator."""

    def hit(x: float) -> bool:
        return math.isfinite(x) and math.isclose(x, target, rel_tol=1e-9, abs_tol=1e-9)

    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i == j:
                continue
            fa, fb = format_value(a), format_value(b)
            if "+" in ops and i < j and hit(a + b):
                return f"{fa} + {fb}"
            if "*" in ops and i < j and hit(a * b):
                return f"{fa} * {fb}"
            if "-" in ops and hit(a - b):
                return f"{fa} - {fb}"
            if "-" in ops and i < j and hit(abs(a - b)):
                return f"|{fa} - {fb}|"
            if "/" in ops and b != 0 and abs(a / b) < 1e15 and hit(round(a / b)):
                return f"round({fa} / {fb})"
    return None


def solve_text_only(question: str, answer: str, reader: PageReader) -> BypassResult:
    """Try to reach ``answer`` from the question text and the wiki alone.

    1. spans: quoted strings and capitalised phrases (names to search), numbers (operands);
    2. search each name with web_search and keep the page titled exactly so (the world's rule);
       browse it with page_browser and read its facts; names among those facts (relations) are
       searched in turn, up to ``MAX_HOPS`` hops and ``MAX_PAGES`` pages;
    3. reached when the answer is in the question, equals one of its spans or a page fact value,
       or equals ``a + b``, ``a - b``, ``a * b``, ``|a - b|`` or ``round(a / b)`` for two numbers
       of the question and the pages (the code tool's part, done in-process: plain arithmetic),
       trying only the operations the question's wording asks for (``asked_operations``: a
       "difference" is no division) unless it names none. Without that reading, a few hundred
       pairs of page facts hit small answers by chance (about 0.7% of the default world's rewrites).
    """
    names, numerals = question_spans(question)
    target_text = _norm(answer)
    result = BypassResult(None, spans=names + numerals)
    if target_text and re.search(r"(?<!\w)" + re.escape(target_text) + r"(?!\w)", _norm(question)):
        result.how = f"the answer {answer!r} is written in the question"
        return result
    values: list[tuple[str, str]] = []  # (value, where)
    frontier, searched = list(names), set()
    for _hop in range(MAX_HOPS):
        found_names: list[str] = []
        for name in frontier:
            if len(result.pages) >= MAX_PAGES or name.casefold() in searched:
                continue
            searched.add(name.casefold())
            url = reader.find_title(name)
            if url is None or url in result.pages:
                continue
            result.pages.append(url)
            page = reader.page(url)
            for label, value in page.facts:
                values.append((value, f"{page.title}: {label}"))
                if as_number(value) is None and label not in ("Type", "Category"):
                    found_names.append(value)
        frontier = found_names
    for value, where in values:
        if _norm(value) == target_text:
            result.how = f"the answer {answer!r} is a page fact ({where})"
            return result
    target = as_number(answer)
    if target is None:
        return result
    pool: list[float] = []
    for text in numerals + [v for v, _ in values]:
        x = as_number(text)
        if x is not None and x not in pool:
            pool.append(x)
    pool = pool[:MAX_NUMBERS]
    result.numbers = len(pool)
    if target in pool:
        result.how = f"the answer {answer!r} is one of the numbers of the question and pages"
        return result
    combo = _combinations(pool, target, asked_operations(question))
    if combo is not None:
        result.how = f"the answer {answer!r} = {combo} from numbers of the question and pages"
    return result


def modality_bypass(candidate: RewriteCandidate, reader: PageReader, enabled: bool = True) -> CheckOutcome:
    """Passed when the text-only solver does NOT reach the answer; score 1.0 when it does, else 0.0."""
    if not enabled:
        return CheckOutcome(passed=True, score=None, detail="skipped (verify.modality_bypass: false)")
    got = solve_text_only(candidate.task.question, candidate.task.answer, reader)
    searched = f"{len(got.spans)} spans, {len(got.pages)} pages, {got.numbers} numbers"
    if got.reached:
        return CheckOutcome(passed=False, score=1.0, detail=f"bypassed without the modal input: {got.how}")
    return CheckOutcome(passed=True, score=0.0, detail=f"the text-only solver failed ({searched})")
