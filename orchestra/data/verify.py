"""Verification of rewrite candidates: five separate, reported checks per candidate (DESIGN.md, Data)."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from orchestra.config import ProviderSpec, ToolParams, VerifyParams
from orchestra.data.verify_bypass import PageReader, modality_bypass
from orchestra.data.verify_judge import Scorer, make_judge, resolved_goal
from orchestra.data.verify_rederive import is_numeric_answer, rederive_many, value_key
from orchestra.errors import RecordError
from orchestra.schemas import (
    AnchorFact,
    BrowseStep,
    CheckOutcome,
    PerceiveStep,
    RewriteCandidate,
    SearchStep,
    SolutionStep,
    SubtaskStep,
    Task,
    VerificationResult,
)
from orchestra.tools.base import ToolRegistry
from orchestra.tools.pages import normalize_url

__all__ = [
    "CHECKS",
    "VerifyReport",
    "question_similarity",
    "verification_tools",
    "anchor_coverage",
    "is_numeric_answer",
    "lexical_similarity",
    "modality_bypass",
    "rederive_many",
    "scorer",
    "verify_report",
]


CHECKS: tuple[str, ...] = (
    "anchor_coverage",
    "lexical_similarity",
    "modality_bypass",
    "numeric_rederivation",
    "judge",
)


def scorer(metric: str) -> Scorer:
    """The rapidfuzz scorer ``verify.similarity_metric`` names (0-100; the checks divide by 100)."""
    return getattr(fuzz, metric)


def question_similarity(metric: str) -> Callable[[str, str], float]:
    """Similarity (0-1) of two questions as the lexical check measures it: ``metric`` after
    rapidfuzz's default processing (lower case, no punctuation)."""
    score_fn = scorer(metric)

    def sim(a: str, b: str) -> float:
        return score_fn(default_process(a), default_process(b)) / 100.0

    return sim


def _step_key(step: SolutionStep, env: Mapping[str, Any]) -> tuple[str, ...]:
    """The signature anchor coverage matches on (references resolved through ``env``)."""
    if isinstance(step, PerceiveStep):
        args = json.dumps(step.args, sort_keys=True, default=str)
        return ("perceive", step.input_id, step.perception, args, value_key(step.value))
    if isinstance(step, SearchStep):
        return ("search", normalize_url(str(step.value)))
    if isinstance(step, BrowseStep):
        url = env.get(step.url[1:], step.url) if step.url.startswith("$") else step.url
        return ("browse", normalize_url(str(url)), step.field, value_key(step.value))
    if isinstance(step, SubtaskStep):
        return ("subtask", resolved_goal(step, env), value_key(step.value))
    return ("compute", value_key(step.value))


def _keys(steps: Sequence[SolutionStep]) -> dict[str, tuple[str, ...]]:
    env: dict[str, Any] = {}
    keys = {}
    for s in steps:
        keys[s.out] = _step_key(s, env)
        env[s.out] = s.value
    return keys


def anchor_coverage(
    candidate: RewriteCandidate, seed: Task, anchors: Sequence[AnchorFact], min_coverage: float
) -> CheckOutcome:
    """Share of the seed's anchor facts the candidate's program uses.

    An anchor names a seed step (``step="v2"``); it is covered when the candidate has a step of the
    same op and signature: perceive = input_id, perception, args and value; search = value (the
    URL); browse = browsed URL, field and value; compute = value. Anchor ids the candidate claims
    (``anchor_ids``) that are not the seed's count as uncovered. No anchors at all scores 0.
    """
    own = [a for a in anchors if a.task_id == str(seed.id)]
    seed_keys = _keys(seed.solution_program or [])
    have = set(_keys(candidate.task.solution_program or []).values())
    missing = []
    for a in own:
        key = seed_keys.get(a.step)
        if key is None:
            missing.append(f"{a.fact_id} (seed has no step {a.step})")
        elif key not in have:
            missing.append(f"{a.fact_id} ({a.step} {key[0]}: {a.text})")
    unknown = sorted(set(candidate.anchor_ids) - {a.fact_id for a in own})
    missing += [f"{fid} (not an anchor of seed {seed.id})" for fid in unknown]
    total = len(own) + len(unknown)
    score = round((total - len(missing)) / total, 4) if total else 0.0
    passed = score >= min_coverage
    if not total:
        detail = f"seed {seed.id} has no anchor facts to cover"
    elif missing:
        detail = f"covers {total - len(missing)}/{total}; missing: " + "; ".join(missing)
    else:
        detail = f"covers all {total} anchor facts"
    if not passed:
        detail += f" (needs >= {min_coverage:g})"
    return CheckOutcome(passed=passed, score=score, detail=detail)


def lexical_similarity(
    candidate: RewriteCandidate,
    seed: Task,
    siblings: Sequence[RewriteCandidate],
    metric: str,
    max_similarity: float,
) -> CheckOutcome:
    """The highest rapidfuzz ``metric`` similarity (0-1, after rapidfuzz's default processing: lower
    case, no punctuation) of the question to its seed's and to each other rewrite of the same seed."""
    similarity = question_similarity(metric)
    refs = [(f"seed {seed.id}", seed.question)]
    refs += [(s.candidate_id, s.task.question) for s in siblings if s.candidate_id != candidate.candidate_id]
    best, who = 0.0, "nothing"
    for name, text in refs:
        sim = similarity(candidate.task.question, text)
        if sim > best:
            best, who = sim, name
    best = round(best, 4)
    passed = best <= max_similarity
    cmp = "<=" if passed else ">"
    return CheckOutcome(
        passed=passed, score=best, detail=f"{metric} {best:.2f} {cmp} {max_similarity:g} (closest: {who})"
    )


@dataclass
class VerifyReport:
    """The results (candidate_id order), seconds spent per check, and tool calls made."""

    results: list[VerificationResult]
    timings_s: dict[str, float] = field(default_factory=dict)
    tool_calls: dict[str, int] = field(default_factory=dict)

    def ms_per_candidate(self) -> dict[str, float]:
        n = max(len(self.results), 1)
        return {k: round(1000 * v / n, 3) for k, v in self.timings_s.items()}

    def pass_rates(self) -> dict[str, float]:
        n = max(len(self.results), 1)
        rates = {k: sum(r.checks[k].passed for r in self.results) / n for k in CHECKS}
        return {**rates, "all": sum(r.passed for r in self.results) / n}


def verification_tools(world_dir: Path, tool_params: ToolParams, params: VerifyParams) -> ToolRegistry:
    """web_search, page_browser and code_executor for verification: the world's own pages only (local
    search, no live fetching), the sandbox's wall-clock limit from ``verify.sandbox_timeout_s``."""
    from orchestra.tools.registry import action_tools, page_store

    update = {
        "search": tool_params.search.model_copy(update={"backend": "local"}),
        "browser": tool_params.browser.model_copy(update={"allow_http": False}),
        "sandbox": tool_params.sandbox.model_copy(update={"wall_s": params.sandbox_timeout_s}),
    }
    return ToolRegistry(action_tools(page_store(world_dir), tool_params.model_copy(update=update)))


def verify_report(
    seeds: Sequence[Task],
    anchors: Sequence[AnchorFact],
    candidates: Sequence[RewriteCandidate],
    world_dir: Path,
    params: VerifyParams,
    tools: ToolRegistry | None = None,
    *,
    tool_params: ToolParams | None = None,
    providers: Mapping[str, ProviderSpec] | None = None,
) -> VerifyReport:
    """The five checks (``CHECKS``) on every candidate, results in candidate_id order.

    ``tools``: a registry holding web_search, page_browser and code_executor (the caller closes
    it); without one, they are built over ``world_dir``'s kb/pages.jsonl from ``tool_params``
    (local search, no live fetching, the sandbox's wall-clock limit = ``verify.sandbox_timeout_s``)
    and closed after. Nothing reads ``world_dir``'s truth/.
    ``providers`` (params.yaml's table) resolves ``verify.judge_provider``; a provider kind
    without a judge raises ConfigError before any check runs. The report carries the results,
    the seconds per check and the tool calls made.
    """
    by_seed = {str(s.id): s for s in seeds}
    dup = sorted(i for i, n in Counter(c.candidate_id for c in candidates).items() if n > 1)
    if dup:
        raise RecordError(f"duplicate candidate ids: {dup[:5]}")
    orphans = sorted({c.seed_id for c in candidates} - set(by_seed))
    if orphans:
        raise RecordError(f"candidates name seeds that are not in the seed list: {orphans[:5]}")
    order = sorted(candidates, key=lambda c: c.candidate_id)
    siblings: dict[str, list[RewriteCandidate]] = defaultdict(list)
    for c in order:
        siblings[c.seed_id].append(c)
    anchors_of: dict[str, list[AnchorFact]] = defaultdict(list)
    for a in anchors:
        anchors_of[a.task_id].append(a)
    own = tools is None
    registry = verification_tools(world_dir, tool_params or ToolParams(), params) if tools is None else tools
    try:
        from orchestra.tools.registry import has_pages

        searchable = tools is not None or has_pages(world_dir)
        reader = PageReader(registry.get("web_search"), registry.get("page_browser"), searchable=searchable)
        judge = make_judge(params.judge_provider, providers, reader, scorer(params.similarity_metric))
        per_candidate: dict[str, Callable[[RewriteCandidate], CheckOutcome]] = {
            "anchor_coverage": lambda c: anchor_coverage(
                c, by_seed[c.seed_id], anchors_of[c.seed_id], params.min_anchor_coverage
            ),
            "lexical_similarity": lambda c: lexical_similarity(
                c,
                by_seed[c.seed_id],
                siblings[c.seed_id],
                params.similarity_metric,
                params.max_lexical_similarity,
            ),
            "modality_bypass": lambda c: modality_bypass(c, reader, params.modality_bypass),
        }
        whole_set: dict[str, Callable[[], dict[str, CheckOutcome]]] = {
            "numeric_rederivation": lambda: rederive_many(order, registry.get("code_executor")),
            "judge": lambda: judge.judge(order),
        }
        checks: dict[str, dict[str, CheckOutcome]] = {}
        timings: dict[str, float] = {}
        for name in CHECKS:
            start = time.perf_counter()
            if name in per_candidate:
                checks[name] = {c.candidate_id: per_candidate[name](c) for c in order}
            else:
                checks[name] = whole_set[name]()
            timings[name] = round(time.perf_counter() - start, 6)
    finally:
        if own:
            registry.close()
    results = [
        VerificationResult(candidate_id=c.candidate_id, checks={k: checks[k][c.candidate_id] for k in CHECKS})
        for c in order
    ]
    return VerifyReport(results, timings, dict(reader.calls))
