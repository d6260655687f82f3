"""The builtin rewriter of the rewrite_candidates stage: five strategies at three levels over anchor facts.

A candidate keeps its seed's whole solution program (every anchor fact, the same values) and
extends it with steps drawn from the seed's *material* (other values its media files hold, each
recovered by the tools in anchor_facts) and from the knowledge base's pages, so its media stay
unchanged and perception stays grounded. Every added step feeds the answer. The question is
written from noun phrases for each value (``orchestra.data.phrases``); the level follows the
program's length like OmniGAIA's ``total_steps``: Easy <= 3, Medium 4-6, Hard >= 7. With
``rewrite.provider`` of kind openai the grammar still writes each candidate's program and answer,
and the model rephrases its draft question (``orchestra.data.llm.rephrase_candidates``).

Strategies (each is a way of extending the program, with its own question templates):
- ``numeric_composition``: new numbers (material or page attributes) combined by + - * /.
- ``cross_modal_fusion``: numbers read from two different modal inputs combined (needs two; a
  muxed video's picture and sound count as two).
- ``constraint_scoping``: filtered readings of one file (a colour and shape, one chart label)
  compared with max / min / absolute difference.
- ``multi_hop_chaining``: from an entity's page along relations to another page's fact.
- ``entity_obfuscation``: an entity reached through a relation, never named, whose attribute is
  combined with its parent's.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from orchestra.config import RewriteParams
from orchestra.data import phrases as ph
from orchestra.data.program import LEVEL_STEPS, Builder, level_of
from orchestra.schemas import AnchorFact, BrowseStep, ComputeStep, ModalInput, RewriteCandidate, Task
from orchestra.text import format_value
from orchestra.world.kb import Entity, KnowledgeBase

__all__ = ["KB_STRATEGIES", "NEEDS_KB", "STRATEGIES", "rewrite_all", "rewrite_seed"]


# -- strategies: each extends a replayed seed within [lo, hi] total steps, or returns False ---------
Strategy = Callable[[Builder, list[AnchorFact], int, int], bool]


def _units(n: int, per: int, lo: int, hi: int, least: int = 0) -> int | None:
    """The fewest units of ``per`` steps (at least ``least``) taking ``n`` steps into [lo, hi]."""
    k = least
    while n + per * k < lo:
        k += 1
    return k if n + per * k <= hi else None


def _numbers(b: Builder, material: list[AnchorFact], where: Callable[[AnchorFact], bool]) -> list[Any]:
    """Unused non-zero numeric material facts passing ``where``."""
    out: list[Any] = [
        f
        for f in material
        if f.fact_id not in b.used_material and isinstance(f.value, int) and where(f) and f.value != 0
    ]
    return out


def _compose(
    b: Builder,
    material: list[AnchorFact],
    units: int,
    ops: tuple[str, ...],
    where: Callable[[AnchorFact], bool],
    pages: bool = True,
) -> bool:
    """``units`` times: read a new number (a material fact passing ``where``; when none is left
    and ``pages``, an unread attribute of a page in the program) and combine it with the answer so far."""
    for _ in range(units):
        cur = b.last()
        pool = _numbers(b, material, where)
        attrs = [
            (p, a.key)
            for p in (b.pages() if pages else [])
            for a in p.entity.etype.attrs  # type: ignore[union-attr]
            if not any(
                isinstance(s, BrowseStep) and s.url == f"${p.out}" and s.field == a.key for s in b.steps
            )
        ]
        own = []
        if b.own_facts and not pool and not attrs:  # no material: the seed's own numbers, read once
            own = [f for f in _numbers(b, b.own_readings(), where) if f.step != cur.out]
        if not pool and not attrs and not own:
            return False
        if own:
            f = own[int(b.rng.integers(len(own)))]
            b.used_material.add(f.fact_id)
            other = b.vars[f.step]
        elif pool:  # a perception first: a branch of its own, as heavy as the seed's readings
            other = b.add_material(pool[int(b.rng.integers(len(pool)))])
        else:
            page, key = attrs[int(b.rng.integers(len(attrs)))]
            other = b.browse_field(page, key)
        order = [ops[i] for i in b.rng.permutation(len(ops)).tolist()]
        if not any(b.combine(op, cur, other) is not None for op in order):
            return False
    return True


def numeric_composition(b: Builder, material: list[AnchorFact], lo: int, hi: int) -> bool:
    if b.last().kind != "number":
        return False
    has_compute = any(isinstance(s, ComputeStep) for s in b.steps)
    k = _units(len(b.steps), 2, lo, hi, least=0 if has_compute else 1)
    return k is not None and _compose(b, material, k, ("sum", "absdiff", "product"), lambda f: True)


def cross_modal_fusion(b: Builder, material: list[AnchorFact], lo: int, hi: int) -> bool:
    inputs = b.channels(material)  # a muxed video's picture and sound count as two
    if len(inputs) < 2 or b.last().kind != "number":
        return False
    k = _units(len(b.steps), 2, lo, hi, least=0 if len(b.last().inputs) >= 2 else 1)
    if k is None:
        return False
    for _ in range(k):
        others = inputs - b.last().inputs or inputs
        if not _compose(
            b,
            material,
            1,
            ("sum", "absdiff", "product"),
            lambda f, o=others: b.channel(str(f.source), str(f.perception)) in o,
        ):
            return False
    return len(b.last().inputs) >= 2


def constraint_scoping(b: Builder, material: list[AnchorFact], lo: int, hi: int) -> bool:
    if b.last().kind != "number":
        return False
    k = _units(len(b.steps), 2, lo, hi, least=1)
    scoped = {"chart_value", "color_change_second", "count_shapes"}
    return k is not None and _compose(
        b,
        material,
        k,
        ("max", "min", "absdiff"),
        lambda f: f.perception in scoped and bool(f.args),
        pages=False,
    )


def _relations(e: Entity | None) -> list[str]:
    return sorted(e.relations) if e is not None else []


def multi_hop_chaining(b: Builder, material: list[AnchorFact], lo: int, hi: int) -> bool:
    n, cur = len(b.steps), b.last()
    if cur.kind == "name" and cur.entity is not None:  # a relation seed: follow on from its answer
        if lo <= n <= hi:
            return True
        page = b.search_name(cur)
        rels = _relations(page.entity)
        if not rels:
            return False
        name = b.browse_field(page, rels[int(b.rng.integers(len(rels)))])
        while len(b.steps) < lo:
            if len(b.steps) + 2 > hi:
                return False
            page = b.search_name(name)
            rels, attrs = _relations(page.entity), [a.key for a in page.entity.etype.attrs]  # type: ignore[union-attr]
            last_hop = len(b.steps) + 1 >= lo or not rels
            name = b.browse_field(page, attrs[int(b.rng.integers(len(attrs)))] if last_hop else rels[0])
        return lo <= len(b.steps) <= hi
    pages = [p for p in b.pages() if _relations(p.entity)]
    if cur.kind != "number" or not pages or n + 6 > hi or n + 6 < lo:
        return False
    page = pages[0]
    for _ in range(2):  # two relations, then an attribute combined with the seed's answer
        rels = _relations(page.entity)
        if not rels:
            return False
        page = b.search_name(b.browse_field(page, rels[int(b.rng.integers(len(rels)))]))
    attrs = [a.key for a in page.entity.etype.attrs]  # type: ignore[union-attr]
    other = b.browse_field(page, attrs[int(b.rng.integers(len(attrs)))])
    return b.combine("absdiff", cur, other) is not None


def entity_obfuscation(b: Builder, material: list[AnchorFact], lo: int, hi: int) -> bool:
    n, cur = len(b.steps), b.last()
    if cur.kind == "name" and cur.entity is not None:  # the related entity is described, never named
        if lo <= n <= hi:
            return True
        parent = next(
            p for p in b.pages() if p.entity is not None and cur.entity.id in p.entity.relations.values()
        )
        page = b.search_name(cur)
        attrs = [a.key for a in page.entity.etype.attrs]  # type: ignore[union-attr]
        other = b.browse_field(page, attrs[int(b.rng.integers(len(attrs)))])
        if len(b.steps) >= lo:
            return len(b.steps) <= hi
        mine = [a.key for a in parent.entity.etype.attrs]  # type: ignore[union-attr]
        own = b.browse_field(parent, mine[int(b.rng.integers(len(mine)))])
        return b.combine("absdiff", other, own) is not None and lo <= len(b.steps) <= hi
    pages = [p for p in b.pages() if _relations(p.entity)]
    if cur.kind != "number" or not pages or not lo <= n + 4 <= hi:
        return False
    rels = _relations(pages[0].entity)
    page = b.search_name(b.browse_field(pages[0], rels[int(b.rng.integers(len(rels)))]))
    attrs = [a.key for a in page.entity.etype.attrs]  # type: ignore[union-attr]
    other = b.browse_field(page, attrs[int(b.rng.integers(len(attrs)))])
    return b.combine("absdiff", cur, other) is not None


STRATEGIES: dict[str, Strategy] = {
    "entity_obfuscation": entity_obfuscation,
    "multi_hop_chaining": multi_hop_chaining,
    "numeric_composition": numeric_composition,
    "cross_modal_fusion": cross_modal_fusion,
    "constraint_scoping": constraint_scoping,
}

_TOOLS = {"search": "web_search", "browse": "page_browser", "compute": "code_executor"}
#: the strategies that walk from page to page, and why a seed source without pages skips them
KB_STRATEGIES = ("multi_hop_chaining", "entity_obfuscation")
NEEDS_KB = "needs a knowledge base (kb/pages.jsonl beside the seed tasks, in the world's vocabulary)"
NO_FIT = "no extension at any level fits its program and material"


def _task(b: Builder, cid: str, strategy: str) -> tuple[Task, str]:
    final = b.last()
    kinds = ph.QUESTIONS[strategy]
    kind = final.kind if final.kind in kinds else "number"
    if strategy == "cross_modal_fusion" and len(b.seed.omni_modal_input) == 1:
        kind = "number_one_file"  # a muxed video's picture and sound, not "both inputs"
    template = b.pick(kinds[kind])
    wiki = any(isinstance(s, BrowseStep) for s in b.steps)
    lead = b.pick(ph.WIKI_LEADS) if wiki else ""
    question = ph.fill(template, p=final.phrase, wiki=b.pick(ph.WIKI_HINTS) if wiki else "", wiki_lead=lead)
    question = question[0].upper() + question[1:]
    answer = format_value(final.value)
    tools: list[str] = []
    for s in b.steps:
        if s.op in _TOOLS and _TOOLS[s.op] not in tools:
            tools.append(_TOOLS[s.op])
    notes = [f"Step {i}: {n}" for i, n in enumerate(b.notes, 1)]
    notes[-1] += f" The answer is {answer}."
    task = Task(
        id=cid,
        question=question,
        omni_modal_input=[ModalInput(**m.model_dump()) for m in b.seed.omni_modal_input],
        annotated_solution=notes,
        sources=b.sources,
        answer=answer,
        total_steps=len(b.steps),
        Level=level_of(len(b.steps)),
        required_external_tools=tools,
        task_type=b.seed.task_type,
        category=b.seed.category,
        solution_program=b.steps,
    )
    return task, template


def _rng(seed: int, *parts: str) -> np.random.Generator:
    digest = hashlib.sha256("\0".join([str(seed), *parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


Similarity = Callable[[str, str], float]

#: surface draws per cell before a cell is given up (a new draw changes templates and phrases)
DRAWS = 4


def _signature(steps: list[Any]) -> str:
    return json.dumps(
        [s.model_dump(mode="json", exclude={"out"}) for s in steps], sort_keys=True, default=str
    )


def rewrite_seed(
    seed: Task,
    anchors: list[AnchorFact],
    material: list[AnchorFact],
    kb: KnowledgeBase | None,
    params: RewriteParams,
    filled: dict[tuple[str, str], int] | None = None,
    similarity: Similarity | None = None,
    max_similarity: float = 1.0,
    own_facts: bool = False,
    skipped: Counter[tuple[str, str]] | None = None,
) -> list[RewriteCandidate]:
    """Up to ``params.per_seed`` candidates for one seed, one per (strategy, level) cell that fits
    it, the least-filled cells (``filled``, updated) first; deterministic for the same inputs.

    A draw whose program another candidate of the seed already has, or whose question is more
    than ``max_similarity`` like the seed's or a sibling's (by ``similarity``, 0-1), is drawn
    again (up to :data:`DRAWS` times): the rewriter aims at what verification will check.
    Without a knowledge base (``kb`` None) the strategies that walk pages are skipped; ``own_facts``
    (a seed an expert solved) lets composition reuse the seed's own numbers. ``skipped`` counts
    (strategy, why) for the strategies the seed could not use."""
    filled = {} if filled is None else filled
    skipped = Counter() if skipped is None else skipped
    sid = str(seed.id)
    rng = _rng(params.seed, sid)
    usable = [s for s in params.strategies if kb is not None or s not in KB_STRATEGIES]
    skipped.update((s, NEEDS_KB) for s in params.strategies if s not in usable)
    cells = [(s, lv) for s in usable for lv in params.levels]
    order = sorted(range(len(cells)), key=lambda i: (filled.get(cells[i], 0), float(rng.random())))
    out: list[RewriteCandidate] = []
    programs: set[str] = set()
    tried: Counter[str] = Counter()  # strategy -> levels tried
    for i in order:
        if len(out) >= params.per_seed:
            break
        strategy, level = cells[i]
        tried[strategy] += 1
        lo, hi = LEVEL_STEPS[level]
        for draw in range(DRAWS):
            b = Builder(seed, kb, _rng(params.seed, sid, strategy, level, str(draw)), own_facts=own_facts)
            b.replay_seed()
            if not STRATEGIES[strategy](b, material, lo, hi) or level_of(len(b.steps)) != level:
                continue
            cid = f"{sid}-r{len(out) + 1}"
            task, template = _task(b, cid, strategy)
            others = [seed.question, *(c.task.question for c in out)]
            if _signature(b.steps) in programs or (
                similarity is not None and max(similarity(task.question, q) for q in others) > max_similarity
            ):
                continue
            programs.add(_signature(b.steps))
            out.append(
                RewriteCandidate(
                    candidate_id=cid,
                    seed_id=sid,
                    strategy=strategy,
                    level=level,  # type: ignore[arg-type]
                    task=task,
                    anchor_ids=[a.fact_id for a in anchors],
                    template=template,
                )
            )
            filled[cells[i]] = filled.get(cells[i], 0) + 1
            break
    if own_facts:  # a user's seed: say which strategies found no extension at any level
        done = {c.strategy for c in out}
        skipped.update((s, NO_FIT) for s in sorted(tried) if tried[s] == len(params.levels) and s not in done)
    return out


def rewrite_all(
    seeds: list[Task],
    anchors: list[AnchorFact],
    material: list[AnchorFact],
    kb: KnowledgeBase | None,
    params: RewriteParams,
    similarity: Similarity | None = None,
    max_similarity: float = 1.0,
    own_facts: Collection[str] = (),
    skipped: Counter[tuple[str, str]] | None = None,
) -> list[RewriteCandidate]:
    """Candidates for every seed that has anchors, in seed order (``own_facts``: the ids of the seeds an
    expert solved; ``skipped``: see :func:`rewrite_seed`)."""
    by_seed: dict[str, list[AnchorFact]] = {}
    for a in anchors:
        by_seed.setdefault(a.task_id, []).append(a)
    mat: dict[str, list[AnchorFact]] = {}
    for m in material:
        mat.setdefault(m.task_id, []).append(m)
    filled: dict[tuple[str, str], int] = {}
    out: list[RewriteCandidate] = []
    for seed in seeds:
        sid = str(seed.id)
        if sid in by_seed:
            mine = mat.get(sid, [])
            own = sid in own_facts
            out += rewrite_seed(
                seed, by_seed[sid], mine, kb, params, filled, similarity, max_similarity, own, skipped
            )
    return out
