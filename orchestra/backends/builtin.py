"""Builtin experts: deterministic sub-agents that run real tool programs for goals in the builtin grammar.

The goal grammar is documented in :mod:`orchestra.backends.goals`. An expert parses the goal,
checks it has the skill the goal needs (its skill vector, from ``params.agent.backends``) and was
given the tool, then runs a short ReAct-style loop of tool calls (at most ``max_steps``): call the
tool in a worker thread, read the value from the observation's structured ``data``, and either
finish or take one more step (widen a search). No language model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestra.backends.base import Backend, SubResult, SubTaskInput, ToolCall
from orchestra.backends.goals import (
    EXTRACT_TOOL,
    Goal,
    GoalError,
    goal_by_routine,
    literal,
    match_field,
    parse_goal,
    skill_registry,
)
from orchestra.config import BackendSpec, LatencySpec, PriceSpec
from orchestra.errors import RecordError
from orchestra.io import media_file
from orchestra.text import count_tokens, format_value
from orchestra.tools.base import Observation, Tool

__all__ = ["BuiltinExpert", "ToolBox", "builtin_factory"]


class ToolBox:
    """One sub-agent's private tool access: the tools it was given, a step budget and its call log.

    ``call`` runs the blocking tool in a worker thread (so sub-agents of one batch overlap) and
    records a :class:`ToolCall`. A tool's failure (and a bad argument) comes back as an error
    observation; what a tool raises is a bug and propagates (see :class:`~orchestra.tools.base.Tool`).
    A tool it was not given, or a used-up step budget, raises GoalError. A path argument under
    ``media_root`` is recorded relative to it, as the task names its media: a record of the call
    holds no checkout folder."""

    def __init__(self, tools: Sequence[Tool], max_steps: int, media_root: str | None = None) -> None:
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.max_steps = max_steps
        self.media_root = media_root
        self.calls: list[ToolCall] = []
        self.observations: list[Observation] = []

    @property
    def steps_left(self) -> int:
        return self.max_steps - len(self.calls)

    async def call(self, name: str, args: Mapping[str, Any]) -> Observation:
        if name not in self.tools:
            given = ", ".join(sorted(self.tools)) or "none"
            raise GoalError(f"this sub-task needs tool {name!r}, which it was not given (given: {given})")
        if self.steps_left <= 0:
            raise GoalError(f"step budget of {self.max_steps} tool calls used up")
        tool = self.tools[name]
        obs = await asyncio.to_thread(tool, **dict(args))
        self.calls.append(ToolCall.from_observation(self._recorded(args), obs))
        self.observations.append(obs)
        return obs

    def _recorded(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if not self.media_root:
            return dict(args)
        root = Path(self.media_root)
        out = dict(args)
        for key, value in args.items():
            if isinstance(value, str) and Path(value).is_absolute() and Path(value).is_relative_to(root):
                out[key] = Path(value).relative_to(root).as_posix()
        return out


def _fail(obs: Observation) -> GoalError:
    return GoalError(f"{obs.tool} failed: {obs.error or obs.text[:200]}")


class BuiltinExpert(Backend):
    """An expert that executes builtin-grammar goals with real tools (see module docstring).

    ``mode`` is the perception tool variant it runs (``fast`` | ``careful``; None: the tools'
    default) — experts of one skill differ in real accuracy, latency and price. A perception result
    carries the tool's confidence (``data["confidence"]``), so the orchestrator can escalate."""

    kind = "builtin"

    def __init__(
        self,
        name: str,
        skills: Mapping[str, float],
        cost: PriceSpec | None = None,
        latency: LatencySpec | None = None,
        description: str = "",
        mode: str | None = None,
        routines: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    ) -> None:
        super().__init__(name, skills, cost, latency, description)
        self.mode = mode
        self.routines = {k: dict(v) for k, v in (routines or {}).items()}

    def _goal(self, task: SubTaskInput) -> Goal:
        """The goal in the builtin grammar; for a Maestro query outside it (a skill named), the
        skill's Level-2 routine picked by its registry keywords."""
        try:
            return parse_goal(task.subtask.goal)
        except GoalError:
            asked = task.subtask.skill
            if asked is None or not self.routines.get(asked):
                raise
            return goal_by_routine(task.subtask.goal, asked, self.routines[asked])

    async def run(self, task: SubTaskInput, tools: Sequence[Tool]) -> SubResult:
        t0 = time.perf_counter()
        box = ToolBox(tools, task.max_steps, task.media_root)
        try:
            goal = self._goal(task)
            asked = task.subtask.skill
            if asked is not None and asked != goal.skill:  # Maestro: Level-2 routines live inside a skill
                routines = ", ".join(skill_registry().get(asked, [])) or "none"
                raise GoalError(
                    f"skill {asked!r} has no sub-routine for this query (its sub-routines: {routines})"
                )
            if self.skills.get(goal.skill, 0.0) <= 0.0:
                have = ", ".join(self.skill_names())
                raise GoalError(f"backend {self.name} has no {goal.skill!r} skill (it has: {have})")
            value, claim, sources = await self._solve(goal, task, box)
        except GoalError as e:
            return self._result(task, box, ok=False, error=str(e), started=t0)
        conf = None
        if goal.perception is not None:  # a perception: the confidence of the value, from the same data
            conf = goal.perception.confidence(box.observations[-1].data, goal.meta.get("args", {}))
        return self._result(
            task,
            box,
            value=value,
            claim=claim,
            sources=sources,
            started=t0,
            confidence=None if conf is None else float(conf),
        )

    def _result(
        self,
        task: SubTaskInput,
        box: ToolBox,
        *,
        ok: bool = True,
        value: Any = None,
        claim: str = "",
        sources: list[str] | None = None,
        error: str | None = None,
        started: float = 0.0,
        confidence: float | None = None,
    ) -> SubResult:
        tin = count_tokens(task.subtask.goal) + sum(count_tokens(o.text) for o in box.observations)
        tout = count_tokens(claim or error or "")
        return SubResult(
            ok=ok,
            value=value,
            claim=claim,
            sources=sources or [],
            tool_calls=list(box.calls),
            backend=self.name,
            input_tokens=tin,
            output_tokens=tout,
            cost=self.cost.price(tin, tout),
            error=error,
            confidence=confidence,
        )

    async def _solve(self, goal: Goal, task: SubTaskInput, box: ToolBox) -> tuple[Any, str, list[str]]:
        if goal.kind == "perceive":
            return await self._perceive(goal, task, box)
        if goal.kind == "search":
            return await self._search(goal, box)
        if goal.kind == "browse":
            return await self._browse(goal, box)
        return await self._compute(goal, box)

    async def _perceive(self, goal: Goal, task: SubTaskInput, box: ToolBox) -> tuple[Any, str, list[str]]:
        spec = goal.perception
        assert spec is not None and goal.modal is not None
        modal = task.modal_inputs.get(goal.modal)
        if modal is None:
            allowed = ", ".join(sorted(task.modal_inputs)) or "none"
            raise GoalError(f"#{goal.modal} is not among the modal inputs this sub-task may read ({allowed})")
        muxed = spec.modality == "audio" and modal.type == "video"  # the video's sound track
        if modal.type != spec.modality and not muxed:
            raise GoalError(f"{spec.name} reads {spec.modality}, but #{goal.modal} is {modal.type}")
        try:  # inside the media folder, whatever the task file says (orchestra.io.media_file)
            path = media_file(Path(task.media_root), modal.path) if task.media_root else Path(modal.path)
        except RecordError as e:
            raise GoalError(f"#{goal.modal}: {e}") from e
        if muxed:
            obs = await box.call(EXTRACT_TOOL, {"path": str(path)})
            if not obs.ok:
                raise _fail(obs)
            path = Path(obs.data["out_path"])
        args: dict[str, Any] = {"path": str(path), **goal.args}
        tool = box.tools.get(spec.tool)
        if self.mode is not None and tool is not None and "mode" in tool.input_schema.get("properties", {}):
            args["mode"] = self.mode
        obs = await box.call(spec.tool, args)
        if not obs.ok:
            raise _fail(obs)
        value = spec.extract(obs.data, goal.meta.get("args", {}))
        return (
            value,
            f"{spec.render(goal.meta.get('args', {}))} in #{goal.modal}: {format_value(value)}",
            [f"{modal.type}:{modal.id}"],
        )

    async def _search(self, goal: Goal, box: ToolBox) -> tuple[Any, str, list[str]]:
        title = goal.meta["title"]
        for k in (5, 20):
            obs = await box.call("web_search", {"query": title, "k": k})
            if not obs.ok:
                raise _fail(obs)
            for hit in obs.data.get("results", []):
                if str(hit.get("title", "")).strip().lower() == title.strip().lower():
                    url = str(hit["url"])
                    return url, f"the page titled {hit['title']!r} is {url}", [url]
            if len(obs.data.get("results", [])) < k or box.steps_left <= 0:
                break
        raise GoalError(f"no search result is titled exactly {title!r}")

    async def _browse(self, goal: Goal, box: ToolBox) -> tuple[Any, str, list[str]]:
        url, key = goal.args["url"], goal.meta["field"]
        obs = await box.call("page_browser", {"url": url})
        if not obs.ok:
            raise _fail(obs)
        label, raw = match_field(obs.data["facts"], key)  # the whole page's facts, in every window
        value = literal(raw)
        return value, f"{url} lists {label}: {raw}", [url]

    async def _compute(self, goal: Goal, box: ToolBox) -> tuple[Any, str, list[str]]:
        obs = await box.call("code_executor", {"code": goal.args["code"]})
        if not obs.ok:
            raise _fail(obs)
        if obs.data.get("value") is None:
            raise GoalError("the expression produced no value")
        value = literal(obs.data["value"])
        return value, f"{goal.meta['expression']} = {format_value(value)}", []


def builtin_factory(
    name: str, spec: BackendSpec, routines: Mapping[str, Mapping[str, Sequence[str]]] | None = None
) -> BuiltinExpert:
    """The ``builtin`` kind's factory for :func:`orchestra.backends.base.registry_from_params`
    (``routines``: the registry's Level-2 routine keywords by skill; bind them with a partial)."""
    return BuiltinExpert(name, spec.skills, spec.price, spec.latency, spec.description, spec.mode, routines)
