"""The expert as a function: ``expert_decision(state, program)`` labels any state, whoever reached it.

The expert knows a task's solution program (its structure: ops, perception names and args,
queries, fields, expressions — never the recorded values or the gold answer) and reads everything
else from the state alone: which program steps are done is found by matching each step's goal,
rendered with the values the state's evidence holds, against the goals the evidence ran. So it
labels states another policy reached — other ids, failed or skipped nodes, sub-tasks the program
does not need, a Maestro history — for relabelling, DA-GRPO's decision reward and DAgger mixes.

Rule, in order:

1. the program's last step is done -> ``finish`` with ``#E<id of that evidence>``;
2. some step not done has failed ``max_attempts`` times (failed or timed-out evidence with its
   goal) -> ``finish`` with ``unknown``;
3. otherwise delegate the pending steps: ``dag`` every pending step in one batch with
   ``depends_on`` edges (a step may depend on one planned in the same batch), ``waves`` the
   steps whose inputs are done, ``steps`` the first of those (ReAct, Maestro: one search).
   New ids continue after the largest id in the state; backends are chosen by the cost-aware
   match of the goal's demand against the state's backend cards (``assign_backends``).

Escalation (with ``assign_backends``; what a policy can learn, since the state shows each result's
backend, confidence and the pool's skill levels): a step whose results are all below
``agent.escalation_confidence``, or that only failed, is pending again and goes to the strongest
backend on its skill that has not run it and is at least as strong as every backend that did;
when there is none, the surest result stands. Its dependants follow it (their goals change with its value).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestra.agent.decision import Action, Format, MaestroSearch
from orchestra.agent.refs import ReferenceError_, modal_key, next_subtask_id, substitute
from orchestra.agent.state import OrchestraState
from orchestra.backends.base import BackendCard
from orchestra.backends.goals import (
    PERCEPTIONS,
    browse_goal,
    compute_goal,
    perception_goal,
    perception_tools,
    search_goal,
)
from orchestra.backends.selection import infer_demand, score_terms
from orchestra.config import AgentParams
from orchestra.errors import OrchestraError
from orchestra.schemas import (
    BrowseStep,
    ComputeStep,
    Delegate,
    Finish,
    PerceiveStep,
    SearchStep,
    SolutionStep,
    SubTask,
    SubtaskStep,
)

__all__ = [
    "ExpertError",
    "ExpertMode",
    "Progress",
    "Routing",
    "StepGoal",
    "expert_decision",
    "goal_values",
    "modal_inputs",
    "program_inputs",
    "progress",
    "rendered_goal",
    "step_backend",
    "step_goal",
    "stronger_backend",
]

ExpertMode = Literal["dag", "waves", "steps"]
_VAR = re.compile(r"\bv[0-9]+\b")
_STEP_REF = re.compile(r"\$(v[0-9]+)\b")
_MODAL_REF = re.compile(r"#(M[1-9][0-9]*)\b")


class ExpertError(OrchestraError):
    """The expert cannot label this state (a program that reads a missing input, no able backend)."""


def program_inputs(step: SolutionStep) -> list[str]:
    """The program variables a step reads (``$v1`` queries/URLs, ``v1`` in expressions)."""
    if isinstance(step, SearchStep):
        return [step.query[1:]] if step.query.startswith("$") else []
    if isinstance(step, BrowseStep):
        return [step.url[1:]] if step.url.startswith("$") else []
    if isinstance(step, ComputeStep):
        return list(dict.fromkeys(_VAR.findall(step.expression)))
    if isinstance(step, SubtaskStep):
        return list(dict.fromkeys(_STEP_REF.findall(step.goal)))
    return []


@dataclass(frozen=True)
class StepGoal:
    """A program step as a sub-task goal: the goal text, the skill and tools it needs, its modal input
    (an audio perception on a video input needs ``video_extract_audio`` before the audio tool)."""

    goal: str
    skill: str
    tools: tuple[str, ...]
    modal: str | None = None
    modal_type: str | None = None
    backend: str | None = None  # a sub-task outside the grammar: the backend that ran it for the reference

    def modalities(self) -> list[str]:
        """The modal inputs the sub-task may read: its input, else every ``#M<n>`` its goal names."""
        return [self.modal] if self.modal else list(dict.fromkeys(_MODAL_REF.findall(self.goal)))


def step_goal(step: SolutionStep, ids: Mapping[str, str], inputs: Mapping[str, tuple[str, str]]) -> StepGoal:
    """The step as a goal whose program variables are ``#E<id>`` references (``ids``: var -> id)."""

    def ref(v: str) -> str:
        return f"#{ids[v]}"

    if isinstance(step, PerceiveStep):
        if step.input_id not in inputs:
            raise ExpertError(f"step {step.out} reads {step.input_id!r}, which is not a modal input")
        key, mtype = inputs[step.input_id]
        spec = PERCEPTIONS[step.perception]
        goal = perception_goal(step.perception, step.args, f"#{key}")
        return StepGoal(goal, spec.skill, perception_tools(spec, mtype), key, mtype)
    if isinstance(step, SearchStep):
        q = ref(step.query[1:]) if step.query.startswith("$") else step.query
        return StepGoal(search_goal(q), "search", ("web_search",))
    if isinstance(step, BrowseStep):
        url = ref(step.url[1:]) if step.url.startswith("$") else step.url
        return StepGoal(browse_goal(url, step.field), "browse", ("page_browser",))
    if isinstance(step, SubtaskStep):
        goal = _STEP_REF.sub(lambda m: ref(m.group(1)), step.goal)
        types = {key: mtype for key, mtype in inputs.values()}
        mods = list(dict.fromkeys(_MODAL_REF.findall(step.goal)))
        missing = [m for m in mods if m not in types]
        if missing:
            raise ExpertError(f"step {step.out} reads #{missing[0]}, which is not a modal input")
        modal = mods[0] if len(mods) == 1 else None  # several: the sub-agent's mask reads them off the goal
        mtype = types[modal] if modal else None
        return StepGoal(goal, step.skill, tuple(step.tools), modal, mtype, step.backend)
    expr = _VAR.sub(lambda m: ref(m.group(0)), step.expression)
    return StepGoal(compute_goal(expr), "code", ("code_executor",))


def _norm(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Progress:
    """What the state's evidence shows of a program: var -> id of the evidence accepted for the step,
    var -> failed/timed-out attempts at it, and var -> the stronger backend to escalate it to."""

    done: dict[str, str] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    escalate: dict[str, str] = field(default_factory=dict)


def stronger_backend(cards: Sequence[BackendCard], skill: str, tried: set[str]) -> str | None:
    """The strongest untried card on ``skill`` whose level is at least every tried backend's (ties:
    cheaper, then name), or None. At least, not above: two experts can measure the same on a skill
    (a fast counter that was right on every calibration item) and still differ on a hard file."""
    level = {c.name: c.skills.get(skill, 0.0) for c in cards}
    best = max((level.get(b, 0.0) for b in tried), default=0.0)
    better = [c for c in cards if c.name not in tried and level[c.name] > 0 and level[c.name] >= best]
    if not better:
        return None
    return min(better, key=lambda c: (-level[c.name], c.price_per_call, c.name)).name


def modal_inputs(state: OrchestraState) -> dict[str, tuple[str, str]]:
    """Each modal input's id -> (its ``M<n>`` key, its type), as :func:`step_goal` reads them."""
    return {m.id: (modal_key(i), m.type) for i, m in enumerate(state.modal_inputs)}


def goal_values(state: OrchestraState) -> dict[str, Any]:
    """What a goal's references stand for when the scheduler runs it: ``#M<n>`` itself, ``#E<n>`` the
    value of ok evidence."""
    values: dict[str, Any] = {modal_key(i): f"#{modal_key(i)}" for i in range(len(state.modal_inputs))}
    values.update({e.id: e.value for e in state.context if e.ok})
    return values


def rendered_goal(goal: str, values: Mapping[str, Any]) -> str | None:
    """``goal`` as the scheduler runs it (``values``: :func:`goal_values`, or more), whitespace-normalised;
    None when a reference names no value."""
    try:
        return _norm(substitute(goal, values))
    except ReferenceError_:
        return None


def progress(
    state: OrchestraState,
    program: Sequence[SolutionStep],
    *,
    escalate_below: float | None = None,
) -> Progress:
    """Match program steps to the state's evidence by the goal each would run (see module docstring).

    A step can be matched only once its inputs are done; its expected goal is its rendering with
    ``#E`` references to those inputs' evidence, substituted exactly as the scheduler substitutes
    (``#M<n>`` stays itself, ``#E<n>`` becomes the evidence value), compared whitespace-normalised.

    Escalation (``escalate_below`` set): a step is done by its newest ok evidence whose confidence is
    unknown or at least ``escalate_below``. When its ok evidence is all less sure than that, or it
    only failed, and a backend in the state that has not run it is at least as strong on the step's
    skill as every backend that did, the step is pending with that backend to escalate to; when
    there is none, the surest ok evidence is accepted (a failed-only step stays pending for a plain
    retry).
    """
    inputs, values = modal_inputs(state), goal_values(state)
    out = Progress()
    for step in program:
        needs = program_inputs(step)
        if any(v not in out.done for v in needs):
            continue
        expected = rendered_goal(step_goal(step, out.done, inputs).goal, values)
        if expected is None:
            continue
        matches = [e for e in state.context if _norm(e.goal) == expected]
        oks = [e for e in matches if e.ok]
        bad = [e for e in matches if e.status in ("failed", "timeout")]
        if bad:
            out.failures[step.out] = len(bad)
        if escalate_below is None:
            if oks:
                out.done[step.out] = oks[-1].id
            continue
        sure = [e for e in oks if e.confidence is None or e.confidence >= escalate_below]
        if sure:
            out.done[step.out] = sure[-1].id
            continue
        if not matches:
            continue
        skill = step_goal(step, out.done, inputs).skill
        up = stronger_backend(state.backends, skill, {e.backend for e in matches if e.backend})
        if up is not None:
            out.escalate[step.out] = up
        elif oks:
            out.done[step.out] = max(oks, key=lambda e: (e.confidence or 0.0, e.id)).id
    return out


@dataclass(frozen=True)
class _Priced:
    value: float

    def estimate(self, tokens: int = 0) -> float:
        return self.value


@dataclass(frozen=True)
class _CardProfile:
    """A backend card as :func:`select_backend` reads a backend (name, skills, cost, latency)."""

    name: str
    skills: Mapping[str, float]
    cost: _Priced
    latency: _Priced

    @classmethod
    def of(cls, card: BackendCard) -> _CardProfile:
        return cls(card.name, card.skills, _Priced(card.price_per_call), _Priced(card.latency_s))


#: how the expert names a node's backend: the cost-aware match (the default), or a fixed baseline.
Routing = Literal["selection", "cheapest", "strongest"]


def step_backend(
    kind: StepGoal, cards: Sequence[BackendCard], agent: AgentParams, out: str, routing: Routing = "selection"
) -> str:
    able = [c for c in cards if c.skills.get(kind.skill, 0.0) > 0]
    if not able:
        raise ExpertError(f"no backend in the state has the {kind.skill!r} skill step {out} needs")
    if kind.backend is not None and kind.backend in {c.name for c in able}:
        return kind.backend  # a goal outside the grammar: only the backend that ran it is known to read it
    if routing == "cheapest":
        return min(able, key=lambda c: (c.price_per_call, -c.skills[kind.skill], c.name)).name
    if routing == "strongest":
        return min(able, key=lambda c: (-c.skills[kind.skill], c.price_per_call, c.name)).name
    # scored over the whole pool, as the runtime's selection does: prices are relative to the
    # dearest expert in the state, so a trivial absolute difference does not outweigh skill
    demand = infer_demand(kind.goal, [kind.modal_type] if kind.modal_type else [])
    terms = score_terms(demand, [_CardProfile.of(c) for c in cards], agent.cost_weight, agent.latency_weight)
    names = {c.name for c in able}
    return next(str(r["backend"]) for r in terms if r["backend"] in names)


def expert_decision(
    state: OrchestraState,
    program: Sequence[SolutionStep],
    *,
    mode: ExpertMode = "dag",
    fmt: Format = "json",
    assign_backends: bool = True,
    max_attempts: int = 2,
    agent: AgentParams | None = None,
    routing: Routing = "selection",
    escalate: bool = True,
) -> Action:
    """The expert's next decision in ``state`` for a task solved by ``program`` (module docstring).

    ``routing`` names how backends are picked (``selection``: the cost-aware match; ``cheapest`` /
    ``strongest`` on the step's skill: the routing baselines); ``escalate=False`` turns escalation off.
    """
    if not program:
        raise ExpertError("an empty program has no decisions")
    agent = agent or AgentParams()
    below = agent.escalation_confidence if assign_backends and escalate else None
    prog = progress(state, program, escalate_below=below)
    final = program[-1].out
    if final in prog.done:
        return Finish(answer=f"#{prog.done[final]}")
    if any(n >= max_attempts for v, n in prog.failures.items() if v not in prog.done):
        return Finish(answer="unknown")
    chosen: list[SolutionStep] = []
    planned: set[str] = set()
    for s in program:
        if s.out in prog.done:
            continue
        if all(v in prog.done or (mode == "dag" and v in planned) for v in program_inputs(s)):
            chosen.append(s)
            planned.add(s.out)
            if mode == "steps":
                break
    if not chosen:
        raise ExpertError("no step of the program is ready (a step reads a variable no step defines)")
    first = int(next_subtask_id(e.id for e in state.context)[1:])
    ids = dict(prog.done)
    inputs = modal_inputs(state)
    subtasks = []
    for k, s in enumerate(chosen):
        ids[s.out] = f"E{first + k}"
        kind = step_goal(s, ids, inputs)
        subtasks.append(
            SubTask(
                id=ids[s.out],
                goal=kind.goal,
                modalities=kind.modalities(),
                tools=list(kind.tools),
                backend=(
                    prog.escalate.get(s.out) or step_backend(kind, state.backends, agent, s.out, routing)
                )
                if assign_backends
                else None,
                skill=kind.skill if fmt == "maestro" else None,
                depends_on=[ids[v] for v in program_inputs(s)],
            )
        )
    if fmt == "maestro":
        st = subtasks[0]
        return MaestroSearch(model=st.backend or "", skill=st.skill or "", query=st.goal)
    return Delegate(subtasks=subtasks)
