"""Structured evidence memory: records, a store, relevance-based compression and a sufficiency score."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestra.agent.refs import next_subtask_id
from orchestra.backends.base import SubResult, ToolCall
from orchestra.errors import OrchestraError
from orchestra.schemas import SubTask
from orchestra.text import ValueFormatError, count_tokens, format_value

__all__ = [
    "STOPWORDS",
    "Evidence",
    "EvidenceError",
    "EvidenceStore",
    "Status",
    "TokenCounter",
    "compress",
    "content_words",
    "fresh",
    "relevance",
    "render_evidence",
    "sufficiency",
    "values_of",
]

Status = Literal["ok", "failed", "timeout", "skipped"]
TokenCounter = Callable[[str], int]

_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in is it its of on or that the "
    "their them then there these this those to was were what when where which who whom whose why "
    "will with you your".split()
)


def fresh(value: Any) -> Any:
    """``value`` itself if immutable (str, number, bool, None), else a deep copy."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return copy.deepcopy(value)


def content_words(text: str) -> set[str]:
    """Lowercase alphanumeric words of ``text`` minus :data:`STOPWORDS` (the unit of lexical overlap)."""
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


class EvidenceError(OrchestraError):
    """The evidence store was asked for something impossible (duplicate or unknown id)."""


class Evidence(BaseModel):
    """What one sub-task produced (or why it did not), with its accounting and timings."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="the sub-task id, E<n>; #E<n> resolves to ``value``")
    goal: str = Field(description="the goal as run (references substituted)")
    planned_goal: str | None = Field(
        None, description="the goal as the decision wrote it, where substituting its references changed it"
    )
    status: Status
    value: Any = None
    claim: str = ""
    sources: list[str] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list, description="over all attempts")
    backend: str | None = None
    tools: list[str] = Field(default_factory=list, description="the tool subset it was given")
    depends_on: list[str] = Field(default_factory=list)
    modalities: list[str] = Field(default_factory=list, description="the modal inputs it was given")
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cost: float = Field(0.0, ge=0, description="backend price over all attempts (tools excluded)")
    start_s: float | None = Field(None, description="first attempt start, seconds after the run began")
    end_s: float | None = Field(None, description="last attempt end, seconds after the run began")
    attempts: int = Field(0, ge=0)
    error: str | None = None
    turn: int = Field(0, ge=0, description="the orchestrator turn whose decision created it")
    confidence: float | None = Field(None, ge=0, le=1, description="the expert's confidence in the value")
    routing: dict[str, Any] | None = Field(None, description="why its backend ran it (score terms)")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def latency_s(self) -> float:
        return 0.0 if self.start_s is None or self.end_s is None else self.end_s - self.start_s

    @property
    def tool_cost(self) -> float:
        return sum(c.cost for c in self.tool_calls)

    @property
    def total_cost(self) -> float:
        return self.cost + self.tool_cost

    def planned(self) -> SubTask:
        """The sub-task as the decision that created it wrote it (goal with its references), on the
        backend that ran it: what re-running it asks for (agent.redo)."""
        return SubTask(
            id=self.id,
            goal=self.planned_goal or self.goal,
            modalities=list(self.modalities),
            tools=list(self.tools),
            backend=self.backend,
            depends_on=list(self.depends_on),
        )

    def to_result(self) -> SubResult:
        """A fresh SubResult copy of this evidence (what a dependant sub-agent is handed)."""
        return SubResult(
            ok=self.ok,
            value=fresh(self.value),
            claim=self.claim,
            sources=list(self.sources),
            tool_calls=[c.model_copy(update={"args": fresh(c.args)}) for c in self.tool_calls],
            backend=self.backend,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost=self.cost,
            error=self.error,
            confidence=self.confidence,
        )


class EvidenceStore:
    """Evidence in the order it was merged (deterministic: the scheduler merges in topological order)."""

    def __init__(self, evidence: Iterable[Evidence] = ()) -> None:
        self._items: dict[str, Evidence] = {}
        self.extend(evidence)

    def add(self, evidence: Evidence) -> None:
        if evidence.id in self._items:
            raise EvidenceError(f"evidence {evidence.id!r} is already in memory")
        self._items[evidence.id] = evidence

    def extend(self, evidence: Iterable[Evidence]) -> None:
        for e in evidence:
            self.add(e)

    def get(self, evidence_id: str) -> Evidence:
        try:
            return self._items[evidence_id]
        except KeyError:
            known = ", ".join(self._items) or "none"
            raise EvidenceError(f"no evidence {evidence_id!r}; known: {known}") from None

    def ids(self) -> list[str]:
        return list(self._items)

    def ok_ids(self) -> list[str]:
        return [i for i, e in self._items.items() if e.ok]

    def values(self) -> dict[str, Any]:
        """``{'E1': value, ...}`` for evidence that succeeded: what ``#E<n>`` substitutes."""
        return {i: e.value for i, e in self._items.items() if e.ok}

    def items(self) -> list[Evidence]:
        return list(self._items.values())

    def next_id(self) -> str:
        """The first unused id E<n> after the largest one stored."""
        return next_subtask_id(self._items)

    def __contains__(self, evidence_id: object) -> bool:
        return evidence_id in self._items

    def __iter__(self) -> Iterator[Evidence]:
        return iter(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)


def _short(text: str, max_chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def render_evidence(e: Evidence, max_chars: int = 300) -> str:
    """One deterministic line: ``#E1 [ok] <goal> -> <claim> (value: <value>)``; failures show the error."""
    head = f"#{e.id} [{e.status}] {_short(e.goal, 160)}"
    if not e.ok:
        return f"{head} -> error: {_short(e.error or 'unknown', max_chars)}"
    try:
        value = "" if e.value is None else format_value(e.value)
    except ValueFormatError:
        value = ""
    claim = _short(e.claim, max_chars)
    if value and value not in claim:
        claim = (
            f"{claim} (value: {_short(value, max_chars)})" if claim else f"value: {_short(value, max_chars)}"
        )
    conf = "" if e.confidence is None else f" [{e.backend or 'auto'}, confidence {e.confidence:.2f}]"
    return f"{head} -> {claim or '(no result)'}{conf}"


def relevance(question: str, e: Evidence, latest_turn: int, needed: Collection[str] = ()) -> float:
    """Relevance of evidence ``e`` to the question, in [0, 1]:

    ``0.6 * sqrt(overlap) + 0.25 * recency + 0.15 * needed``, halved when ``e`` is not ``ok``, where
    ``overlap = |W(q) & W(e)| / |W(q)|`` over :func:`content_words` of the question and of the
    rendered evidence line (the square root lets one shared entity count for much);
    ``recency = (e.turn + 1) / (latest_turn + 1)``; ``needed = 1`` if ``e.id`` is in ``needed``
    (ids that pending sub-tasks reference or depend on).
    """
    wq = content_words(question)
    we = content_words(render_evidence(e))
    overlap = len(wq & we) / len(wq) if wq else 0.0
    recency = (e.turn + 1) / (max(latest_turn, e.turn) + 1)
    score = 0.6 * math.sqrt(overlap) + 0.25 * recency + 0.15 * (1.0 if e.id in needed else 0.0)
    return score if e.ok else score / 2


def compress(
    question: str,
    evidence: Sequence[Evidence],
    budget_tokens: int,
    *,
    needed: Collection[str] = (),
    counter: TokenCounter = count_tokens,
    line: Callable[[Evidence], str] = render_evidence,
) -> list[Evidence]:
    """The most relevant evidence whose rendered lines (``line``) fit ``budget_tokens``, in original order.

    Greedy by :func:`relevance` (``latest_turn`` = the largest turn present; ties: earlier evidence
    first): each item is kept if its line still fits, otherwise skipped so smaller items may fit.
    """
    latest = max((e.turn for e in evidence), default=0)
    scores = [relevance(question, e, latest, needed) for e in evidence]
    ranked = sorted(range(len(evidence)), key=lambda i: (-scores[i], i))
    keep: set[int] = set()
    used = 0
    for i in ranked:
        cost = counter(line(evidence[i]))
        if used + cost <= budget_tokens:
            keep.add(i)
            used += cost
    return [evidence[i] for i in sorted(keep)]


def sufficiency(question: str, evidence: Sequence[Evidence], pending: int | Collection[str] = 0) -> float:
    """Evidence sufficiency in [0, 1]; the loop may stop once it reaches the threshold.

    ``S = completion * (0.5 * coverage + 0.5 * reliability)`` and ``S = 0`` without any ``ok``
    evidence, where ``coverage = |W(q) & W(ok evidence)| / |W(q)|`` (1 if the question has no
    content words), ``reliability = ok / (ok + failed + timeout + skipped)`` and
    ``completion = finished / (finished + pending)`` with ``pending`` the number (or ids) of
    delegated sub-tasks that have not finished.
    """
    n_pending = pending if isinstance(pending, int) else len(pending)
    good = [e for e in evidence if e.ok]
    if not good:
        return 0.0
    wq = content_words(question)
    covered: set[str] = set()
    for e in good:
        covered |= content_words(render_evidence(e))
    coverage = len(wq & covered) / len(wq) if wq else 1.0
    reliability = len(good) / len(evidence)
    completion = len(evidence) / (len(evidence) + n_pending)
    return completion * (0.5 * coverage + 0.5 * reliability)


def values_of(evidence: Iterable[Evidence]) -> Mapping[str, Any]:
    """``{'E1': value}`` for the ok items of ``evidence``."""
    return {e.id: e.value for e in evidence if e.ok}
