"""The judge check: its seam (one abstract method), the builtin programmatic judge, near-duplicates."""

from __future__ import annotations

import ast
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rapidfuzz import process
from rapidfuzz.utils import default_process

from orchestra.config import ProviderSpec
from orchestra.data.verify_bypass import PageReader
from orchestra.errors import ConfigError, ToolError
from orchestra.schemas import (
    BrowseStep,
    CheckOutcome,
    ComputeStep,
    PerceiveStep,
    RewriteCandidate,
    SearchStep,
    SolutionStep,
)
from orchestra.text import ValueFormatError, format_value
from orchestra.world.catalogue import TYPES

__all__ = ["DUPLICATE_SIMILARITY", "Judge", "ProgrammaticJudge", "make_judge", "program_signature"]

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
        else:
            part = ("compute", "".join(s.expression.split()), s.value)
        env[s.out] = s.value
        sig.append(json.dumps(part, sort_keys=True, default=str))
    return tuple(sig)


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

    Then across the set, in candidate_id order: a candidate with the same answer and the same
    program signature as an earlier one, or the same answer and a question at least
    ``DUPLICATE_SIMILARITY`` similar, fails as a near-duplicate of that earlier candidate. The
    score is the share of consistency items that hold (a duplicate fails whatever its score).
    """

    def __init__(self, reader: PageReader, scorer: Scorer) -> None:
        self.reader, self.scorer = reader, scorer

    def judge(self, candidates: Sequence[RewriteCandidate]) -> dict[str, CheckOutcome]:
        out = {}
        first_by_signature: dict[tuple[str, tuple[str, ...]], str] = {}
        earlier_by_answer: dict[str, list[tuple[str, str]]] = {}  # answer -> [(question, id)]
        for c in candidates:
            problems, items = self.consistency(c)
            score = round((items - len(problems)) / items, 4)
            answer = " ".join(c.task.answer.split()).casefold()
            duplicate = None
            sig = (answer, program_signature(c.task.solution_program or []))
            if c.task.solution_program and sig in first_by_signature:
                duplicate = f"near-duplicate of {first_by_signature[sig]} (same answer and program)"
            else:
                first_by_signature.setdefault(sig, c.candidate_id)
                earlier = earlier_by_answer.get(answer, [])
                best = process.extractOne(
                    c.task.question,
                    [q for q, _ in earlier],
                    scorer=self.scorer,
                    processor=default_process,
                    score_cutoff=100 * DUPLICATE_SIMILARITY,
                )
                if best is not None:
                    dup_id = earlier[best[2]][1]
                    sim = best[1] / 100
                    duplicate = f"near-duplicate of {dup_id} (same answer, question similarity {sim:.2f})"
            earlier_by_answer.setdefault(answer, []).append((c.task.question, c.candidate_id))
            if duplicate:
                problems.append(duplicate)
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


def make_judge(
    name: str, providers: Mapping[str, ProviderSpec] | None, reader: PageReader, scorer: Scorer
) -> Judge:
    """The judge ``verify.judge_provider`` names. Only kind ``builtin`` is implemented; an LLM judge
    (kind ``openai``: an OpenAI-compatible endpoint returning a JSON verdict) is a later step and is
    refused with a ConfigError here rather than faked."""
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
    raise ConfigError(
        f"verify.judge_provider {name!r} is a provider of kind {kind!r}; only kind 'builtin' (the "
        "programmatic judge) is implemented: the LLM judge (kind 'openai') is not written yet"
    )
