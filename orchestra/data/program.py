"""A candidate program under construction: the seed's steps replayed, extension steps, and a noun
phrase for every value (the builtin rewriter writes its questions from these phrases)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestra.backends.goals import PERCEPTIONS
from orchestra.data import phrases as ph
from orchestra.errors import StageError
from orchestra.schemas import AnchorFact, BrowseStep, ComputeStep, PerceiveStep, SearchStep, Source, Task
from orchestra.text import format_value
from orchestra.world.kb import Entity, KnowledgeBase
from orchestra.world.program import safe_eval

__all__ = ["LEVEL_STEPS", "MAX_VALUE", "Builder", "Var", "level_of"]

LEVEL_STEPS: dict[str, tuple[int, int]] = {"Easy": (1, 3), "Medium": (4, 6), "Hard": (7, 12)}
MAX_VALUE = 10_000_000  # keep answers readable: no product beyond this


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
    kb: KnowledgeBase
    rng: np.random.Generator
    steps: list[Any] = field(default_factory=list)
    vars: dict[str, Var] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    used_material: set[str] = field(default_factory=set)
    words: dict[str, str] = field(default_factory=dict)

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
        name = self.vars[step.query[1:]]
        entity = self.kb.by_url.get(str(step.value))
        if entity is None:
            raise StageError(f"{self.seed.id}: search step {step.out} found {step.value!r}, not a page")
        if name.entity is not None:  # reached through a relation: keep that description
            phrase = name.phrase
        else:
            phrase = ph.fill(self.pick(ph.ENTITY_BY_NAME), type=entity.etype.phrase, where=name.phrase)
        note = f"Search the world.local wiki for '{entity.name}': the page titled exactly so is {entity.url}."
        return self._new(step, phrase, "url", note, entity=entity, inputs=name.inputs)

    def browse(self, step: BrowseStep) -> Var:
        page = self.vars[step.url[1:]]
        e = page.entity
        assert e is not None
        self.sources.append(
            Source(type="page_browser", url=e.url, key_information=f"{e.name}: {step.field}: {step.value}")
        )
        if step.field in e.relations:
            rel = next(r for r in e.etype.rels if r.key == step.field)
            target = self.kb.by_id[e.relations[step.field]]
            tmpl = self.pick(ph.ENTITY_BY_RELATION)
            phrase = ph.fill(tmpl, rel=rel.noun, parent=page.phrase)
            note = f"Open {e.url} and read '{rel.label}': {step.value}."
            return self._new(step, phrase, "name", note, entity=target, inputs=page.inputs)
        attr = next(a for a in e.etype.attrs if a.key == step.field)
        phrase = ph.fill(self.pick(ph.ATTRIBUTE), noun=attr.noun, entity=page.phrase)
        note = f"Open {e.url} and read '{attr.label}': {format_value(step.value)}."
        return self._new(step, phrase, "number", note, inputs=page.inputs)

    def compute(self, step: ComputeStep, op: str | None = None, a: str = "", b: str = "") -> Var:
        if op is None:
            parsed = ph.parse_operation(step.expression)
            if parsed is None:
                raise StageError(f"{self.seed.id}: cannot phrase the expression {step.expression!r}")
            op, a, b = parsed
        va, vb = self.vars[a], self.vars[b]
        pa, pb = (f"({v.phrase})" if v.compound else v.phrase for v in (va, vb))
        phrase = ph.fill(self.pick(ph.OPERATIONS[op]), a=pa, b=pb)
        shown = ph.EXPRESSIONS[op].format(a=format_value(va.value), b=format_value(vb.value))
        note = f"Compute {shown} = {format_value(step.value)}."
        return self._new(step, phrase, "number", note, inputs=va.inputs | vb.inputs, compound=True)

    def replay_seed(self) -> None:
        for step in self.seed.solution_program or []:
            getattr(self, step.op)(copy.deepcopy(step))

    # -- extensions -------------------------------------------------------------------------------
    def add_material(self, fact: AnchorFact) -> Var:
        self.used_material.add(fact.fact_id)
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
        assert e is not None
        value = e.attributes[key] if key in e.attributes else self.kb.by_id[e.relations[key]].name
        return self.browse(BrowseStep(out=self.next_out(), value=value, url=f"${page.out}", field=key))

    def search_name(self, name: Var) -> Var:
        assert name.entity is not None
        return self.search(SearchStep(out=self.next_out(), value=name.entity.url, query=f"${name.out}"))

    def last(self) -> Var:
        return self.vars[self.steps[-1].out]

    def pages(self) -> list[Var]:
        return [v for v in self.vars.values() if v.kind == "url"]
