"""The four systems — orchestra, linear, react, maestro — as one decision loop over the same parts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Literal

from orchestra.agent.accounting import Ledger
from orchestra.agent.decision import Format, MaestroSearch, search_to_delegate, validate_decision
from orchestra.agent.graph import GraphError, TaskGraph
from orchestra.agent.memory import Evidence, EvidenceStore, sufficiency
from orchestra.agent.policies import Policy, PolicyReply
from orchestra.agent.refs import ReferenceError_, find_refs, substitute
from orchestra.agent.runtime import Environment
from orchestra.agent.scheduler import Limits, run_graph
from orchestra.agent.state import (
    HistoryItem,
    OrchestraState,
    ToolCard,
    history_from_evidence,
    validation_context,
)
from orchestra.agent.subagent import SubAgent
from orchestra.backends.base import Backend, BackendRegistry
from orchestra.backends.builtin import BuiltinExpert
from orchestra.config import SKILLS, AgentParams, LatencySpec, PriceSpec
from orchestra.errors import OrchestraError
from orchestra.schemas import Delegate, Finish, Task, Trajectory, TrajectoryStep
from orchestra.text import format_value

__all__ = [
    "SYSTEMS",
    "System",
    "evidence_of",
    "react_agent",
    "run_react_lm",
    "run_task",
    "run_task_sync",
    "system_format",
]

System = Literal["orchestra", "linear", "react", "maestro"]
SYSTEMS: tuple[System, ...] = ("orchestra", "linear", "react", "maestro")


def system_format(system: System) -> Format:
    return "maestro" if system == "maestro" else "json"


def react_agent(agent: AgentParams) -> Backend:
    """The single agent of the ReAct baseline: every skill, every tool, the policy's own price."""
    return BuiltinExpert(
        "react_agent",
        {s: 1.0 for s in SKILLS},
        PriceSpec(),
        LatencySpec(),
        "the ReAct baseline's single agent: calls tools itself, no delegation",
    )


def _tool_cards(env: Environment) -> list[ToolCard]:
    return [ToolCard.from_tool(t, env.agent.tool_skills.get(t.name)) for t in env.tools]


def _shift(evidence: list[Evidence], offset: float) -> list[Evidence]:
    out = []
    for e in evidence:
        upd: dict[str, Any] = {}
        if e.start_s is not None:
            upd["start_s"] = e.start_s + offset
        if e.end_s is not None:
            upd["end_s"] = e.end_s + offset
        out.append(e.model_copy(update=upd))
    return out


def _est_cost(backends: BackendRegistry, name: str | None) -> float:
    return backends.get(name).cost.estimate() if name is not None and name in backends else 0.0


def sufficient_answer(store: EvidenceStore) -> str | None:
    """The answer the evidence already holds: the value of the newest successful sub-task that no
    other sub-task depends on (a sink of the delegated DAG), formatted like a ``#E`` substitution."""
    needed = {d for e in store for d in e.depends_on}
    sinks = [e for e in store.items() if e.ok and e.id not in needed and e.value is not None]
    return substitute(f"#{sinks[-1].id}", store.values()) if sinks else None


def _invalid(step: TrajectoryStep, history: list[HistoryItem], turn: int, note: str) -> None:
    step.error = note
    history.append(HistoryItem(turn=turn, status="invalid", note=note[:300]))


class _TaskRun:
    """One run of a task by a system: the parts fixed for the run (sub-agent runner, limits, the pools
    the state shows) and what it gathers turn by turn (evidence, history, steps, accounting)."""

    def __init__(
        self, task: Task, system: System, policy: Policy, env: Environment, start: OrchestraState | None
    ) -> None:
        agent = env.agent
        self.task, self.system, self.policy, self.env, self.agent = task, system, policy, env, agent
        self.limits = Limits.from_params(agent, linear=system in ("linear", "react"))
        force = react_agent(agent) if system == "react" else None
        self.runner = SubAgent(
            env.backends,
            env.tools,
            agent,
            task.question,
            task.omni_modal_input,
            env.media_root,
            seed=env.seed,
            force_backend=force,
        )
        self.ledger = Ledger(agent.tool_prices, agent.policy_price)
        self.store = EvidenceStore(start.context if start is not None else ())
        self.history: list[HistoryItem] = list(start.history) if start is not None else []
        self.steps: list[TrajectoryStep] = []
        self.cards = [force.card()] if force is not None else env.backends.cards()
        self.tool_cards = _tool_cards(env)
        self.critical = self.policy_s = self.render_s = 0.0
        self.score = sufficiency(task.question, self.store.items()) if len(self.store) else 0.0
        self.answer: str | None = None
        self.error: str | None = None
        self.stopped_by = "finish"
        self.t0 = time.perf_counter()
        self.started_at = time.time()

    async def turn(self, turn: int) -> bool:
        """One decision and what it asks for; True when the run ends there (a finish, or an unusable
        decision where the evidence already suffices)."""
        state = self._state(turn)
        step, reply = await self._decide(state, turn)
        action = reply.action
        problem = None if action is None else validate_decision(action, validation_context(state))
        if action is None or problem is not None:
            _invalid(
                step, self.history, turn, str(problem) if problem else reply.error or "no usable decision"
            )
            return self.sufficient()  # the evidence suffices: the loop ends without the policy
        step.decision = action  # a Maestro search is stored as itself, run as a one-node delegate
        if isinstance(action, Finish):
            return self._finish(action, step, turn)
        await self._delegate(action, step, turn)
        return False

    def _state(self, turn: int) -> OrchestraState:
        """s_t: what the policy sees before its decision of ``turn``."""
        task, agent = self.task, self.agent
        return OrchestraState(
            question=task.question,
            modal_inputs=list(task.omni_modal_input),
            context=self.store.items(),
            history=list(self.history),
            backends=self.cards,
            tools=self.tool_cards,
            turn=turn,
            max_turns=self.env.max_turns,
            sufficiency=self.score if len(self.store) else None,
            threshold=agent.sufficiency_threshold,
            unsure_below=agent.escalation_confidence,
        )

    async def _decide(self, state: OrchestraState, turn: int) -> tuple[TrajectoryStep, PolicyReply]:
        """The policy's reply to ``state`` as it renders it, timed and accounted, and the turn's step
        that records it."""
        policy = self.policy
        tr = time.perf_counter()
        messages = policy.render(state, self.agent)
        tp = time.perf_counter()
        self.render_s += tp - tr
        reply: PolicyReply = (
            await asyncio.to_thread(policy.respond, state, messages)
            if policy.blocking
            else policy.respond(state, messages)
        )
        took = time.perf_counter() - tp
        self.policy_s += took
        usage = self.ledger.record_policy(policy.name, reply.input_tokens, reply.output_tokens, took)
        step = TrajectoryStep(
            index=turn,
            state_messages=messages,
            state=state.model_dump(mode="json"),
            raw_output=reply.raw_output,
            latency_s=took,
            start_s=tp - self.t0,
            policy_s=took,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            cost=usage.cost,
        )
        self.steps.append(step)
        return step, reply

    def _finish(self, action: Finish, step: TrajectoryStep, turn: int) -> bool:
        """The run's answer is ``action``'s, its references substituted; False (the run goes on) when
        one names no evidence."""
        try:
            self.answer = substitute(action.answer, self.store.values())
        except ReferenceError_ as e:
            _invalid(step, self.history, turn, f"answer: {e}")
            return False
        return True

    async def _delegate(self, action: Delegate | MaestroSearch, step: TrajectoryStep, turn: int) -> None:
        """Run the batch ``action`` delegates (a Maestro search: a one-node delegate) as a DAG under the
        limits, and record its evidence."""
        if isinstance(action, MaestroSearch):
            mods = [r.key for r in find_refs(action.query) if r.kind == "M"]
            action = search_to_delegate(action, self.store.next_id(), mods)
        assert isinstance(action, Delegate)
        try:
            graph = TaskGraph(action.subtasks, external=self.store.ids())
        except GraphError as e:  # pragma: no cover - validate_decision checked the graph
            _invalid(step, self.history, turn, str(e))
            return
        offset = time.perf_counter() - self.t0
        evidence = await run_graph(
            graph,
            self.runner,
            self.limits,
            prior={e.id: e for e in self.store},
            modal_values=self.runner.modal_values(),
            est_cost=lambda st: _est_cost(self.env.backends, st.backend),
            turn=turn,
        )
        self._record(_shift(evidence, offset), graph, step, offset)

    def _record(
        self, evidence: list[Evidence], graph: TaskGraph, step: TrajectoryStep, offset: float
    ) -> None:
        """A batch's ``evidence`` (times since the run began; the batch started at ``offset``) joins
        the store, the history and the accounting, and ``step`` (its results, its latency)."""
        self.store.extend(evidence)
        self.score = sufficiency(self.task.question, self.store.items())
        self.ledger.record_evidence(evidence)
        self.history.extend(history_from_evidence(evidence))
        self.critical += graph.critical_path({e.id: e.latency_s for e in evidence})[0]
        step.results = [e.model_dump(mode="json") for e in evidence]
        step.latency_s = step.latency_s + max((e.end_s or offset for e in evidence), default=offset) - offset

    def sufficient(self) -> bool:
        """Whether the evidence suffices and holds an answer (:func:`sufficient_answer`): then it is
        the run's answer and the run stops by sufficiency."""
        if self.score >= self.agent.sufficiency_threshold:
            answer = sufficient_answer(self.store)
            if answer is not None:
                self.answer, self.stopped_by = answer, "sufficiency"
                return True
        return False

    def trajectory(self) -> Trajectory:
        """The run as recorded: its steps, answer, totals and accounting."""
        latency = time.perf_counter() - self.t0
        total = self.ledger.total()
        return Trajectory(
            task_id=str(self.task.id),
            system=self.system,
            policy=self.policy.name,
            steps=self.steps,
            answer=self.answer,
            tokens=total.tokens,
            cost=total.cost,
            latency_s=latency,
            started_at=self.started_at,
            error=self.error,
            accounting={
                **self.ledger.summary(),
                "policy_s": self.policy_s,
                "render_s": self.render_s,
                "critical_path_s": self.critical,
                "sufficiency": self.score,
                "stopped_by": self.stopped_by,
                "subtasks": len(self.store),
            },
        )


def _check_pairing(system: System, policy: Policy) -> None:
    """``system`` is one of SYSTEMS and reads the decisions ``policy`` writes."""
    if system not in SYSTEMS:
        raise OrchestraError(f"unknown system {system!r}; valid: {', '.join(SYSTEMS)}")
    if (policy.fmt == "maestro") != (system_format(system) == "maestro"):  # json and lines: one action set
        raise OrchestraError(
            f"system {system!r} reads {system_format(system)} decisions; "
            f"policy {policy.name!r} writes {policy.fmt}"
        )


async def run_task(
    task: Task, system: System, policy: Policy, env: Environment, start: OrchestraState | None = None
) -> Trajectory:
    """Run ``task`` with ``system`` driven by ``policy``; the trajectory records every decision with
    the exact rendered state before it, each sub-task's evidence with start/end seconds since the run
    began, and accounting per policy, backend and tool.

    ``orchestra``: each delegated batch is a DAG run in parallel under ``agent.max_parallel``.
    ``linear``: the same, one sub-task at a time. ``react``: one agent with every tool executes each
    sub-task itself (no backend choice, no parallelism). ``maestro``: decisions are
    ``<search> Model@@Skill: Query </search>`` actions, each run as a one-node delegate.
    With the ReAct baseline the policy's sub-tasks are actions of the single agent; for a ReAct
    baseline driven by a language model that calls the tools itself, use :func:`run_react_lm`.
    ``start``: a state of an earlier run of ``task`` to go on from (its evidence, history and turn;
    the trajectory then holds the turns from there, and the accounting only theirs).
    """
    _check_pairing(system, policy)
    run = _TaskRun(task, system, policy, env, start)
    for turn in range(start.turn if start is not None else 0, env.max_turns):
        if await run.turn(turn):
            break
    else:
        if not run.sufficient():
            run.stopped_by, run.error = "max_turns", f"no finish within {env.max_turns} turns"
    return run.trajectory()


async def run_react_lm(task: Task, backend: Backend, env: Environment, name: str = "lm") -> Trajectory:
    """The ReAct baseline with a language model: one ``backend`` (e.g. :class:`OpenAIBackend`) gets the
    whole question, every modal input and every tool, and calls tools itself for up to
    ``agent.subagent_max_steps * max_turns`` model calls; no delegation, no orchestrator."""
    from orchestra.agent.refs import modal_key
    from orchestra.backends.base import SubTaskInput
    from orchestra.schemas import SubTask

    mods = {modal_key(i): m.model_copy(deep=True) for i, m in enumerate(task.omni_modal_input)}
    goal = task.question + "".join(f" #{k}" for k in mods)
    node = SubTask(id="E1", goal=goal, modalities=list(mods), tools=env.tools.names(), backend=backend.name)
    sti = SubTaskInput(
        question=task.question,
        subtask=node,
        modal_inputs=mods,
        media_root=None if env.media_root is None else str(Path(env.media_root).resolve()),
        max_steps=env.agent.subagent_max_steps * env.max_turns,
        seed=env.seed,
    )
    t0, started_at = time.perf_counter(), time.time()
    res = await backend.run(sti, list(env.tools))
    latency = time.perf_counter() - t0
    ev = Evidence(
        id="E1",
        goal=goal,
        status="ok" if res.ok else "failed",
        value=res.value,
        claim=res.claim,
        sources=res.sources,
        tool_calls=res.tool_calls,
        backend=backend.name,
        tools=node.tools,
        input_tokens=res.input_tokens,
        output_tokens=res.output_tokens,
        cost=res.cost,
        start_s=0.0,
        end_s=latency,
        attempts=1,
        error=res.error,
    )
    ledger = Ledger(env.agent.tool_prices, env.agent.policy_price)
    ledger.record_evidence([ev])
    step = TrajectoryStep(
        index=0,
        state_messages=[{"role": "user", "content": goal}],
        results=[ev.model_dump(mode="json")],
        latency_s=latency,
        start_s=0.0,
        error=res.error,
    )
    total = ledger.total()
    answer = None
    if res.ok:
        answer = format_value(res.value)
    return Trajectory(
        task_id=str(task.id),
        system="react",
        policy=name,
        steps=[step],
        answer=answer,
        tokens=total.tokens,
        cost=total.cost,
        latency_s=latency,
        started_at=started_at,
        error=res.error,
        accounting={**ledger.summary(), "policy_s": 0.0},
    )


def run_task_sync(
    task: Task, system: System, policy: Policy, env: Environment, start: OrchestraState | None = None
) -> Trajectory:
    """:func:`run_task` from synchronous code."""
    return asyncio.run(run_task(task, system, policy, env, start))


def evidence_of(trajectory: Trajectory) -> list[Evidence]:
    """Every sub-task evidence recorded in a trajectory, in run order."""
    return [Evidence.model_validate(r) for s in trajectory.steps for r in s.results]
