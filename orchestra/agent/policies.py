"""Orchestrator policies: the Policy seam, a scripted policy for tests, the oracle that replays programs."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchestra.agent.decision import (
    Action,
    DecisionError,
    Format,
    MaestroSearch,
    ParseError,
    parse_decision,
    render_decision,
)
from orchestra.agent.memory import count_tokens
from orchestra.agent.refs import modal_key
from orchestra.agent.state import OrchestraState
from orchestra.backends.base import BackendRegistry
from orchestra.backends.goals import PERCEPTIONS, browse_goal, compute_goal, perception_goal, search_goal
from orchestra.backends.selection import infer_demand, select_backend
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
    Task,
)

__all__ = [
    "OracleMode",
    "OraclePolicy",
    "Policy",
    "PolicyError",
    "PolicyReply",
    "ScriptedPolicy",
    "oracle_for",
]

OracleMode = Literal["dag", "waves", "steps"]
_VAR = re.compile(r"\bv[0-9]+\b")


class PolicyError(OrchestraError):
    """A policy cannot be built or has nothing left to say (a bad *output* is a ParseError instead)."""


@dataclass
class PolicyReply:
    """One decision call: the action (None when the output was unusable), the raw text, and its cost."""

    action: Action | None = None
    raw_output: str = ""
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    attempts: int = 1


class Policy(ABC):
    """``decide(state) -> Action``: the one abstract method. ``respond`` wraps it with the raw text
    and token counts that trajectories record; LM policies override ``respond`` to add retries."""

    name: str = "policy"
    fmt: Format = "json"
    blocking: bool = False  # True: respond waits on I/O or a model, so systems run it in a thread

    @abstractmethod
    def decide(self, state: OrchestraState) -> Action:
        """The next decision for ``state`` (Delegate, Finish, or a Maestro search)."""

    def respond(self, state: OrchestraState, messages: Sequence[dict[str, str]]) -> PolicyReply:
        action = self.decide(state)
        raw = render_decision(action, self.fmt)
        return PolicyReply(
            action=action,
            raw_output=raw,
            input_tokens=sum(count_tokens(m["content"]) for m in messages),
            output_tokens=count_tokens(raw),
        )


class ScriptedPolicy(Policy):
    """Replays fixed outputs in order: actions, or raw texts parsed in the policy's format (so a test
    can feed garbage). Running out of script is an error."""

    def __init__(self, script: Sequence[Action | str], fmt: Format = "json", name: str = "scripted") -> None:
        self.script = list(script)
        self.fmt, self.name = fmt, name
        self._next = 0

    def _pop(self) -> Action | str:
        if self._next >= len(self.script):
            raise PolicyError(f"scripted policy ran out of its {len(self.script)} outputs")
        item = self.script[self._next]
        self._next += 1
        return item

    def decide(self, state: OrchestraState) -> Action:
        item = self._pop()
        if isinstance(item, str):
            parsed = parse_decision(item, fmt=self.fmt)
            if isinstance(parsed, ParseError):
                raise DecisionError(parsed)
            return parsed
        return item

    def respond(self, state: OrchestraState, messages: Sequence[dict[str, str]]) -> PolicyReply:
        item = self._pop()
        tin = sum(count_tokens(m["content"]) for m in messages)
        if isinstance(item, str):
            parsed = parse_decision(item, fmt=self.fmt)
            error = str(parsed) if isinstance(parsed, ParseError) else None
            action = None if isinstance(parsed, ParseError) else parsed
            return PolicyReply(
                action=action,
                raw_output=item,
                error=error,
                input_tokens=tin,
                output_tokens=count_tokens(item),
            )
        raw = render_decision(item, self.fmt)
        return PolicyReply(action=item, raw_output=raw, input_tokens=tin, output_tokens=count_tokens(raw))


class OraclePolicy(Policy):
    """Replays a task's solution program as decisions — the expert for trajectories, and the upper
    bound in tables (always labelled ``oracle``).

    It reads only the program's structure (ops, perception names and args, queries, fields,
    expressions), never the recorded values or the gold answer: every value comes from tool runs.
    Modes: ``dag`` delegates every remaining step in one batch with ``depends_on`` edges; ``waves``
    delegates the steps whose inputs exist, level by level; ``steps`` one step per decision (ReAct,
    Maestro). A step whose evidence failed is delegated again (``max_attempts`` per step in all);
    after that the oracle finishes with ``unknown``. One instance serves one task run.
    """

    name = "oracle"

    def __init__(
        self,
        task: Task,
        backends: BackendRegistry,
        agent: AgentParams,
        *,
        mode: OracleMode = "dag",
        fmt: Format = "json",
        max_attempts: int = 2,
        assign_backends: bool = True,
    ) -> None:
        if not task.solution_program:
            raise PolicyError(f"task {task.id} has no solution program for the oracle to replay")
        self.program: list[SolutionStep] = list(task.solution_program)
        self.inputs = {m.id: (modal_key(i), m.type) for i, m in enumerate(task.omni_modal_input)}
        self.backends, self.agent = backends, agent
        self.mode, self.fmt, self.max_attempts = mode, fmt, max_attempts
        self.assign_backends = assign_backends
        self.assigned: dict[str, str] = {}  # program var -> evidence id of its latest attempt
        self.tries: dict[str, int] = {}

    # -- helpers -----------------------------------------------------------------------------------

    def _inputs_of(self, step: SolutionStep) -> list[str]:
        if isinstance(step, SearchStep):
            return [step.query[1:]] if step.query.startswith("$") else []
        if isinstance(step, BrowseStep):
            return [step.url[1:]] if step.url.startswith("$") else []
        if isinstance(step, ComputeStep):
            return list(dict.fromkeys(_VAR.findall(step.expression)))
        return []

    def _ref(self, var: str, ids: dict[str, str]) -> str:
        return f"#{ids[var]}"

    def _subtask(self, step: SolutionStep, node_id: str, ids: dict[str, str]) -> SubTask:
        modalities: list[str] = []
        modal_types: list[str] = []
        if isinstance(step, PerceiveStep):
            if step.input_id not in self.inputs:
                raise PolicyError(f"step {step.out} reads {step.input_id!r}, which is not a modal input")
            key, mtype = self.inputs[step.input_id]
            goal = perception_goal(step.perception, step.args, f"#{key}")
            spec = PERCEPTIONS[step.perception]
            skill, tool = spec.skill, spec.tool
            modalities, modal_types = [key], [mtype]
        elif isinstance(step, SearchStep):
            q = self._ref(step.query[1:], ids) if step.query.startswith("$") else step.query
            goal, skill, tool = search_goal(q), "search", "web_search"
        elif isinstance(step, BrowseStep):
            url = self._ref(step.url[1:], ids) if step.url.startswith("$") else step.url
            goal, skill, tool = browse_goal(url, step.field), "browse", "page_browser"
        else:
            expr = _VAR.sub(lambda m: self._ref(m.group(0), ids), step.expression)
            goal, skill, tool = compute_goal(expr), "code", "code_executor"
        backend: str | None = None
        if self.assign_backends:
            able = [b for b in self.backends if b.skills.get(skill, 0.0) > 0]
            if not able:
                raise PolicyError(f"no backend in the pool has the {skill!r} skill step {step.out} needs")
            demand = infer_demand(goal, modal_types)
            backend = select_backend(demand, able, self.agent.cost_weight, self.agent.latency_weight).name
        deps = [ids[v] for v in self._inputs_of(step)]
        return SubTask(
            id=node_id,
            goal=goal,
            modalities=modalities,
            tools=[tool],
            backend=backend,
            skill=skill if self.fmt == "maestro" else None,
            depends_on=deps,
        )

    # -- the decision --------------------------------------------------------------------------------

    def decide(self, state: OrchestraState) -> Action:
        ok = {e.id for e in state.context if e.ok}
        known = {e.id for e in state.context}
        done = {v for v, i in self.assigned.items() if i in ok}
        final = self.program[-1].out
        if final in done:
            return Finish(answer=f"#{self.assigned[final]}")
        for v, i in self.assigned.items():
            if i in known and i not in ok and self.tries.get(v, 0) >= self.max_attempts:
                return Finish(answer="unknown")
        pending = [s for s in self.program if s.out not in done]
        for v in [v for v, i in self.assigned.items() if i not in known]:  # that decision was rejected
            del self.assigned[v]
        chosen: list[SolutionStep] = []
        planned: set[str] = set()
        for s in pending:
            ready = all(v in done or (self.mode == "dag" and v in planned) for v in self._inputs_of(s))
            if ready:
                chosen.append(s)
                planned.add(s.out)
                if self.mode == "steps":
                    break
        if not chosen:  # pragma: no cover - a program's steps only read earlier steps
            raise PolicyError("oracle: no step of the program is ready")
        nums = [int(i[1:]) for i in known if re.fullmatch(r"E[1-9][0-9]*", i)]
        nxt = max(nums, default=0) + 1
        ids = {v: i for v, i in self.assigned.items() if v in done}
        subtasks = []
        for k, s in enumerate(chosen):
            ids[s.out] = f"E{nxt + k}"
            subtasks.append(self._subtask(s, ids[s.out], ids))
        for s in chosen:
            self.assigned[s.out] = ids[s.out]
            self.tries[s.out] = self.tries.get(s.out, 0) + 1
        if self.fmt == "maestro":
            st = subtasks[0]
            return MaestroSearch(model=st.backend or "", skill=st.skill or "", query=st.goal)
        return Delegate(subtasks=subtasks)


def oracle_for(task: Task, system: str, backends: BackendRegistry, agent: AgentParams) -> OraclePolicy:
    """The oracle as each system wants it: ``orchestra``/``linear`` one DAG batch, ``react`` one step
    per decision with no backend named, ``maestro`` one ``Model@@Skill`` search per decision."""
    if system in ("orchestra", "linear"):
        return OraclePolicy(task, backends, agent, mode="dag")
    if system == "react":
        return OraclePolicy(task, backends, agent, mode="steps", assign_backends=False)
    if system == "maestro":
        return OraclePolicy(task, backends, agent, mode="steps", fmt="maestro")
    raise PolicyError(f"unknown system {system!r}; valid: orchestra, linear, react, maestro")
