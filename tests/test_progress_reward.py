"""The progress reward on states the real runtime reaches for a small-world task with two branches
(caption -> search -> browse, beeps; then a compute): what it pays a right plan, a right part of it,
a plan with a wrong reading, a chained plan, a right and a wrong finish, a re-check, and what it
refuses (a finish naming a modal input, which the runtime cannot substitute)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_expert import _state_after, _without_tool

from orchestra.agent.decision import parse_decision, render_decision, validate_decision
from orchestra.agent.expert import expert_decision
from orchestra.agent.runtime import Environment
from orchestra.agent.state import OrchestraState, validation_context
from orchestra.schemas import Delegate, Finish, SubTask, Task, read_tasks_json
from orchestra.training.progress import progress_reward
from orchestra.training.rewards import REJECTED


@pytest.fixture(scope="module")
def task(small_world: Path) -> Task:
    return next(t for t in read_tasks_json(small_world / "tasks.json") if len(t.solution_program or []) == 5)


def _score(text: str | Delegate | Finish, state: OrchestraState, task: Task) -> float:
    out = text if isinstance(text, str) else render_decision(text, "json")
    return progress_reward(out, state, task.solution_program or [], task.answer, fmt="json")


def _fresh(task: Task, env: Environment) -> OrchestraState:
    """The state of the task's first decision, as the runtime renders it (its tool and backend cards)."""
    return _state_after(task, env, [])


def _dag(task: Task, env: Environment) -> Delegate:
    dag = expert_decision(_fresh(task, env), task.solution_program or [], agent=env.agent, escalate=False)
    assert isinstance(dag, Delegate) and len(dag.subtasks) == 5
    return dag


def _wrong_reading(dag: Delegate) -> Delegate:
    """The plan with its first reading (the caption) asking for the wrong thing."""
    first = dag.subtasks[0]
    wrong = first.model_copy(update={"goal": first.goal.replace("caption", "title", 1) + " again"})
    return Delegate(subtasks=[wrong, *dag.subtasks[1:]])


def test_a_plan_scores_by_the_steps_it_completes_and_pays_for_waste(
    task: Task, world_env: Environment
) -> None:
    dag = _dag(task, world_env)
    fresh = _fresh(task, world_env)
    full = _score(dag, fresh, task)
    first_wave = Delegate(subtasks=[dag.subtasks[0], dag.subtasks[3]])
    partial = _score(first_wave, fresh, task)
    wrong = _score(_wrong_reading(dag), fresh, task)
    assert full == 1.0 and partial == pytest.approx(2 / 5)
    assert wrong == pytest.approx(-3 / 5)  # the beeps right; the caption, the search, browse, compute not
    assert wrong < partial  # a wrong complete plan is below a right part of it
    beeps_first = dag.subtasks[3].model_copy(update={"depends_on": ["E1"]})  # waits for nothing it reads
    chained = Delegate(subtasks=[*dag.subtasks[:3], beeps_first, dag.subtasks[4]])
    assert _score(chained, fresh, task) == pytest.approx(4 / 5)
    duplicate = dag.subtasks[3].model_copy(update={"id": "E6"})
    assert _score(Delegate(subtasks=[*first_wave.subtasks, duplicate]), fresh, task) == pytest.approx(1 / 5)


def test_equal_decisions_tie_whatever_their_ids_or_wording_of_waste(
    task: Task, world_env: Environment
) -> None:
    dag = _dag(task, world_env)
    fresh = _fresh(task, world_env)
    renumbered = Delegate(
        subtasks=[
            SubTask(id="E9", goal=dag.subtasks[3].goal, tools=dag.subtasks[3].tools, modalities=["M2"]),
            dag.subtasks[0].model_copy(update={"id": "E7", "backend": None}),
        ]
    )
    assert validate_decision(renumbered, validation_context(fresh)) is None
    first_wave = Delegate(subtasks=[dag.subtasks[0], dag.subtasks[3]])
    assert _score(renumbered, fresh, task) == _score(first_wave, fresh, task)
    waste = [SubTask(id="E3", goal=g, tools=["code_executor"]) for g in ("compute 6 * 7", "compute 6 * 8")]
    one, other = (Delegate(subtasks=[*first_wave.subtasks, w]) for w in waste)
    assert _score(one, fresh, task) == _score(other, fresh, task) == pytest.approx(1 / 5)


def test_finishes_right_wrong_and_one_the_runtime_cannot_substitute(
    task: Task, world_env: Environment
) -> None:
    dag = _dag(task, world_env)
    done = _state_after(task, world_env, [dag])
    assert _score(Finish(answer="#E5"), done, task) == 1.0
    assert _score(Finish(answer="#E4"), done, task) == -1.0  # the task is lost
    again = Delegate(subtasks=[dag.subtasks[0].model_copy(update={"id": "E6"})])
    assert _score(again, done, task) == pytest.approx(-1 / 5)  # the answer is in: a wasted call
    # rejected by the runtime: the floor, below the wasted call (at 0 it paid more, and RL learnt to
    # write invalid text where it was unsure)
    assert _score(Finish(answer="#M1"), done, task) == REJECTED == -1.0
    assert validate_decision(Finish(answer="#M1"), validation_context(done)) is not None
    assert _score("not a decision", done, task) == REJECTED < _score(again, done, task)


def test_a_useful_recheck_scores_above_a_wrong_finish(task: Task, world_env: Environment) -> None:
    dag = _dag(task, world_env)
    failed = _state_after(
        task, world_env, [_without_tool(dag, "E4")]
    )  # the beeps failed, the compute skipped
    redo = expert_decision(failed, task.solution_program or [], agent=world_env.agent, escalate=False)
    assert isinstance(redo, Delegate) and len(redo.subtasks) == 2
    again = _score(redo, failed, task)
    assert again == 1.0
    assert _score(Delegate(subtasks=redo.subtasks[:1]), failed, task) == pytest.approx(1 / 2)
    assert _score(Finish(answer="#E3"), failed, task) == -1.0 < 0 < again
    assert not isinstance(parse_decision(render_decision(redo, "json"), fmt="json"), Exception)
