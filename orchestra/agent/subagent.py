"""The sub-agent runner: gives one sub-task a backend, a tool subset and a private copy of its inputs."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestra.agent.refs import ReferenceError_, find_refs, modal_key, substitute
from orchestra.agent.scheduler import NodeInputs
from orchestra.backends.base import Backend, BackendError, BackendRegistry, SubResult, SubTaskInput
from orchestra.backends.goals import AUDIO_TOOLS, EXTRACT_TOOL, skill_tools, tool_skill_profiles
from orchestra.backends.selection import infer_demand, score_terms, select_tools, tool_profiles
from orchestra.config import AgentParams
from orchestra.schemas import ModalInput, SubTask
from orchestra.tools.base import Tool, ToolRegistry

__all__ = ["SubAgent"]

_COMPUTE = re.compile(r"\s*compute\s", re.IGNORECASE)


class SubAgent:
    """The scheduler's runner (``await sub_agent(subtask, inputs) -> SubResult``) for one task run.

    Per call it picks the backend (the sub-task's, else the cost-aware match of the goal's demand
    against the pool), the tools (the sub-task's, else a sparse cover of the demand), restricts the
    modal inputs to the sub-task's mask (or the ``#M<n>`` its goal names), and hands the backend a
    fresh :class:`SubTaskInput` — a deep copy, so sub-agents running in parallel share nothing
    mutable. ``force_backend`` makes every sub-task run on one backend (the ReAct baseline).
    A sub-task fails by an ``ok=False`` result or an OrchestraError (an unknown backend or tool name,
    a backend's LMError), which the scheduler records; anything else raised is a bug and propagates.
    """

    def __init__(
        self,
        backends: BackendRegistry,
        tools: ToolRegistry,
        agent: AgentParams,
        question: str,
        modal_inputs: Sequence[ModalInput],
        media_root: Path | None,
        *,
        seed: int = 0,
        force_backend: Backend | None = None,
    ) -> None:
        self.backends, self.tools, self.agent = backends, tools, agent
        self.question = question
        self.modal_inputs = {modal_key(i): m for i, m in enumerate(modal_inputs)}
        self.media_root = None if media_root is None else str(Path(media_root).resolve())
        self.seed = seed
        self.force_backend = force_backend
        self.profiles = tool_profiles(tools, {**tool_skill_profiles(), **agent.tool_skills})
        self.skill_tools = skill_tools()

    def modal_values(self) -> dict[str, str]:
        """What ``#M<n>`` substitutes to in goals: itself, so experts resolve it against their inputs."""
        return {k: f"#{k}" for k in self.modal_inputs}

    def mask(self, subtask: SubTask, raw_goal: str) -> dict[str, ModalInput]:
        keys = list(subtask.modalities) or [r.key for r in find_refs(raw_goal) if r.kind == "M"]
        return {k: self.modal_inputs[k].model_copy(deep=True) for k in keys if k in self.modal_inputs}

    def backend_for(self, subtask: SubTask, mask: dict[str, ModalInput]) -> tuple[Backend, dict[str, Any]]:
        """The backend for a node and why: ``{"by": "policy" | "selection" | "react", "demand",
        "ranking": the top score terms}`` (the ranking is computed for a policy's choice too, so the
        trajectory shows what cost-aware selection would have said)."""
        if self.force_backend is not None:
            return self.force_backend, {"by": "react"}
        demand = infer_demand(subtask.goal, [m.type for m in mask.values()], subtask.skill)
        pool = list(self.backends)
        if subtask.skill is not None:
            pool = [b for b in pool if b.skills.get(subtask.skill, 0.0) > 0] or pool
        terms = score_terms(demand, pool, self.agent.cost_weight, self.agent.latency_weight)
        why: dict[str, Any] = {
            "by": "policy" if subtask.backend is not None else "selection",
            "demand": demand,
            "ranking": [
                {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in terms[:3]
            ],
        }
        name = subtask.backend if subtask.backend is not None else str(terms[0]["backend"])
        return self.backends.get(name), why

    def tools_for(self, subtask: SubTask, mask: dict[str, ModalInput]) -> list[Tool]:
        if self.force_backend is not None and not subtask.tools:
            return list(self.tools)
        names = list(subtask.tools)
        if not names and subtask.skill is not None:  # Maestro: the skill's Level-2 sub-routines
            names = [t for t in self.skill_tools.get(subtask.skill, []) if t in self.tools]
            video = any(m.type == "video" for m in mask.values())
            if video and AUDIO_TOOLS & set(names) and EXTRACT_TOOL in self.tools:
                names.insert(0, EXTRACT_TOOL)  # audio from a video: its sound track, extracted first
        if not names:
            demand = infer_demand(subtask.goal, [m.type for m in mask.values()], subtask.skill)
            names = select_tools(demand, self.profiles, self.agent.max_tools, self.agent.redundancy_penalty)
        return [self.tools.get(n) for n in names]

    async def __call__(self, subtask: SubTask, inputs: NodeInputs) -> SubResult:
        goal = subtask.goal
        if _COMPUTE.match(inputs.raw_goal):  # expressions need code literals ('abc' quoted, lists as lists)
            try:
                goal = substitute(inputs.raw_goal, {**self.modal_values(), **inputs.values}, code=True)
            except ReferenceError_ as e:
                return SubResult(ok=False, error=f"cannot resolve goal: {e}")
        mask = self.mask(subtask, inputs.raw_goal)
        try:
            backend, why = self.backend_for(subtask, mask)
        except BackendError as e:
            return SubResult(ok=False, error=str(e))
        node = subtask.model_copy(update={"goal": goal, "backend": backend.name}, deep=True)
        task = SubTaskInput(
            question=self.question,
            subtask=node,
            modal_inputs=mask,
            media_root=self.media_root,
            dependencies=copy.deepcopy(inputs.dependencies),
            max_steps=self.agent.subagent_max_steps,
            seed=self.seed,
        )
        result = await backend.run(task, self.tools_for(subtask, mask))
        return result.model_copy(update={"backend": result.backend or backend.name, "routing": why})
