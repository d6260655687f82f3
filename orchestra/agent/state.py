"""The orchestrator state s_t = (q, M, c_t, H_t, B, T) and its deterministic rendering into chat messages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestra.agent.decision import Format, ValidationContext
from orchestra.agent.memory import Evidence, TokenCounter, compress, count_tokens, render_evidence
from orchestra.agent.refs import modal_key
from orchestra.backends.base import BackendCard
from orchestra.errors import OrchestraError
from orchestra.schemas import ModalInput
from orchestra.tools.base import Tool

__all__ = [
    "ContextBudgetError",
    "HistoryItem",
    "OrchestraState",
    "ToolCard",
    "history_from_evidence",
    "render_state",
    "system_prompt",
    "validation_context",
]


class ContextBudgetError(OrchestraError):
    """The state cannot be rendered within the token budget even with no evidence or history."""


class ToolCard(BaseModel):
    """A tool as the orchestrator sees it: name, one-line description, skill profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    skills: dict[str, float] = Field(default_factory=dict)

    @classmethod
    def from_tool(cls, tool: Tool, skills: Mapping[str, float] | None = None) -> ToolCard:
        first = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        prof = skills if skills is not None else (getattr(tool, "skills", None) or {})
        return cls(name=tool.name, description=first, skills={k: float(prof[k]) for k in sorted(prof)})


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


def validation_context(state: OrchestraState) -> ValidationContext:
    """What decisions in this state are validated against."""
    return ValidationContext(
        backends={b.name: frozenset(b.skills) for b in state.backends},
        tools=frozenset(t.name for t in state.tools),
        n_modal=len(state.modal_inputs),
        evidence_ids=frozenset(e.id for e in state.context),
        ok_ids=frozenset(e.id for e in state.context if e.ok),
    )


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


def _pct(skills: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(skills.items(), key=lambda kv: (-kv[1], kv[0])))


def system_prompt(
    backends: Sequence[BackendCard], tools: Sequence[ToolCard], fmt: Format = "json", describe: bool = True
) -> str:
    """The system message: role, decision format, the backend pool and the tool pool (by name)."""
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
    return "\n".join(lines)


def _user(state: OrchestraState, evidence: Sequence[str], history: Sequence[str]) -> str:
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
    counter: TokenCounter = count_tokens,
) -> list[dict[str, str]]:
    """``[system, user]`` messages for ``state`` within ``budget_tokens`` (by ``counter``); deterministic.

    The fixed part (system prompt, question, modal inputs) is measured first; if it alone exceeds
    the budget, backend/tool descriptions are dropped, and if that is still too long
    :class:`ContextBudgetError` is raised. The rest of the budget goes to the context and history:
    the newest history entries that fit in a third are reserved, evidence is compressed into what is
    left (:func:`~orchestra.agent.memory.compress`), then history takes any remainder. A final
    check against ``counter`` on the whole text drops oldest history, then least relevant evidence.
    """
    system = system_prompt(state.backends, state.tools, fmt)
    fixed = counter(system) + counter(_user(state, [], []))
    if fixed > budget_tokens:
        system = system_prompt(state.backends, state.tools, fmt, describe=False)
        fixed = counter(system) + counter(_user(state, [], []))
    if fixed > budget_tokens:
        raise ContextBudgetError(
            f"the state needs {fixed} tokens without any evidence or history; budget is {budget_tokens}"
        )
    room = budget_tokens - fixed
    hist_lines = [h.render() for h in state.history]
    hist_cost = [counter(line) for line in hist_lines]
    reserved = _newest_fitting(hist_cost, room // 3)
    evidence = compress(
        state.question, state.context, room - sum(hist_cost[-reserved:] if reserved else []), counter=counter
    )
    room -= sum(counter(render_evidence(e)) for e in evidence)
    n_hist = _newest_fitting(hist_cost, room)
    kept_hist = hist_lines[len(hist_lines) - n_hist :]
    ev_lines = [render_evidence(e) for e in evidence]
    while True:
        user = _user(state, ev_lines, kept_hist)
        if counter(system) + counter(user) <= budget_tokens or not (kept_hist or ev_lines):
            break
        if kept_hist:
            kept_hist.pop(0)
        else:
            ranked = compress(
                state.question, evidence, sum(counter(x) for x in ev_lines) - 1, counter=counter
            )
            evidence = ranked if len(ranked) < len(evidence) else evidence[:-1]
            ev_lines = [render_evidence(e) for e in evidence]
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
