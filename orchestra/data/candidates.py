"""The rewrite_candidates stage: the builtin rewriter's candidates, the openai rewriter's wording, and the
candidates the openai rewriter writes itself for the strategies the builtin grammar cannot run.

Every seed (with its reference solution as its program) that has anchor facts gets the builtin
rewriter's candidates (``orchestra.data.rewrite``). With ``rewrite.provider`` of kind openai, the model
rephrases each draft (``orchestra.data.llm.rephrase_candidates``), and for each strategy the builtin
rewriter skipped for want of a knowledge base it is asked, once per seed, for a candidate of its own:
a new question and the steps it adds after the seed's program (:class:`Written`: search and browse
steps, a compute step as a Python expression over the seed's step ids and the new steps', a sub-task
that reads a modal input). The stage runs them: a search with the real web_search tool (the page
titled exactly so), a browse with the real page_browser (the fact its field names), a compute in
Python, a sub-task on the expert pool (a builtin expert where its goal is in the grammar, the best
model backend otherwise, escalating while unsure); a step that fails sets the candidate aside with
the reason. The last step's value is the answer. Every candidate then meets the same five
checks in verified_samples.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestra.config import Params
from orchestra.data import phrases as ph
from orchestra.data.program import level_of
from orchestra.data.recheck import Checker, lone_node, step_inputs
from orchestra.data.report import PARALLEL_AT, available_parallelism, ngram_share, step_seconds
from orchestra.data.rewrite import KB_STRATEGIES, rewrite_all
from orchestra.data.store import (
    CANDIDATES_FILE,
    media_dir,
    read_anchors,
    read_material,
    read_seed_tasks,
    read_solutions,
    seeds_dir,
    stage_dir,
)
from orchestra.errors import OrchestraError, ReplyError, StageError, WorldError
from orchestra.io import atomic_dir, atomic_write_text, dump_json, write_jsonl
from orchestra.schemas import (
    AnchorFact,
    BrowseStep,
    ComputeStep,
    RewriteCandidate,
    SearchStep,
    SolutionStep,
    Source,
    Task,
)
from orchestra.stages import REWRITE_CANDIDATES
from orchestra.text import format_value
from orchestra.world.kb import KnowledgeBase

__all__ = ["Written", "build_rewrite_candidates", "knowledge_base", "written_candidates"]


class NewStep(BaseModel):
    """One step the openai rewriter adds."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="its id, e.g. 'n1' (later steps refer to it as $n1, or n1 in an expression)")
    op: Literal["search", "browse", "compute", "subtask"]
    arg: str = Field(
        description="search: a page title or $id; browse: a URL or $id; compute: a Python expression over "
        "ids; subtask: a goal that reads one modal input, named #M<n>"
    )
    field: str = Field(description="browse: the page field to read; the other ops: an empty string")


class Written(BaseModel):
    """The openai rewriter's own candidate: a question, and the steps it adds after the seed's program."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="the new question; it must not write the answer")
    steps: list[NewStep] = Field(description="run after the seed's steps; the last one's value is the answer")


_WRITE = (
    "You write harder questions for a multi-modal question-answering benchmark. The user message is a JSON "
    "object: a seed question, its answer, the facts its solution reads (each with an id, a statement and "
    "its value), a rewriting strategy and what it means. Write one new question by that strategy that "
    "needs the seed's facts and the steps you add: search (a page title, or $id of a step whose value is "
    "a name) and browse (a URL, or $id of a search step, and a field) on the wiki, compute (a Python "
    "expression over the ids: + - * /, abs, round, min, max), and subtask (a goal that reads something "
    "new off one modal input, naming it #M<n>). The last step's value is the answer. The "
    "question must not give the answer or the facts' values away; it may name the media as the "
    "image, the audio or the video."
)
STRATEGY_MEANS = {
    "multi_hop_chaining": "follow the seed's answer, or a name it reads, through wiki pages to another fact",
    "entity_obfuscation": "describe an entity by a relation instead of naming it, and use one of its facts",
    "numeric_composition": "combine the seed's answer with new numbers",
    "cross_modal_fusion": "combine numbers read from different media",
    "constraint_scoping": "compare filtered readings of one file",
}
_ID = re.compile(r"\b([vn][0-9]+)\b")


class _Runner:
    """Runs a written candidate's steps after its seed's program with the real tools and the pool."""

    def __init__(self, seed: Task, checker: Checker) -> None:
        self.seed, self.checker, self.tools = seed, checker, checker.tools
        self.steps: list[SolutionStep] = list(seed.solution_program or [])
        self.env: dict[str, Any] = {s.out: s.value for s in self.steps}
        self.names: dict[str, str] = {}  # the model's id -> program variable
        self.sources: list[Source] = []

    def _ref(self, text: str) -> Any:
        if not text.startswith("$"):
            return text
        key = self.names.get(text[1:], text[1:])
        if key not in self.env:
            raise ReplyError(f"{text} names no earlier step")
        return self.env[key]

    def add(self, new: NewStep) -> None:
        from orchestra.backends.goals import GoalError, literal, match_field
        from orchestra.world.program import safe_eval

        out = f"v{len(self.steps) + 1}"
        var = f"${self.names.get(new.arg[1:], new.arg[1:])}" if new.arg.startswith("$") else new.arg
        if new.op == "search":
            title = str(self._ref(new.arg))
            obs = self.tools.get("web_search")(query=title, k=10)
            hits = [
                h["url"] for h in obs.data.get("results", []) if h["title"].casefold() == title.casefold()
            ]
            if not obs.ok or not hits:
                raise ReplyError(f"search {title!r}: {obs.error or 'no page has that title'}")
            step: SolutionStep = SearchStep(out=out, value=hits[0], query=var)
        elif new.op == "browse":
            url = str(self._ref(new.arg))
            obs = self.tools.get("page_browser")(url=url)
            try:
                if not obs.ok:
                    raise GoalError(str(obs.error))
                label, value = match_field(obs.data.get("facts", []), new.field)
            except GoalError as e:
                raise ReplyError(f"browse {url} for {new.field!r}: {e}") from e
            self.sources.append(Source(type="page_browser", url=url, key_information=f"{label}: {value}"))
            step = BrowseStep(out=out, value=literal(value), url=var, field=new.field)
        elif new.op == "subtask":
            step = self._subtask(new.arg, out)
        else:
            expression = _ID.sub(lambda m: self.names.get(m.group(1), m.group(1)), new.arg)
            try:
                value = safe_eval(expression, self.env)
            except (WorldError, ArithmeticError) as e:  # a bad expression, a division by zero
                raise ReplyError(f"compute {new.arg!r}: {e}") from e
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            step = ComputeStep(out=out, value=value, expression=expression)
        self.names[new.id] = out
        self.env[out] = step.value
        self.steps.append(step)

    def _subtask(self, goal: str, out: str) -> SolutionStep:
        """A new reading of the media: the goal run on the pool, its result the recorded value."""
        import asyncio

        from orchestra.agent.expert import ExpertError, step_goal
        from orchestra.data.reference import NoReference, goal_step

        if "$" in goal or not re.search(r"#M[1-9]", goal):
            raise ReplyError(f"a sub-task reads one modal input (#M<n>) and no other step: {goal!r}")
        cards = {c.name: c for c in self.checker.cards}
        try:
            step = goal_step(goal, None, out, self.seed, cards)
            step_goal(step, {}, step_inputs(self.seed))
        except (NoReference, ExpertError) as e:
            raise ReplyError(f"sub-task {goal!r}: {e}") from e
        kind, node, refs = lone_node(self.seed, step)
        expert, value, why = asyncio.run(self.checker.read(self.seed, kind, node, refs))
        if expert is None:
            raise ReplyError(f"sub-task {goal!r}: no expert read it ({why})")
        return step.model_copy(update={"value": value})


def _written(
    seed: Task, strategy: str, cid: str, reply: Written, checker: Checker, anchors: list[str]
) -> RewriteCandidate:
    """The candidate a reply describes, its new steps run (ReplyError when one fails)."""
    from orchestra.data.llm import check_written

    if not reply.steps:
        raise ReplyError("the candidate adds no step")
    run = _Runner(seed, checker)
    for new in reply.steps:
        run.add(new)
    answer = format_value(run.steps[-1].value)
    question = check_written(reply.question, answer)
    used = {"search": "web_search", "browse": "page_browser", "compute": "code_executor"}
    tools_used = sorted({used[s.op] for s in run.steps if s.op in used})
    task = Task(
        id=cid, question=question, omni_modal_input=list(seed.omni_modal_input),
        annotated_solution=[f"Step {k}: {s.op}: {format_value(s.value)}" for k, s in enumerate(run.steps, 1)],
        sources=run.sources, answer=answer, total_steps=len(run.steps), Level=level_of(len(run.steps)),
        required_external_tools=tools_used, task_type=seed.task_type, category=seed.category,
        solution_program=run.steps,
    )  # fmt: skip
    level = level_of(len(run.steps))
    return RewriteCandidate(
        candidate_id=cid, seed_id=str(seed.id), strategy=strategy, level=level,  # type: ignore[arg-type]
        task=task, anchor_ids=anchors, template="openai:written",
    )  # fmt: skip


def written_candidates(
    seeds: list[Task], anchors: list[AnchorFact], strategies: list[str], provider: Any, checker: Checker
) -> tuple[list[RewriteCandidate], list[dict[str, str]]]:
    """The openai rewriter's own candidates, one request per (seed with anchors, strategy in
    ``strategies``), in seed order; the replies that fail, with the reason."""
    by_seed: dict[str, list[AnchorFact]] = {}
    for a in anchors:
        by_seed.setdefault(a.task_id, []).append(a)
    kept: list[RewriteCandidate] = []
    rejected: list[dict[str, str]] = []
    for seed in seeds:
        facts = by_seed.get(str(seed.id))
        if not facts:
            continue
        for k, strategy in enumerate(strategies, 1):
            cid = f"{seed.id}-w{k}"
            item = {
                "question": seed.question,
                "answer": seed.answer,
                "facts": [{"id": a.step, "statement": a.text, "value": a.value} for a in facts],
                "strategy": strategy,
                "strategy_means": STRATEGY_MEANS[strategy],
            }
            try:
                reply = provider.ask(Written, _WRITE, item)
                kept.append(_written(seed, strategy, cid, reply, checker, [a.fact_id for a in facts]))
            except ReplyError as e:
                rejected.append(
                    {
                        "candidate_id": cid,
                        "seed_id": str(seed.id),
                        "reason": f"rewriter candidate rejected: {e}",
                    }
                )
    return kept, rejected


def _write_own(
    seeds: list[Task],
    anchors: list[AnchorFact],
    strategies: list[str],
    provider: Any,
    params: Params,
    root: Path,
) -> tuple[list[RewriteCandidate], list[dict[str, str]]]:
    """:func:`written_candidates` with the stage's tools (perception cache on) and backend pool."""
    from orchestra.agent.runtime import open_runtime

    media = media_dir(root)
    runtime = open_runtime(
        params.agent,
        params.tools,
        pages=seeds_dir(root),
        media_root=media,
        cache_dir=root,
        providers=params.providers,
    )
    with runtime as env:
        checker = Checker(env.backends, env.tools, media, params.agent)
        return written_candidates(seeds, anchors, strategies, provider, checker)


def knowledge_base(seeds_dir: Path) -> KnowledgeBase | None:
    """What the builtin rewriter phrases pages from: a generated world's own, else the entities the
    pages beside the seed tasks (kb/pages.jsonl) describe in the world's vocabulary, else None."""
    from orchestra.tools.registry import has_pages, page_store
    from orchestra.tools.webpage import text_facts
    from orchestra.world.kb import kb_from_pages
    from orchestra.world.replay import load_truth

    try:
        return load_truth(seeds_dir).kb
    except OrchestraError:
        pass
    if not has_pages(seeds_dir):
        return None
    pages = page_store(seeds_dir).pages
    kb = kb_from_pages(
        (p.url, p.title, [(f["label"], f["value"]) for f in text_facts(p.text)]) for p in pages
    )
    return kb if kb.entities else None


def _skipped_table(skipped: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """strategy -> {why it was skipped: seeds}"""
    out: dict[str, dict[str, int]] = {}
    for (strategy, why), n in sorted(skipped.items()):
        out.setdefault(strategy, {})[why] = n
    return out


def build_rewrite_candidates(params: Params, root: Path) -> dict[str, Any]:
    """The rewrite_candidates stage (module docstring): read data/seed_tasks and data/anchor_facts,
    write candidates.jsonl, rejected.jsonl (the openai rewriter's replies set aside, with the reason;
    empty under builtin) and summary.json (cells, templates, 3-gram share, parallelism, the strategies
    skipped and why) into data/rewrite_candidates (replaced atomically)."""
    from orchestra.data.llm import JsonProvider, rephrase_candidates, stage_provider
    from orchestra.data.reference import with_references
    from orchestra.data.verify import question_similarity

    key = params.rewrite.provider
    spec = stage_provider(params, key, "rewrite.provider")
    root = Path(root)
    anchors, material = read_anchors(root), read_material(root)
    solutions = read_solutions(root)
    seeds = with_references(read_seed_tasks(root), solutions)
    kb = knowledge_base(seeds_dir(root))
    similarity = question_similarity(params.verify.similarity_metric)
    skipped: Counter[tuple[str, str]] = Counter()
    solved = {s.task_id for s in solutions}
    cands = rewrite_all(
        seeds, anchors, material, kb, params.rewrite, similarity, params.verify.max_lexical_similarity,
        solved, skipped,
    )  # fmt: skip
    rejected: list[dict[str, str]] = []
    if spec.kind == "openai":
        provider = JsonProvider(spec, key, "rewrite.provider")
        cands, rejected = rephrase_candidates(cands, provider)
        own = [s for s in params.rewrite.strategies if s in KB_STRATEGIES] if kb is None else []
        if own:  # what the builtin grammar cannot run without pages: the model writes it
            written, refused = _write_own(seeds, anchors, own, provider, params, root)
            cands, rejected = cands + written, rejected + refused
    reasons = Counter(r["reason"].split(":")[0] for r in rejected)
    if not cands:
        with_anchors = {a.task_id for a in anchors}
        reasons["seed without anchor facts"] += sum(str(s.id) not in with_anchors for s in seeds)
        reasons["no strategy and level fits the seed"] += len(with_anchors)
        raise StageError.empty(REWRITE_CANDIDATES, "candidates", +reasons)
    summary = _summary(seeds, cands, rejected, reasons, skipped, params)
    with atomic_dir(stage_dir(root, REWRITE_CANDIDATES)) as tmp:
        write_jsonl(tmp / CANDIDATES_FILE, cands)
        atomic_write_text(
            tmp / "rejected.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rejected)
        )
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
    return summary


def _summary(
    seeds: list[Task],
    cands: list[RewriteCandidate],
    rejected: list[dict[str, str]],
    reasons: Counter[str],
    skipped: Counter[tuple[str, str]],
    params: Params,
) -> dict[str, Any]:
    """rewrite_candidates' summary: cells, templates used, 3-gram share, parallelism, what was skipped."""
    seconds = step_seconds(params.agent)
    par = [available_parallelism(c.task, seconds) for c in cands]
    deep = [p for c, p in zip(cands, par, strict=True) if c.level != "Easy"]
    parallel = [p for p in deep if p >= PARALLEL_AT]
    by_strategy: dict[str, list[RewriteCandidate]] = {}
    for c in cands:
        by_strategy.setdefault(c.strategy, []).append(c)
    cells = Counter((c.strategy, c.level) for c in cands)
    return {
        "seeds": len(seeds),
        "seeds_used": len({c.seed_id for c in cands}),
        "rows": len(cands),
        "rejected": len(rejected),
        "rejected_reasons": dict(reasons.most_common()),
        **({"skipped": _skipped_table(skipped)} if skipped else {}),
        "cells": {f"{s}/{lv}": n for (s, lv), n in sorted(cells.items())},
        "by_level": dict(sorted(Counter(c.level for c in cands).items())),
        "hard_share": round(sum(c.level == "Hard" for c in cands) / max(1, len(cands)), 3),
        "templates": {
            s: {"available": ph.template_count()[s], "used": len({c.template for c in cs})}
            for s, cs in sorted(by_strategy.items())
        },
        "distinct_3gram_share": {
            "all": round(ngram_share(c.task.question for c in cands), 3),
            **{
                s: round(ngram_share(c.task.question for c in cs), 3) for s, cs in sorted(by_strategy.items())
            },
        },
        "parallelism": {
            "all_mean": round(sum(par) / max(1, len(par)), 3),
            "medium_hard_parallel_share": round(len(parallel) / max(1, len(deep)), 3),
            "parallel_subset_mean": round(sum(parallel) / max(1, len(parallel)), 3),
            "parallel_at": PARALLEL_AT,
        },
    }
