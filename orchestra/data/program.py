"""A candidate program under construction: the seed's steps replayed, extension steps, and a noun
phrase for every value (the builtin rewriter writes its questions from these phrases)."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestra.backends.goals import PERCEPTIONS
from orchestra.data import phrases as ph
from orchestra.errors import StageError
from orchestra.schemas import (
    AnchorFact,
    BrowseStep,
    ComputeStep,
    PerceiveStep,
    SearchStep,
    Source,
    SubtaskStep,
    Task,
)
from orchestra.text import format_value
from orchestra.world.kb import Entity, KnowledgeBase
from orchestra.world.program import safe_eval

__all__ = ["LEVEL_STEPS", "MAX_VALUE", "Builder", "Var", "level_of"]

LEVEL_STEPS: dict[str, tuple[int, int]] = {"Easy": (1, 3), "Medium": (4, 6), "Hard": (7, 12)}
MAX_VALUE = 10_000_000  # keep answers readable: no product beyond this
_REFS = re.compile(r"\$(v[0-9]+)\b|#M([1-9][0-9]*)\b")


def level_of(steps: int) -> str:
    return next(k for k, (lo, hi) in LEVEL_STEPS.items() if lo <= steps <= hi) if steps <= 12 else "Hard"


@dataclass
class Var:
    out: str
    value: Any
    phrase: str
    kind: str  # number | name | url
    entity: Entity | None = None  # url: the page's entity; name: the entity it names (if known)
    inputs: frozenset[str] = frozenset()  # modal inputs it depends on
    compound: bool = False  # computed: parenthesised when it is an operand


@dataclass
class Builder:
    seed: Task
    kb: KnowledgeBase | None  # None: the seed source has no knowledge base the rewriter can phrase
    rng: np.random.Generator
    steps: list[Any] = field(default_factory=list)
    vars: dict[str, Var] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    used_material: set[str] = field(default_factory=set)
    words: dict[str, str] = field(default_factory=dict)
    own_facts: bool = False  # a seed solved by an expert (no world truth): compose its own numbers too

    def pick(self, options: tuple[str, ...]) -> str:
        return options[int(self.rng.integers(len(options)))]

    def channel(self, input_id: str, perception: str) -> str:
        """What a perception reads: its modal input's id, or ``<id>:audio`` for a video's sound track
        (a muxed "video w/ audio"), so that one muxed file still offers two modalities to fuse."""
        spec = PERCEPTIONS.get(perception)
        mod = next((m for m in self.seed.omni_modal_input if m.id == input_id), None)
        if spec is not None and mod is not None and spec.modality != mod.type:
            return f"{input_id}:{spec.modality}"
        return input_id

    def channels(self, material: list[AnchorFact]) -> set[str]:
        """The seed's modal inputs and every channel its steps or ``material`` read (see :meth:`channel`)."""
        out = {m.id for m in self.seed.omni_modal_input}
        steps = [
            (s.input_id, s.perception)
            for s in self.seed.solution_program or []
            if isinstance(s, PerceiveStep)
        ]
        facts = [(str(f.source), str(f.perception)) for f in material if f.perception]
        return out | {self.channel(i, p) for i, p in steps + facts}

    def _media_word(self, input_id: str) -> str:
        """One word per modal input for the whole question ("image" or "picture", not both)."""
        if input_id not in self.words:
            mod = next(m for m in self.seed.omni_modal_input if m.id == input_id)
            self.words[input_id] = self.pick(ph.MEDIA_WORDS[mod.type])
        return self.words[input_id]

    def _new(self, step: Any, phrase: str, kind: str, note: str, **kw: Any) -> Var:
        var = Var(step.out, step.value, phrase, kind, **kw)
        self.steps.append(step)
        self.vars[step.out] = var
        self.notes.append(note)
        return var

    def next_out(self) -> str:
        return f"v{len(self.steps) + 1}"

    # -- steps ------------------------------------------------------------------------------------
    def perceive(self, step: PerceiveStep) -> Var:
        m = self._media_word(step.input_id)
        key = step.perception + (
            "+shape" if step.perception == "count_shapes" and "shape" in step.args else ""
        )
        phrase = ph.fill(self.pick(ph.VALUE_PHRASES[key]), m=m, **step.args)
        kind = "name" if step.perception in ph.NAME_SOURCES else "number"
        if kind == "name":
            where = ph.fill(self.pick(ph.NAME_SOURCES[step.perception]), m=m)
            phrase = where
        note = f"{phrase[0].upper()}{phrase[1:]}: {format_value(step.value)}."
        return self._new(
            step, phrase, kind, note, inputs=frozenset({self.channel(step.input_id, step.perception)})
        )

    def search(self, step: SearchStep) -> Var:
        name = self.vars[step.query[1:]] if step.query.startswith("$") else None
        entity = self.kb.by_url.get(str(step.value)) if self.kb is not None else None
        if entity is None and self.kb is not None and not self.own_facts:
            raise StageError(f"{self.seed.id}: search step {step.out} found {step.value!r}, not a page")
        if entity is not None:
            found = f"the page titled exactly so is {entity.url}."
            note = f"Search the world.local wiki for '{entity.name}': {found}"
        else:
            title = name.value if name is not None else step.query
            note = f"Search the wiki for '{title}': the page titled exactly so is {step.value}."
        if name is not None and name.entity is not None:  # reached through a relation: keep that description
            phrase = name.phrase
        else:
            kind = entity.etype.phrase if entity is not None else "page"
            where = name.phrase if name is not None else f'"{step.query}"'
            phrase = ph.fill(self.pick(ph.ENTITY_BY_NAME), type=kind, where=where)
        inputs = name.inputs if name is not None else frozenset()
        return self._new(step, phrase, "url", note, entity=entity, inputs=inputs)

    def browse(self, step: BrowseStep) -> Var:
        page = self.vars[step.url[1:]]
        e = page.entity
        if e is None:  # a page outside the knowledge base the rewriter knows: the field as written
            return self._browse_field_as_written(step, page)
        self.sources.append(
            Source(type="page_browser", url=e.url, key_information=f"{e.name}: {step.field}: {step.value}")
        )
        if step.field in e.relations:
            rel = next(r for r in e.etype.rels if r.key == step.field)
            assert self.kb is not None  # an entity comes from it
            target = self.kb.by_id[e.relations[step.field]]
            tmpl = self.pick(ph.ENTITY_BY_RELATION)
            phrase = ph.fill(tmpl, rel=rel.noun, parent=page.phrase)
            note = f"Open {e.url} and read '{rel.label}': {step.value}."
            return self._new(step, phrase, "name", note, entity=target, inputs=page.inputs)
        attr = next(a for a in e.etype.attrs if a.key == step.field)
        phrase = ph.fill(self.pick(ph.ATTRIBUTE), noun=attr.noun, entity=page.phrase)
        note = f"Open {e.url} and read '{attr.label}': {format_value(step.value)}."
        return self._new(step, phrase, "number", note, inputs=page.inputs)

    def _browse_field_as_written(self, step: BrowseStep, page: Var) -> Var:
        noun = " ".join(step.field.replace("_", " ").split())
        url = self.vars[step.url[1:]].value if step.url.startswith("$") else step.url
        self.sources.append(
            Source(type="page_browser", url=str(url), key_information=f"{noun}: {step.value}")
        )
        phrase = ph.fill(self.pick(ph.ATTRIBUTE), noun=noun, entity=page.phrase)
        kind = "number" if isinstance(step.value, int | float) else "name"
        note = f"Open {url} and read '{noun}': {format_value(step.value)}."
        return self._new(step, phrase, kind, note, inputs=page.inputs)

    def subtask(self, step: SubtaskStep) -> Var:
        """A model backend's sub-task: its goal as a clause, each reference read as its phrase."""
        inputs: frozenset[str] = frozenset()

        def said(m: re.Match[str]) -> str:
            nonlocal inputs
            if m.group(1):
                var = self.vars[m.group(1)]
                inputs |= var.inputs
                return var.phrase
            mod = self.seed.omni_modal_input[int(m.group(2)) - 1]
            inputs |= {mod.id}
            return f"the {self._media_word(mod.id)}"

        clause = _REFS.sub(said, step.goal)
        phrase = f"the result when you {clause[0].lower()}{clause[1:]}".rstrip(".?! ")
        kind = "number" if isinstance(step.value, int | float) else "name"
        note = f"{clause[0].upper()}{clause[1:]}: {format_value(step.value)}."
        return self._new(step, phrase, kind, note, inputs=inputs)

    def compute(self, step: ComputeStep, op: str | None = None, a: str = "", b: str = "") -> Var:
        if op is None:
            parsed = ph.parse_operation(step.expression)
            if parsed is None:
                return self._expression(step)
            op, a, b = parsed
        va, vb = self.vars[a], self.vars[b]
        pa, pb = (f"({v.phrase})" if v.compound else v.phrase for v in (va, vb))
        phrase = ph.fill(self.pick(ph.OPERATIONS[op]), a=pa, b=pb)
        shown = ph.EXPRESSIONS[op].format(a=format_value(va.value), b=format_value(vb.value))
        note = f"Compute {shown} = {format_value(step.value)}."
        return self._new(step, phrase, "number", note, inputs=va.inputs | vb.inputs, compound=True)

    def _expression(self, step: ComputeStep) -> Var:
        """A computation the operation phrases do not cover: the expression over its operands' phrases."""
        var = re.compile(r"\bv[0-9]+\b")
        names = [n for n in var.findall(step.expression) if n in self.vars]
        said = var.sub(
            lambda m: f"[{self.vars[m[0]].phrase}]" if m[0] in self.vars else m[0], step.expression
        )
        inputs = frozenset().union(*(self.vars[n].inputs for n in names))
        note = f"Compute {step.expression} = {format_value(step.value)}."
        return self._new(step, f"the value of {said}", "number", note, inputs=inputs, compound=True)

    def replay_seed(self) -> None:
        for step in self.seed.solution_program or []:
            getattr(self, step.op)(copy.deepcopy(step))

    # -- extensions -------------------------------------------------------------------------------
    def add_material(self, fact: AnchorFact) -> Var:
        self.used_material.add(fact.fact_id)
        if fact.perception is None and fact.goal:  # read by a model backend: its sub-task again
            sub = SubtaskStep(
                out=self.next_out(), value=fact.value, goal=fact.goal, skill=fact.skill or "reasoning",
                backend=fact.checked_by,
            )  # fmt: skip
            return self.subtask(sub)
        step = PerceiveStep(
            out=self.next_out(),
            value=fact.value,
            input_id=str(fact.source),
            perception=str(fact.perception),
            args=dict(fact.args),
        )
        return self.perceive(step)

    def combine(self, op: str, a: Var, b: Var) -> Var | None:
        expr = ph.EXPRESSIONS[op].format(a=a.out, b=b.out)
        value = safe_eval(expr, {k: v.value for k, v in self.vars.items()})
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or abs(value) > MAX_VALUE or (op == "divided" and b.value in (0, 1)):
            return None
        return self.compute(ComputeStep(out=self.next_out(), value=value, expression=expr), op, a.out, b.out)

    def browse_field(self, page: Var, key: str) -> Var:
        e = page.entity
        assert e is not None and self.kb is not None
        value = e.attributes[key] if key in e.attributes else self.kb.by_id[e.relations[key]].name
        return self.browse(BrowseStep(out=self.next_out(), value=value, url=f"${page.out}", field=key))

    def search_name(self, name: Var) -> Var:
        assert name.entity is not None
        return self.search(SearchStep(out=self.next_out(), value=name.entity.url, query=f"${name.out}"))

    def last(self) -> Var:
        return self.vars[self.steps[-1].out]

    def pages(self) -> list[Var]:
        """The program's pages the knowledge base knows (their entity's fields can be read)."""
        return [v for v in self.vars.values() if v.kind == "url" and v.entity is not None]

    def own_readings(self) -> list[AnchorFact]:
        """The seed's own perceived numbers as material facts (for a seed solved by an expert, whose
        media have no world truth to enumerate material from): each names its step."""
        out = []
        for s in self.seed.solution_program or []:
            value = self.vars[s.out].value
            if not isinstance(value, int) or isinstance(value, bool) or value == 0:
                continue
            if isinstance(s, PerceiveStep):
                source, perception, args = s.input_id, s.perception, dict(s.args)
            elif isinstance(s, SubtaskStep) and (refs := re.findall(r"#M([1-9][0-9]*)\b", s.goal)):
                source, perception, args = self.seed.omni_modal_input[int(refs[0]) - 1].id, None, {}
            else:
                continue
            tid = str(self.seed.id)
            where = {"source": source, "perception": perception, "args": args}
            fact_id = f"{tid}:own:{s.out}"
            out.append(
                AnchorFact(
                    task_id=tid,
                    fact_id=fact_id,
                    kind="perception",
                    modality="text",
                    step=s.out,
                    value=value,
                    text="",
                    **where,
                )
            )
        return out
