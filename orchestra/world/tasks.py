"""Seed-task templates: one or two perception facts, at most one lookup and one calculation, as
an OmniGAIA task record with a replayable solution program."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from orchestra.errors import WorldError
from orchestra.schemas import BrowseStep, ComputeStep, ModalInput, PerceiveStep, SearchStep, Source, Task
from orchestra.text import format_value
from orchestra.world.catalogue import Attr
from orchestra.world.facts import Fact, Media, MediaWriter
from orchestra.world.kb import Entity, KnowledgeBase
from orchestra.world.program import safe_eval

TASK_TYPES: dict[str, tuple[str, ...]] = {
    "image": ("image",),
    "audio": ("audio",),
    "image + audio": ("image", "audio"),
    "video w/ audio": ("video", "audio"),
}
MIX_KEYS: dict[str, str] = {
    "image": "image",
    "audio": "audio",
    "image_audio": "image + audio",
    "video_audio": "video w/ audio",
}
_TEMPLATES: dict[str, dict[str, float]] = {
    "image": {"lookup": 0.35, "relation": 0.15, "num_calc": 0.3, "num_single": 0.2},
    "audio": {"lookup": 0.4, "relation": 0.15, "num_single": 0.45},
    "image + audio": {"lookup_calc": 0.65, "num_calc": 0.35},
    "video w/ audio": {"lookup_calc": 0.65, "num_calc": 0.35},
}
WIKI_NOTE = "According to its page on the world.local wiki,"


class _Skip(Exception):
    """A template cannot be built for this category (checked before anything is rendered)."""


class _Program:
    """Accumulates solution steps, annotated-solution lines, sources and tools."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.steps: list[Any] = []
        self.notes: list[str] = []
        self.sources: list[Source] = []
        self.tools: list[str] = []
        self.media: list[Media] = []
        self.env: dict[str, Any] = {}

    def _out(self, value: Any) -> str:
        out = f"v{len(self.steps) + 1}"
        self.env[out] = value
        return out

    def perceive(self, fact: Fact) -> str:
        out = self._out(fact.value)
        self.steps.append(
            PerceiveStep(
                out=out, value=fact.value, input_id=fact.media.id, perception=fact.perception, args=fact.args
            )
        )
        self.notes.append(f"{fact.how}: {format_value(fact.value)}.")
        if fact.media not in self.media:
            self.media.append(fact.media)
        return out

    def lookup(self, name_var: str, e: Entity, field: str, label: str) -> str:
        s = self._out(e.url)
        self.steps.append(SearchStep(out=s, value=e.url, query=f"${name_var}"))
        namesakes = [o.name for o in self.kb.namesakes(e)]
        warn = f" (not the near-namesake {', '.join(namesakes)})" if namesakes else ""
        self.notes.append(
            f"Search the world.local wiki for '{e.name}': the page titled exactly so is {e.url}{warn}."
        )
        value = e.attributes[field] if field in e.attributes else self.kb.by_id[e.relations[field]].name
        b = self._out(value)
        self.steps.append(BrowseStep(out=b, value=value, url=f"${s}", field=field))
        self.notes.append(f"Open {e.url} and read '{label}': {format_value(value)}.")
        self.sources.append(
            Source(
                type="page_browser", url=e.url, key_information=f"{e.name}: {label}: {format_value(value)}"
            )
        )
        self._tools("web_search", "page_browser")
        return b

    def compute(self, expression: str) -> str:
        value = safe_eval(expression, self.env)
        shown = re.sub(r"\bv\d+\b", lambda m: format_value(self.env[m.group(0)]), expression)
        out = self._out(value)
        self.steps.append(ComputeStep(out=out, value=value, expression=expression))
        self.notes.append(f"Compute {shown} = {format_value(value)}.")
        self._tools("code_executor")
        return out

    def _tools(self, *names: str) -> None:
        self.tools.extend(n for n in names if n not in self.tools)


def _poss(noun: str) -> str:
    return noun + ("'" if noun.endswith("s") else "'s")


def _pick(rng: np.random.Generator, items: list[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


def _subject(
    kb: KnowledgeBase, rng: np.random.Generator, category: str, modality: str, relation: bool = False
) -> Entity:
    pool = [
        e
        for e in kb.subjects(category)
        if (modality == "image" or " " not in e.name) and (not relation or e.relations)
    ]
    if not pool:
        raise _Skip
    return _pick(rng, pool)


def _lookup(
    w: MediaWriter, rng: np.random.Generator, mods: tuple[str, ...], cat: str, p: _Program, relation: bool
) -> tuple[str, str]:
    if len(mods) != 1:
        raise _Skip
    e = _subject(w.kb, rng, cat, mods[0], relation)
    key = _pick(rng, sorted(e.relations)) if relation else _pick(rng, [a.key for a in e.etype.attrs])
    fact = w.name_fact(rng, mods[0], e)
    if relation:
        rel = next(r for r in e.etype.rels if r.key == key)
        out = p.lookup(p.perceive(fact), e, key, rel.label)
        return f"{fact.intro} {WIKI_NOTE} what is the name of the {_poss(e.etype.phrase)} {rel.noun}?", out
    attr = next(a for a in e.etype.attrs if a.key == key)
    out = p.lookup(p.perceive(fact), e, key, attr.label)
    return f"{fact.intro} {WIKI_NOTE} what is the {_poss(e.etype.phrase)} {attr.noun}?", out


def _lookup_calc(
    w: MediaWriter, rng: np.random.Generator, mods: tuple[str, ...], cat: str, p: _Program
) -> tuple[str, str]:
    if len(mods) != 2:
        raise _Skip
    name_mod = _pick(rng, list(mods))
    num_mod = next(m for m in mods if m != name_mod)
    e = _subject(w.kb, rng, cat, name_mod)
    attr: Attr = _pick(rng, list(e.etype.attrs))
    v_attr = e.attributes[attr.key]
    if attr.year:
        mode = "between" if rng.random() < 0.6 else "after"
    else:
        mode = _pick(
            rng, ["times", "divided", "plus", "absdiff"] if v_attr >= 50 else ["times", "plus", "absdiff"]
        )
    kind = {"between": "year", "after": "count", "times": "count", "divided": "count"}.get(mode, "number")
    year = None
    if kind == "year":
        off = int(rng.integers(20, 300)) * (1 if rng.random() < 0.5 else -1)
        year = min(2030, max(1000, v_attr + off))
        year = year if year != v_attr else v_attr + 25
    name = w.name_fact(rng, name_mod, e)
    num = w.number_facts(rng, num_mod, kind, year=year, category=cat)[0]
    if mode == "divided" and (num.value < 2 or (v_attr / num.value) % 1 == 0.5):
        mode = "times"
    v3 = p.lookup(p.perceive(name), e, attr.key, attr.label)
    v4 = p.perceive(num)
    what = f"the {_poss(e.etype.phrase)} {attr.noun}"
    q, expr = {
        "between": (f"how many years lie between {what} and {num.phrase}?", f"abs({v3} - {v4})"),
        "after": (f"which year is N years after {what}, where N is {num.phrase}?", f"{v3} + {v4}"),
        "times": (f"what is {what} multiplied by {num.phrase}?", f"{v3} * {v4}"),
        "divided": (
            f"what is {what} divided by {num.phrase}, rounded to the nearest whole number?",
            f"round({v3} / {v4})",
        ),
        "plus": (f"what is the sum of {what} and {num.phrase}?", f"{v3} + {v4}"),
        "absdiff": (f"what is the absolute difference between {what} and {num.phrase}?", f"abs({v3} - {v4})"),
    }[mode]
    return f"{name.intro} {WIKI_NOTE} {q}", p.compute(expr)


def _num_calc(
    w: MediaWriter, rng: np.random.Generator, mods: tuple[str, ...], cat: str, p: _Program
) -> tuple[str, str]:
    if len(mods) == 1:
        kind = _pick(rng, ["count", "number"])
        facts = w.number_facts(rng, mods[0], kind, n=2, category=cat)
        kinds = [kind, kind]
    else:
        kinds = [_pick(rng, ["count", "number"]) for _ in mods]
        facts = [w.number_facts(rng, m, k, category=cat)[0] for m, k in zip(mods, kinds, strict=True)]
    a, b = (p.perceive(f) for f in facts)
    if kinds == ["number", "number"]:
        op = _pick(rng, ["sum", "absdiff"])
    else:
        op = _pick(rng, ["sum", "product"])
    pa, pb = facts[0].phrase, facts[1].phrase
    q, expr = {
        "sum": (f"What is the sum of {pa} and {pb}?", f"{a} + {b}"),
        "product": (f"What is {pa} multiplied by {pb}?", f"{a} * {b}"),
        "absdiff": (f"What is the absolute difference between {pa} and {pb}?", f"abs({a} - {b})"),
    }[op]
    return q, p.compute(expr)


def _num_single(
    w: MediaWriter, rng: np.random.Generator, mods: tuple[str, ...], cat: str, p: _Program
) -> tuple[str, str]:
    if len(mods) != 1:
        raise _Skip
    fact = w.number_facts(rng, mods[0], _pick(rng, ["count", "number"]), category=cat)[0]
    return f"What is {fact.phrase}?", p.perceive(fact)


_BUILDERS = {
    "lookup": lambda w, r, m, c, p: _lookup(w, r, m, c, p, relation=False),
    "relation": lambda w, r, m, c, p: _lookup(w, r, m, c, p, relation=True),
    "lookup_calc": _lookup_calc,
    "num_calc": _num_calc,
    "num_single": _num_single,
}


def build_task(w: MediaWriter, rng: np.random.Generator, task_id: str, task_type: str, category: str) -> Task:
    """One seed task of ``task_type`` about ``category``; renders its media through ``w``."""
    weights = _TEMPLATES[task_type]
    names = list(weights)
    first = names[int(rng.choice(len(names), p=np.array(list(weights.values())) / sum(weights.values())))]
    order = [first] + [n for n in names if n != first]
    w.task_id, w.task_type = task_id, task_type
    for name in order:
        p = _Program(w.kb)
        try:
            question, out = _BUILDERS[name](w, rng, TASK_TYPES[task_type], category, p)
        except _Skip:
            continue
        answer = format_value(p.env[out])
        kept, moved = w.mux(p.media)  # muxed video w/ audio: the audio steps read the video's track
        steps = [
            s.model_copy(update={"input_id": moved[s.input_id]})
            if isinstance(s, PerceiveStep) and s.input_id in moved
            else s
            for s in p.steps
        ]
        media = sorted(kept, key=lambda m: TASK_TYPES[task_type].index(m.modality))
        return Task(
            id=task_id,
            question=question,
            omni_modal_input=[ModalInput(type=m.modality, id=m.id, path=m.path) for m in media],
            annotated_solution=[f"Step {i}: {n}" for i, n in enumerate(p.notes, 1)][:-1]
            + [f"Step {len(p.notes)}: {p.notes[-1]} The answer is {answer}."],
            sources=p.sources,
            answer=answer,
            total_steps=len(p.steps),
            level="Easy" if len(p.steps) <= 3 else "Medium",
            required_external_tools=p.tools,
            task_type=task_type,
            category=category,
            solution_program=steps,
        )
    raise WorldError(f"no template fits {task_type!r} / {category!r}")  # pragma: no cover - num_* always fit
