"""The judge check: its seam (one abstract method), the builtin programmatic judge, the openai LLM judge,
and near-duplicate detection across the set (programmatic for both judges)."""

from __future__ import annotations

import ast
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz import process
from rapidfuzz.utils import default_process

from orchestra.config import ProviderSpec
from orchestra.data.llm import JsonProvider, program_steps
from orchestra.data.verify_bypass import PageReader
from orchestra.errors import ConfigError, ReplyError, ToolError
from orchestra.schemas import (
    BrowseStep,
    CheckOutcome,
    ComputeStep,
    PerceiveStep,
    RewriteCandidate,
    SearchStep,
    SolutionStep,
    SubtaskStep,
)
from orchestra.text import ValueFormatError, format_value
from orchestra.world.catalogue import TYPES

__all__ = [
    "DUPLICATE_SIMILARITY",
    "Judge",
    "LLMJudge",
    "ProgrammaticJudge",
    "make_judge",
    "near_duplicates",
    "program_signature",
]

_CALLS = frozenset({"abs", "round", "int", "min", "max"})  # what compute expressions may call
#: questions at least this similar (same scorer as the lexical check) with the same answer are duplicates
DUPLICATE_SIMILARITY = 0.95

# Field key -> infobox label, from the world's catalogue (the vocabulary the pages are written in).
_LABELS: dict[str, str] = {a.key: a.label for t in TYPES for a in (*t.attrs, *t.rels)}

Scorer = Callable[..., float]


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def field_fact(facts: Sequence[tuple[str, str]], field_key: str) -> tuple[str, str] | None:
    """The page fact a browse ``field`` names: its catalogue label, else a label spelling the key."""
    label = _LABELS.get(field_key)
    for lab, value in facts:
        if (label is not None and lab == label) or _key(lab) == _key(field_key):
            return lab, value
    return None


def _text(value: Any) -> str:
    try:
        return format_value(value)
    except ValueFormatError:
        return "(none)"


def _resolve(ref: str, env: Mapping[str, Any]) -> Any:
    """``$v2`` -> the value of step v2 (the caller checked it is an earlier step); a literal stays."""
    return env[ref[1:]] if ref.startswith("$") else ref


def program_signature(steps: Sequence[SolutionStep]) -> tuple[str, ...]:
    """What a program does, independent of wording: each step's op, arguments and recorded value."""
    env: dict[str, Any] = {}
    sig = []
    for s in steps:
        if isinstance(s, PerceiveStep):
            part: tuple[Any, ...] = ("perceive", s.input_id, s.perception, s.args, s.value)
        elif isinstance(s, SearchStep):
            part = ("search", s.value)
        elif isinstance(s, BrowseStep):
            part = ("browse", env.get(s.url[1:], s.url) if s.url.startswith("$") else s.url, s.field, s.value)
        elif isinstance(s, SubtaskStep):
            part = ("subtask", resolved_goal(s, env), s.value)
        else:
            part = ("compute", "".join(s.expression.split()), s.value)
        env[s.out] = s.value
        sig.append(json.dumps(part, sort_keys=True, default=str))
    return tuple(sig)


def resolved_goal(step: SubtaskStep, env: Mapping[str, Any]) -> str:
    """A sub-task's goal with each ``$v`` reference replaced by that step's value (whitespace normalised)."""
    text = re.sub(
        r"\$(v[0-9]+)\b", lambda m: _text(env[m.group(1)]) if m.group(1) in env else m.group(0), step.goal
    )
    return " ".join(text.split())


def near_duplicates(candidates: Sequence[RewriteCandidate], scorer: Scorer) -> dict[str, str]:
    """Candidate id -> why it is a near-duplicate of an earlier candidate (``candidates`` in
    candidate_id order): the same answer and the same program signature, or the same answer and a
    question at least ``DUPLICATE_SIMILARITY`` similar by ``scorer``."""
    out: dict[str, str] = {}
    first_by_signature: dict[tuple[str, tuple[str, ...]], str] = {}
    earlier_by_answer: dict[str, list[tuple[str, str]]] = {}  # answer -> [(question, id)]
    for c in candidates:
        answer = " ".join(c.task.answer.split()).casefold()
        sig = (answer, program_signature(c.task.solution_program or []))
        if c.task.solution_program and sig in first_by_signature:
            out[c.candidate_id] = f"near-duplicate of {first_by_signature[sig]} (same answer and program)"
        else:
            first_by_signature.setdefault(sig, c.candidate_id)
            earlier = earlier_by_answer.get(answer, [])
            best = process.extractOne(
                c.task.question,
                [q for q, _ in earlier],
                scorer=scorer,
                processor=default_process,
                score_cutoff=100 * DUPLICATE_SIMILARITY,
            )
            if best is not None:
                dup_id, sim = earlier[best[2]][1], best[1] / 100
                out[c.candidate_id] = (
                    f"near-duplicate of {dup_id} (same answer, question similarity {sim:.2f})"
                )
        earlier_by_answer.setdefault(answer, []).append((c.task.question, c.candidate_id))
    return out


class Judge(ABC):
    """A judge of a whole candidate set: factual consistency and duplicates. One method: ``judge``."""

    @abstractmethod
    def judge(self, candidates: Sequence[RewriteCandidate]) -> dict[str, CheckOutcome]:
        """One outcome per candidate id; candidates come in candidate_id order."""


class ProgrammaticJudge(Judge):
    """The builtin judge. Per candidate, each of these is one item of its score (the share that holds):

    - every perceive step reads one of the task's modal inputs; every ``$v`` reference is an earlier step;
    - every search step's value is the URL of the page titled exactly like its query (page_browser);
    - every browse step's value is the page's fact for its field (page_browser: infobox label = value);
    - the last step's value, formatted (``orchestra.text.format_value``), is the answer.

    Then across the set, in candidate_id order (:func:`near_duplicates`): a candidate with the same
    answer and the same program signature as an earlier one, or the same answer and a question at
    least ``DUPLICATE_SIMILARITY`` similar, fails as a near-duplicate of that earlier candidate. The
    score is the share of consistency items that hold (a duplicate fails whatever its score).
    """

    def __init__(self, reader: PageReader, scorer: Scorer) -> None:
        self.reader, self.scorer = reader, scorer

    def judge(self, candidates: Sequence[RewriteCandidate]) -> dict[str, CheckOutcome]:
        out = {}
        duplicates = near_duplicates(candidates, self.scorer)
        for c in candidates:
            problems, items = self.consistency(c)
            score = round((items - len(problems)) / items, 4)
            if c.candidate_id in duplicates:
                problems.append(duplicates[c.candidate_id])
            detail = "; ".join(problems) if problems else f"consistent ({items} items) and no duplicate"
            out[c.candidate_id] = CheckOutcome(passed=not problems, score=score, detail=detail)
        return out

    def consistency(self, c: RewriteCandidate) -> tuple[list[str], int]:
        """(the inconsistencies found, the number of items checked) for one candidate."""
        steps = c.task.solution_program or []
        if not steps:
            return ["no solution program to check"], 1
        inputs = {m.id for m in c.task.omni_modal_input}
        env: dict[str, Any] = {}
        problems: list[str] = []
        items = 1
        for s in steps:
            items += 1
            problem = self._step(s, env, inputs)
            if problem:
                problems.append(problem)
            env[s.out] = s.value
        final = _text(steps[-1].value)
        if final != c.task.answer.strip():
            problems.append(f"final step {steps[-1].out} = {final!r}, but the answer is {c.task.answer!r}")
        return problems, items

    def _step(self, s: SolutionStep, env: Mapping[str, Any], inputs: set[str]) -> str | None:
        if isinstance(s, PerceiveStep):
            return None if s.input_id in inputs else f"{s.out}: perceives {s.input_id}, not a modal input"
        if isinstance(s, SubtaskStep):
            refs = re.findall(r"\$(v[0-9]+)\b", s.goal)
            missing = sorted(set(refs) - set(env))
            return f"{s.out}: refers to ${', $'.join(missing)} before it is set" if missing else None
        if isinstance(s, ComputeStep):
            try:
                names = {
                    n.id for n in ast.walk(ast.parse(s.expression, mode="eval")) if isinstance(n, ast.Name)
                }
            except SyntaxError as e:
                return f"{s.out}: {s.expression!r} is not an expression ({e.msg})"
            missing = sorted(names - set(env) - _CALLS)
            return f"{s.out}: uses {', '.join(missing)} before it is set" if missing else None
        ref = s.query if isinstance(s, SearchStep) else s.url
        if ref.startswith("$") and ref[1:] not in env:
            return f"{s.out}: refers to {ref}, which is not an earlier step"
        if isinstance(s, SearchStep):
            query = str(_resolve(s.query, env))
            try:
                page = self.reader.page(str(s.value))
            except ToolError as e:
                return f"{s.out}: search {query!r} gives {s.value!r}, which the browser cannot open: {e}"
            if " ".join(page.title.split()).casefold() != " ".join(query.split()).casefold():
                exact = self.reader.find_title(query)
                hint = f"; the page titled so is {exact}" if exact else "; no page has that title"
                return f"{s.out}: search {query!r} gives {s.value}, titled {page.title!r}{hint}"
            return None
        url = str(_resolve(s.url, env))
        try:
            page = self.reader.page(url)
        except ToolError as e:
            return f"{s.out}: cannot browse {url}: {e}"
        fact = field_fact(page.facts, s.field)
        if fact is None:
            return f"{s.out}: {page.title} has no fact for field {s.field!r}"
        if fact[1] != _text(s.value):
            recorded = f"{s.out}: browse records {s.field} = {_text(s.value)!r}"
            return f"{recorded}, but {page.title} says {fact[0]}: {fact[1]}"
        return None


class Verdict(BaseModel):
    """The LLM judge's reply."""

    model_config = ConfigDict(extra="forbid")

    consistent: bool = Field(description="the question, program, facts and answer agree")
    score: float = Field(ge=0, le=1, description="confidence that the candidate is consistent, 0-1")
    reason: str = Field(description="one or two sentences: why")


_JUDGE = (
    "You judge generated question-answering tasks for factual consistency. The user message is a JSON "
    "object: a question, its answer, the solution program that derives the answer (each step with its "
    "out, op, arguments and recorded value) and the knowledge-base facts the program reads (each search "
    "step's page title, each browse step's page and the fact shown for its field). The task is "
    "consistent when the question asks exactly what the program computes, every recorded value agrees "
    "with the facts, each step follows from the earlier ones, and the last step's value is the answer."
)


class LLMJudge(Judge):
    """The ``openai`` judge: one request per candidate (candidate_id order), sent the question, the
    answer, the program and the knowledge-base facts it reads (through the same :class:`PageReader`
    the builtin judge uses); it passes when the verdict is consistent and it is no near-duplicate
    (:func:`near_duplicates`, programmatic: a model cannot compare the whole set). A reply that is
    not a verdict fails that candidate with score 0 (``judge reply rejected: ...``); a failed call
    is a StageError naming the provider."""

    def __init__(self, reader: PageReader, scorer: Scorer, provider: JsonProvider) -> None:
        self.reader, self.scorer, self.provider = reader, scorer, provider

    def judge(self, candidates: Sequence[RewriteCandidate]) -> dict[str, CheckOutcome]:
        out = {}
        duplicates = near_duplicates(candidates, self.scorer)
        for c in candidates:
            steps = c.task.solution_program or []
            item = {
                "question": c.task.question,
                "answer": c.task.answer,
                "steps": program_steps(steps),
                "kb_facts": self.kb_facts(steps),
            }
            try:
                v = self.provider.ask(Verdict, _JUDGE, item)
                passed, score = v.consistent, round(v.score, 4)
                said = "consistent" if v.consistent else "inconsistent"
                detail = f"{said} ({self.provider.name}): {v.reason}"
            except ReplyError as e:
                passed, score, detail = False, 0.0, f"judge reply rejected: {e}"
            if c.candidate_id in duplicates:
                passed, detail = False, f"{detail}; {duplicates[c.candidate_id]}"
            out[c.candidate_id] = CheckOutcome(passed=passed, score=score, detail=detail)
        return out

    def kb_facts(self, steps: Sequence[SolutionStep]) -> list[dict[str, Any]]:
        """What the program's search and browse steps read, as the page browser shows it."""
        env: dict[str, Any] = {}
        facts: list[dict[str, Any]] = []
        for s in steps:
            if isinstance(s, SearchStep | BrowseStep):
                if isinstance(s, SearchStep):
                    url = str(s.value)
                elif s.url.startswith("$") and s.url[1:] not in env:
                    url = s.url  # no earlier step: stays as written, the browser cannot open it
                else:
                    url = str(_resolve(s.url, env))
                row: dict[str, Any] = {"step": s.out, "page": url}
                try:
                    page = self.reader.page(url)
                except ToolError as e:
                    row["error"] = f"the browser cannot open it: {e}"
                else:
                    row["title"] = page.title
                    if isinstance(s, BrowseStep):
                        fact = field_fact(page.facts, s.field)
                        row["field"] = s.field
                        row["fact"] = f"{fact[0]}: {fact[1]}" if fact else "(the page has no such fact)"
                facts.append(row)
            env[s.out] = s.value
        return facts


def make_judge(
    name: str, providers: Mapping[str, ProviderSpec] | None, reader: PageReader, scorer: Scorer
) -> Judge:
    """The judge ``verify.judge_provider`` names: kind ``builtin`` is :class:`ProgrammaticJudge`,
    kind ``openai`` is :class:`LLMJudge` on that endpoint; any other kind is a ConfigError."""
    if providers is None:
        if name != "builtin":
            raise ConfigError(f"verify.judge_provider {name!r} needs the providers table to resolve it")
        kind = "builtin"
    else:
        if name not in providers:
            raise ConfigError(f"verify.judge_provider {name!r} is not a key of providers {sorted(providers)}")
        kind = providers[name].kind
    if kind == "builtin":
        return ProgrammaticJudge(reader, scorer)
    if kind == "openai":
        assert providers is not None
        return LLMJudge(reader, scorer, JsonProvider(providers[name], name, "verify.judge_provider"))
    raise ConfigError(
        f"verify.judge_provider {name!r} is a provider of kind {kind!r}; a judge runs on kind 'builtin' "
        "(the programmatic judge) or 'openai' (an OpenAI-compatible endpoint)"
    )
