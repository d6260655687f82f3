"""The orchestrator state s_t = (q, M, c_t, H_t, B, T) and its deterministic rendering into chat messages."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestra.agent.decision import Format, ValidationContext
from orchestra.agent.memory import Evidence, TokenCounter, compress, render_evidence
from orchestra.agent.refs import mark_question, modal_key, question_spans, vocabulary_kinds
from orchestra.backends.base import BackendCard
from orchestra.backends.goals import ACTIONS, goal_phrases
from orchestra.errors import OrchestraError
from orchestra.schemas import ModalInput
from orchestra.text import count_tokens, format_value
from orchestra.tools.base import Tool
from orchestra.world.catalogue import field_phrases

__all__ = [
    "STYLES",
    "ContextBudgetError",
    "HistoryItem",
    "OrchestraState",
    "Style",
    "ToolCard",
    "history_from_evidence",
    "compact_system",
    "minimal_system",
    "render_evidence_compact",
    "render_state",
    "system_prompt",
    "span_lexicon",
    "validation_context",
]


Style = Literal["verbose", "compact", "minimal", "bare", "marked"]
STYLES: tuple[Style, ...] = ("verbose", "compact", "minimal", "bare", "marked")


class ContextBudgetError(OrchestraError):
    """The state cannot be rendered within the token budget even with no evidence or history."""


class ToolCard(BaseModel):
    """A tool as the orchestrator sees it: name, one-line description, skill profile, and the closed
    sets of argument values it takes by input property (its input schema's enums, e.g. colour and
    shape names; the execution ``mode`` aside): the words of a question that span references such as
    ``#C1`` may name, the property giving their kind (refs.question_spans)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    skills: dict[str, float] = Field(default_factory=dict)
    values: dict[str, list[str]] = Field(default_factory=dict)

    @classmethod
    def from_tool(cls, tool: Tool, skills: Mapping[str, float] | None = None) -> ToolCard:
        first = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        prof = skills if skills is not None else (getattr(tool, "skills", None) or {})
        props = (tool.input_schema or {}).get("properties", {})
        values = {k: [str(v) for v in p["enum"]] for k, p in props.items() if k != "mode" and p.get("enum")}
        return cls(
            name=tool.name,
            description=first,
            skills={k: float(prof[k]) for k in sorted(prof)},
            values=values,
        )


class HistoryItem(BaseModel):
    """One entry of H_t: a delegated sub-task and how it ended, or a decision that was invalid."""

    model_config = ConfigDict(extra="forbid")

    turn: int = Field(ge=0)
    status: Literal["ok", "failed", "timeout", "skipped", "invalid"]
    subtask_id: str | None = None
    goal: str = ""
    backend: str | None = None
    tools: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    note: str = Field("", description="error of a failed sub-task, or why a decision was invalid")

    def render(self) -> str:
        if self.subtask_id is None:
            return f"turn {self.turn}: {self.status} decision ({self.note})"
        deps = ",".join(self.depends_on) or "-"
        tools = ",".join(self.tools) or "auto"
        line = f"turn {self.turn}: {self.subtask_id} [{self.status}] backend={self.backend or 'auto'} "
        line += f"tools={tools} deps={deps} goal: {' '.join(self.goal.split())[:160]}"
        return line + (f" ({self.note[:120]})" if self.note and self.status != "ok" else "")


def history_from_evidence(evidence: Iterable[Evidence]) -> list[HistoryItem]:
    """History entries for finished sub-tasks (status, backend, tools, dependencies, error)."""
    return [
        HistoryItem(
            turn=e.turn,
            status=e.status,
            subtask_id=e.id,
            goal=e.goal,
            backend=e.backend,
            tools=list(e.tools),
            depends_on=list(e.depends_on),
            note=e.error or "",
        )
        for e in evidence
    ]


class OrchestraState(BaseModel):
    """s_t: question q, modal inputs M, context c_t (the evidence memory; rendering compresses it),
    structured history H_t, backend pool B and tool pool T, plus the turn counter."""

    model_config = ConfigDict(extra="forbid")

    question: str
    modal_inputs: list[ModalInput] = Field(default_factory=list)
    context: list[Evidence] = Field(default_factory=list)
    history: list[HistoryItem] = Field(default_factory=list)
    backends: list[BackendCard] = Field(default_factory=list)
    tools: list[ToolCard] = Field(default_factory=list)
    turn: int = Field(0, ge=0)
    max_turns: int | None = Field(None, ge=1)
    sufficiency: float | None = Field(None, ge=0, le=1, description="memory.sufficiency of the context")
    threshold: float | None = Field(None, ge=0, le=1, description="sufficiency at which the loop may stop")
    unsure_below: float | None = Field(
        None, ge=0, le=1, description="results less sure than this are re-delegated (escalation_confidence)"
    )


def validation_context(state: OrchestraState) -> ValidationContext:
    """What decisions in this state are validated against."""
    return ValidationContext(
        backends={b.name: frozenset(b.skills) for b in state.backends},
        tools=frozenset(t.name for t in state.tools),
        n_modal=len(state.modal_inputs),
        evidence_ids=frozenset(e.id for e in state.context),
        ok_ids=frozenset(e.id for e in state.context if e.ok),
        spans=question_spans(state.question, *span_lexicon(state)),
        planned={e.id: e.planned() for e in state.context},
        marks={f"?{n}": sid for n, sid in enumerate(redo_marks(state), 1)},
    )


@functools.cache
def _grammar_words() -> frozenset[str]:
    return frozenset(w for ps in goal_phrases().values() for p in ps for w in re.findall(r"[a-z]+", p))


def span_lexicon(state: OrchestraState) -> tuple[dict[str, str], frozenset[str], Mapping[str, str]]:
    """What :func:`~orchestra.agent.refs.question_spans` reads besides the question: every closed-set
    argument value of the state's tools with its span kind, the words of the goal grammar (never a
    name), and where the state has the page browser the knowledge base's field phrases (``birth
    year`` -> ``born``: the schema a web expert reads fields by; a browse goal names ``#F2``)."""
    vocabulary = vocabulary_kinds({k: v for t in state.tools for k, v in t.values.items()})
    browses = any(t.name == ACTIONS["browse"][1] for t in state.tools)
    return vocabulary, _grammar_words(), field_phrases() if browses else {}


_JSON_RULES = """Reply with exactly one JSON object and nothing else, either
{"kind": "delegate", "subtasks": [{"id": "E1", "goal": "...", "modalities": ["M1"], "tools": ["..."], "backend": "...", "depends_on": []}]}
or
{"kind": "finish", "answer": "..."}
Rules: sub-task ids are E1, E2, ... and continue after the last id used. "depends_on" lists ids that must finish first; sub-tasks without a path between them run in parallel. "modalities" lists the modal inputs a sub-task may read. Write #M1 for the first modal input and #E3 for the result of sub-task E3 instead of copying them, in goals and in the answer (e.g. "answer": "#E3"). Omit "backend" or leave "tools" empty to let the runtime choose."""  # noqa: E501

_MAESTRO_RULES = """Reply with exactly one action, either
<search> Model@@Skill: Query </search>
to ask a backend (Model) to use one of its skills (Skill) on a query, or
<answer>...</answer>
with the final answer. Write #M1 for the first modal input and #E3 for the result of the third search instead of copying them."""  # noqa: E501

_GRAMMAR_HEAD = (
    "Goals the builtin experts execute, by skill (a backend runs the goals of the skills it has; "
    "write the phrase exactly, filling <...>; #E<n> may stand for a value):"
)


def _pct(skills: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(skills.items(), key=lambda kv: (-kv[1], kv[0])))


def _grammar_lines(backends: Sequence[BackendCard]) -> list[str]:
    """The goal grammar for the skills the pool's builtin experts have (none: no builtin expert)."""
    skills = {k for b in backends if b.kind == "builtin" for k in b.skills}
    phrases = goal_phrases()
    lines = [f"- {k}: " + " | ".join(phrases[k]) for k in sorted(skills) if k in phrases]
    return [_GRAMMAR_HEAD, *lines] if lines else []


def system_prompt(
    backends: Sequence[BackendCard], tools: Sequence[ToolCard], fmt: Format = "json", describe: bool = True
) -> str:
    """The verbose system message: role, decision format, the backend pool, the tool pool and the goal
    grammar of the pool's builtin experts (``describe=False`` drops descriptions, not the grammar)."""
    lines = [
        "You are the orchestrator. You never read images, audio or video yourself: you delegate "
        "sub-tasks to backends, read the evidence they return, and finish with the answer.",
        _JSON_RULES if fmt == "json" else _MAESTRO_RULES,
        "Backends:",
    ]
    for b in sorted(backends, key=lambda b: b.name):
        desc = f" - {b.description}" if describe and b.description else ""
        lines.append(f"- {b.name}: {_pct(b.skills)} | cost {b.price_per_call:g}, ~{b.latency_s:g}s{desc}")
    if fmt == "json":
        lines.append("Tools:")
        for t in sorted(tools, key=lambda t: t.name):
            skills = f" [{_pct(t.skills)}]" if t.skills else ""
            desc = f" - {t.description}" if describe and t.description else ""
            lines.append(f"- {t.name}{skills}{desc}")
    lines += _grammar_lines(backends)
    return "\n".join(lines)


def compact_system(backends: Sequence[BackendCard], tools: Sequence[ToolCard], fmt: Format = "json") -> str:
    """The compact system message for a small trained policy: names and numbers, no prose. One line
    per backend (skills by level, price per call, seconds), then the tool names (JSON format only)."""
    lines = [fmt]
    for b in sorted(backends, key=lambda b: b.name):
        skills = " ".join(f"{k} {v:g}" for k, v in sorted(b.skills.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"{b.name}: {skills} ${b.price_per_call:g} {b.latency_s:g}s")
    if fmt != "maestro" and tools:
        lines.append("tools: " + " ".join(sorted(t.name for t in tools)))
    return "\n".join(lines)


def minimal_system(backends: Sequence[BackendCard], tools: Sequence[ToolCard], fmt: Format = "lines") -> str:
    """The system message of a policy trained on one pool: the format, each backend with its skill
    names (no levels, prices or times: the policy learnt them), the tool names. Every token here is
    paid on every sample, so only what tells one pool from another stays."""
    lines = [fmt, *(f"{b.name} {','.join(sorted(b.skills))}" for b in sorted(backends, key=lambda b: b.name))]
    if fmt != "maestro" and tools:
        lines.append(" ".join(sorted(t.name for t in tools)))
    return "\n".join(lines)


def _verbose_user(state: OrchestraState, evidence: Sequence[str], history: Sequence[str]) -> str:
    lines = [f"Question: {state.question}", "Modal inputs:"]
    lines += [f"#{modal_key(i)} {m.type} ({m.id})" for i, m in enumerate(state.modal_inputs)] or ["(none)"]
    lines += ["Evidence:", *(evidence or ["(none yet)"])]
    lines += ["History:", *(history or ["(none yet)"])]
    if state.sufficiency is not None and state.threshold is not None:
        enough = "enough to finish" if state.sufficiency >= state.threshold else "not enough yet"
        score = f"{state.sufficiency:.2f} (threshold {state.threshold:.2f})"
        lines.append(f"Evidence sufficiency: {score}: {enough}")
    left = f" of {state.max_turns}" if state.max_turns else ""
    lines.append(f"Turn {state.turn + 1}{left}. Your decision:")
    return "\n".join(lines)


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def render_evidence_compact(e: Evidence) -> str:
    """``E1 ok vision_fast: <goal> = <value> c0.42`` (c: the confidence) or
    ``E2 failed web_expert: <goal> ! <error>``."""
    head = f"{e.id} {e.status} {e.backend or '-'}: {_short(e.goal, 140)}"
    if not e.ok:
        return f"{head} ! {_short(e.error or 'unknown', 90)}"
    value = "" if e.value is None else format_value(e.value)
    conf = "" if e.confidence is None else f" c{e.confidence:.2f}"
    return f"{head} = {_short(value, 90)}{conf}"


def _compact_user(
    state: OrchestraState, evidence: Sequence[str], history: Sequence[str], marked: bool = False
) -> str:
    question = mark_question(state.question, *span_lexicon(state)) if marked else state.question
    lines = [f"Q {question}"]
    if state.modal_inputs:
        lines.append(" | ".join(f"{modal_key(i)} {m.type}" for i, m in enumerate(state.modal_inputs)))
    lines += [*evidence, *history]
    if state.sufficiency is not None and state.threshold is not None:
        lines.append(f"S {state.sufficiency:.2f}/{state.threshold:.2f}")
    lines.append(f"T{state.turn + 1}" + (f"/{state.max_turns}" if state.max_turns else ""))
    return "\n".join(lines)


@dataclass(frozen=True)
class _Style:
    system: Callable[[Sequence[BackendCard], Sequence[ToolCard], Format, bool], str]
    user: Callable[[OrchestraState, Sequence[str], Sequence[str]], str]
    evidence: Callable[[Evidence], str]
    history: Callable[[Sequence[HistoryItem]], list[str]]
    marks_unsure: bool = False

    def line(self, state: OrchestraState) -> Callable[[Evidence], str]:
        """How this style writes one evidence item of ``state``."""
        marks = {sid: n for n, sid in enumerate(redo_marks(state), 1)} if self.marks_unsure else {}
        if not marks:
            return self.evidence

        def line(e: Evidence) -> str:
            return self.evidence(e) + (f" ?{marks[e.id]}" if e.id in marks else "")

        return line


def redo_marks(state: OrchestraState) -> list[str]:
    """The evidence ids the ``marked`` style marks ``?1``, ``?2``, ... in the state's order, and a redo
    line names by that mark (``redo ?1 vision_expert``, :func:`~orchestra.agent.decision.resolve`):
    each result less sure than the state's ``unsure_below``, or failed or timed out, that a backend not
    yet tried could run again (:func:`_can_escalate`; a skipped one never ran). None where
    ``unsure_below`` is unset."""
    below = state.unsure_below
    if below is None:
        return []
    unsure = [
        e
        for e in state.context
        if e.status in ("failed", "timeout") or (e.ok and e.confidence is not None and e.confidence < below)
    ]
    return [e.id for e in unsure if _can_escalate(e, state)]


def _can_escalate(e: Evidence, state: OrchestraState) -> bool:
    """Whether a backend that has not run ``e``'s goal is at least as strong, on a skill of the backend
    that ran it, as every one that has: the expert's escalation rule (agent/expert.py) read from the
    cards. An unsure result from the strongest backend on its skill is marked no more: there is
    nothing to run it again on."""
    levels = {b.name: b.skills for b in state.backends}
    goal = " ".join(e.goal.split())
    tried = {e.backend} | {x.backend for x in state.context if " ".join(x.goal.split()) == goal}
    for skill, level in levels.get(e.backend or "", {}).items():
        best = max(levels.get(b or "", {}).get(skill, 0.0) for b in tried)
        if level > 0 and any(
            n not in tried and 0 < have.get(skill, 0.0) >= best for n, have in levels.items()
        ):
            return True
    return False


_STYLES: dict[Style, _Style] = {
    "verbose": _Style(
        system=system_prompt,
        user=_verbose_user,
        evidence=render_evidence,
        history=lambda hs: [h.render() for h in hs],
    ),
    "compact": _Style(  # sub-task history is the evidence itself; only invalid decisions add a line
        system=lambda b, t, fmt, _describe: compact_system(b, t, fmt),
        user=_compact_user,
        evidence=render_evidence_compact,
        history=lambda hs: [f"x {_short(h.note, 100)}" for h in hs if h.status == "invalid"],
    ),
}
_STYLES["minimal"] = _Style(
    system=lambda b, t, fmt, _describe: minimal_system(b, t, fmt),
    user=_compact_user,
    evidence=render_evidence_compact,
    history=_STYLES["compact"].history,
)
# A policy trained on one pool learns it: only the format is named (the pool's names, some 40% of a
# small policy's state tokens and paid on every training sample, would say nothing it does not know).
_STYLES["bare"] = _Style(
    system=lambda b, t, fmt, _describe: str(fmt),
    user=_compact_user,
    evidence=render_evidence_compact,
    history=_STYLES["compact"].history,
)
# bare, with each question span marked by the key that names it (#C1 the first colour, #N2 the second
# name): the policy writes the reference and the runtime puts the span in (refs.question_spans), so
# rare names need not be copied; and each result the runtime would run again (less sure than the
# state's unsure_below, or failed, with a stronger backend untried) marked '?1', '?2', the name a redo
# line gives it, so no evidence id need be copied.
_STYLES["marked"] = _Style(
    system=_STYLES["bare"].system,
    user=lambda state, ev, hist: _compact_user(state, ev, hist, marked=True),
    evidence=render_evidence_compact,
    history=_STYLES["compact"].history,
    marks_unsure=True,
)


def _newest_fitting(costs: Sequence[int], room: int) -> int:
    """How many of the newest entries (the end of ``costs``) fit in ``room`` together."""
    n, used = 0, 0
    for cost in reversed(costs):
        if used + cost > room:
            break
        n, used = n + 1, used + cost
    return n


def render_state(
    state: OrchestraState,
    budget_tokens: int,
    *,
    fmt: Format = "json",
    style: Style = "verbose",
    counter: TokenCounter = count_tokens,
    evidence_tokens: int | None = None,
) -> list[dict[str, str]]:
    """``[system, user]`` messages for ``state`` within ``budget_tokens`` (by ``counter``); deterministic.

    ``style``: ``verbose`` (role, rules, descriptions and the goal grammar: for LLM policies) or
    ``compact`` (names and numbers only: for a small trained policy) or ``minimal`` (compact with the
    pool reduced to names: for a policy trained on that pool) or ``bare`` (compact without the pool: for
    a policy trained on one fixed pool) or ``marked`` (bare, the question's spans marked with the
    reference that names each, ``#C1`` the first colour, results to run again marked ``?1``, ``?2``:
    :func:`redo_marks`). The fixed part (system prompt, question, modal inputs) is measured first; if
    it alone exceeds the budget, backend/tool descriptions are dropped, and if that is still too long
    :class:`ContextBudgetError` is raised. The rest of the budget goes to the context and history: the
    newest history entries that fit in a third are reserved, evidence is compressed into what is left,
    at most ``evidence_tokens`` (:func:`~orchestra.agent.memory.compress`), then history takes any
    remainder. A final check against ``counter`` on the whole text drops oldest history, then least
    relevant evidence.
    """
    if style not in _STYLES:
        raise ValueError(f"unknown render style {style!r}; valid: {', '.join(STYLES)}")
    st = _STYLES[style]
    system = st.system(state.backends, state.tools, fmt, True)
    fixed = counter(system) + counter(st.user(state, [], []))
    if fixed > budget_tokens:
        system = st.system(state.backends, state.tools, fmt, False)
        fixed = counter(system) + counter(st.user(state, [], []))
    if fixed > budget_tokens:
        raise ContextBudgetError(
            f"the state needs {fixed} tokens without any evidence or history; budget is {budget_tokens}"
        )
    room = budget_tokens - fixed
    hist_lines = st.history(state.history)
    hist_cost = [counter(line) for line in hist_lines]
    reserved = _newest_fitting(hist_cost, room // 3)
    ev_room = room - sum(hist_cost[-reserved:] if reserved else [])
    if evidence_tokens is not None:
        ev_room = min(ev_room, evidence_tokens)
    line = st.line(state)
    evidence = compress(state.question, state.context, ev_room, counter=counter, line=line)
    ev_lines = [line(e) for e in evidence]
    room -= sum(counter(x) for x in ev_lines)
    n_hist = _newest_fitting(hist_cost, room)
    kept_hist = hist_lines[len(hist_lines) - n_hist :]
    while True:
        user = st.user(state, ev_lines, kept_hist)
        if counter(system) + counter(user) <= budget_tokens or not (kept_hist or ev_lines):
            break
        if kept_hist:
            kept_hist.pop(0)
        else:
            ranked = compress(
                state.question,
                evidence,
                sum(counter(x) for x in ev_lines) - 1,
                counter=counter,
                line=line,
            )
            evidence = ranked if len(ranked) < len(evidence) else evidence[:-1]
            ev_lines = [line(e) for e in evidence]
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
