"""A solution program's steps as sub-tasks: the expert policy's goal, the input to a backend, a value check.

Calibration (:mod:`orchestra.evaluation.calibrate`) hands each step to every expert that has its skill;
the fact re-checks (:mod:`orchestra.data.recheck`) hand one step to the expert pool, escalating. Both
fill the step's references with the values the program recorded and compare what comes back with
:func:`same_value`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestra.agent.expert import program_inputs, step_goal
from orchestra.agent.refs import modal_key, substitute
from orchestra.backends.base import SubTaskInput
from orchestra.config import AgentParams
from orchestra.schemas import SubTask, Task

__all__ = ["same_value", "step_input", "step_subtasks"]


def step_subtasks(task: Task) -> list[tuple[str, SubTask, dict[str, Any], Any]]:
    """(skill, sub-task, values for its references, expected value) per program step: the goal the
    expert policy would write, its ``#E`` inputs to be filled with the world's recorded values."""
    program = task.solution_program or []
    inputs = {m.id: (modal_key(i), m.type) for i, m in enumerate(task.omni_modal_input)}
    ids = {s.out: f"E{k}" for k, s in enumerate(program, 1)}
    values: dict[str, Any] = {modal_key(i): f"#{modal_key(i)}" for i in range(len(task.omni_modal_input))}
    values.update({ids[s.out]: s.value for s in program})
    out = []
    for s in program:
        kind = step_goal(s, ids, inputs)
        node = SubTask(
            id=ids[s.out],
            goal=kind.goal,
            modalities=kind.modalities(),
            tools=list(kind.tools),
            depends_on=[ids[v] for v in program_inputs(s)],
        )
        out.append((kind.skill, node, values, s.value))
    return out


def same_value(got: Any, want: Any, compute: bool) -> bool:
    """A returned value equals the recorded one (computed numbers to a relative 1e-9)."""
    if compute and isinstance(got, int | float) and isinstance(want, int | float):
        return abs(float(got) - float(want)) <= 1e-9 * max(1.0, abs(float(want)))
    return str(got).strip().lower() == str(want).strip().lower()


def step_input(
    task: Task, node: SubTask, values: dict[str, Any], backend: str, media_root: Path, agent: AgentParams
) -> SubTaskInput:
    """The sub-task input handing ``node`` (references filled from ``values``) to ``backend``."""
    mods = {modal_key(i): m for i, m in enumerate(task.omni_modal_input)}
    goal = substitute(node.goal, values, code="code_executor" in node.tools)
    return SubTaskInput(
        question=task.question,
        subtask=node.model_copy(update={"goal": goal, "backend": backend}),
        modal_inputs={k: mods[k] for k in node.modalities if k in mods},
        media_root=str(media_root.resolve()),
        max_steps=agent.subagent_max_steps,
    )
