"""Facts re-checked by the real tools: a program step handed to the expert pool as one sub-task, kept
only when an expert returns its value, sure (the anchors of anchor_facts, its material, and what the
openai extractor says the media show)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from orchestra.agent.expert import ExpertError, StepGoal, step_backend, step_goal, stronger_backend
from orchestra.agent.refs import modal_key
from orchestra.agent.steps import same_value, step_input
from orchestra.backends.base import BackendRegistry
from orchestra.backends.perceptions import PERCEPTIONS
from orchestra.config import AgentParams
from orchestra.schemas import (
    AnchorFact,
    BrowseStep,
    ComputeStep,
    PerceiveStep,
    SearchStep,
    SolutionStep,
    SubTask,
    SubtaskStep,
    Task,
)
from orchestra.text import format_value
from orchestra.tools.base import ToolRegistry

__all__ = ["Checker", "fact_of", "lone_node", "step_inputs"]


def fact_of(task: Task, step: SolutionStep, expert: str) -> AnchorFact:
    """The fact a program step states, recovered by ``expert``."""
    tid = str(task.id)
    value = format_value(step.value)
    base = {"task_id": tid, "fact_id": f"{tid}:{step.out}", "step": step.out, "value": step.value}
    if isinstance(step, PerceiveStep):
        mod = next(m for m in task.omni_modal_input if m.id == step.input_id)
        goal = PERCEPTIONS[step.perception].render(step.args)
        return AnchorFact(
            **base,
            kind="perception",
            modality=mod.type,  # type: ignore[arg-type]
            text=f"{goal} in the {mod.type} {mod.id}: {value}",
            source=mod.id,
            perception=step.perception,
            args=dict(step.args),
            checked_by=expert,
        )
    if isinstance(step, SearchStep | BrowseStep):
        what = f"the page titled as {step.query!r} is" if isinstance(step, SearchStep) else f"{step.field} ="
        return AnchorFact(
            **base,
            kind="kb",
            modality="web",
            text=f"{what} {value}",
            source=step.value if isinstance(step, SearchStep) else step.url,
            field=step.field if isinstance(step, BrowseStep) else None,
            checked_by=expert,
        )
    if isinstance(step, SubtaskStep):
        return _subtask_fact(task, step, base, value, expert)
    assert isinstance(step, ComputeStep)
    return AnchorFact(
        **base, kind="compute", modality="compute", text=f"{step.expression} = {value}", checked_by=expert
    )


def _subtask_fact(task: Task, step: SubtaskStep, base: dict[str, Any], value: str, expert: str) -> AnchorFact:
    """A model backend's sub-task as a fact: a perception when it reads a modal input (the first it
    names), a knowledge lookup for the search and browse skills, a computation otherwise."""
    keys = {modal_key(i): m for i, m in enumerate(task.omni_modal_input)}
    mod = next((keys[k] for k in re.findall(r"#(M[1-9][0-9]*)\b", step.goal) if k in keys), None)
    text = f"{step.goal}: {value}"
    if mod is not None:
        return AnchorFact(
            **base,
            kind="perception",
            modality=mod.type,  # type: ignore[arg-type]
            text=text,
            source=mod.id,
            goal=step.goal,
            skill=step.skill,
            checked_by=expert,
        )
    kb = step.skill in ("search", "browse")
    return AnchorFact(
        **base,
        kind="kb" if kb else "compute",
        modality="web" if kb else "compute",
        text=text,
        checked_by=expert,
    )


class Checker:
    """Runs one step as a sub-task on the expert the expert policy would pick, then, while the
    result is unsure or wrong, on the stronger experts its escalation rule names (the last expert's
    answer counts whatever its confidence): the same tool calls trajectories make, so the perception
    cache serves them later."""

    def __init__(self, backends: BackendRegistry, tools: ToolRegistry, media_root: Path, agent: AgentParams):
        self.backends, self.tools, self.media_root, self.agent = backends, tools, media_root, agent
        self.cards = backends.cards()
        self.calls: dict[str, int] = {}

    async def check(
        self, task: Task, kind: StepGoal, node: SubTask, values: dict[str, Any], expected: Any
    ) -> tuple[str | None, str]:
        """(the expert that recovered the value, or None; the reason when none did)."""
        name, _, reason = await self._escalate(task, kind, node, values, expected, check=True)
        return name, reason

    async def read(
        self, task: Task, kind: StepGoal, node: SubTask, values: dict[str, Any]
    ) -> tuple[str | None, Any, str]:
        """(the expert whose result stands, its value; the reason when none returned one): a new step
        run the way a recorded one is checked, the first sure result (or the strongest's) standing."""
        return await self._escalate(task, kind, node, values, None, check=False)

    async def _escalate(
        self, task: Task, kind: StepGoal, node: SubTask, values: dict[str, Any], expected: Any, check: bool
    ) -> tuple[str | None, Any, str]:
        try:
            name: str | None = step_backend(kind, self.cards, self.agent, node.id)
        except ExpertError as e:
            return None, None, str(e)
        tried: set[str] = set()
        reason = ""
        while name is not None:
            tried.add(name)
            backend = self.backends.get(name)
            sti = step_input(task, node, values, name, self.media_root, self.agent)
            self.calls[name] = self.calls.get(name, 0) + 1
            res = await backend.run(sti, [self.tools.get(n) for n in sti.subtask.tools])
            after = stronger_backend(self.cards, kind.skill, tried)
            sure = res.confidence is None or res.confidence >= self.agent.escalation_confidence
            right = not check or same_value(res.value, expected, kind.skill == "code")
            if res.ok and right and (sure or after is None):
                return name, res.value, ""
            got = res.error if not res.ok else f"read {format_value(res.value)!r}"
            reason = f"{name} {got}" + (f" (recorded {format_value(expected)!r})" if check else " (unsure)")
            name = after
        return None, None, reason


def step_inputs(task: Task) -> dict[str, tuple[str, str]]:
    """Modal input id -> (its key 'M1', its type)."""
    return {m.id: (modal_key(i), m.type) for i, m in enumerate(task.omni_modal_input)}


def lone_node(task: Task, step: SolutionStep) -> tuple[StepGoal, SubTask, dict[str, Any]]:
    """A step that reads no other step's value as one sub-task, with the values its references take."""
    kind = step_goal(step, {}, step_inputs(task))
    node = SubTask(id="E1", goal=kind.goal, modalities=kind.modalities(), tools=list(kind.tools))
    return kind, node, {key: f"#{key}" for key, _ in step_inputs(task).values()}
