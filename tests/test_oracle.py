"""The oracle policy on world seed tasks: gold answers from real tool runs, reading no values or answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestra.agent.policies import OraclePolicy, oracle_for
from orchestra.agent.runtime import Environment
from orchestra.agent.state import OrchestraState
from orchestra.agent.systems import evidence_of, run_task_sync
from orchestra.backends.goals import PERCEPTIONS
from orchestra.config import AgentParams
from orchestra.schemas import Delegate, Finish, PerceiveStep, Task, read_tasks_json
from orchestra.tools.registry import default_registry

PERCEPTIONS_BY_TOOL = {s.tool: s.modality for s in PERCEPTIONS.values()}


@pytest.fixture(scope="module")
def env(world_env: Environment) -> Environment:
    return world_env


@pytest.fixture(scope="module")
def tasks(small_world: Path) -> list[Task]:
    return read_tasks_json(small_world / "tasks.json")


def test_every_world_perception_has_a_builtin_expert(tasks: list[Task]) -> None:
    from orchestra.world.perception import PERCEPTIONS as WORLD

    missing = sorted(set(WORLD) - set(PERCEPTIONS))
    assert missing == [], f"world perceptions without a builtin expert: {missing}"
    tool_names = set(default_registry(None).names())
    assert {s.tool for s in PERCEPTIONS.values()} <= tool_names


def _oracle_accuracy(tasks: list[Task], env: Environment) -> float:
    """The oracle's share of gold answers; asserts that every miss is a tool miss (a perception read
    differently from the truth)."""
    correct, misses = 0, []
    for task in tasks:
        traj = run_task_sync(task, "orchestra", oracle_for(task, "orchestra", env.agent), env)
        if traj.answer == task.answer:
            correct += 1
            continue
        recorded = {s.out: s.value for s in task.solution_program or []}
        first = [s for s in task.solution_program or []]
        ev = evidence_of(traj)[: len(first)]
        wrong = [
            (s.perception, e.value if e.ok else e.error)
            for s, e in zip(first, ev, strict=False)
            if isinstance(s, PerceiveStep) and (not e.ok or e.value != recorded[s.out])
        ]
        misses.append((task.id, task.answer, traj.answer, wrong))
        assert wrong, f"task {task.id}: wrong answer {traj.answer!r} but every perception was right"
    return correct / len(tasks)


def test_oracle_answers_world_seed_tasks(tasks: list[Task], env: Environment) -> None:
    """>= 95 % gold answers; every miss is a tool miss."""
    assert _oracle_accuracy(tasks, env) >= 0.95


def test_oracle_answers_muxed_video_tasks(small_muxed_world: Path) -> None:
    """``video_audio_track: muxed``: the "video w/ audio" tasks (one MP4 each; the world's other tasks
    are the same files as above) answered as well, the audio step extracting the video's sound track
    before the audio tool."""
    from orchestra.backends.pool import builtin_backends

    tasks = [t for t in read_tasks_json(small_muxed_world / "tasks.json") if t.task_type == "video w/ audio"]
    assert len(tasks) >= 5 and all(len(t.omni_modal_input) == 1 for t in tasks)
    agent = AgentParams()
    tools = default_registry(small_muxed_world)
    env = Environment(tools, builtin_backends(agent), agent, small_muxed_world / "media")
    try:
        state = OrchestraState(
            question=tasks[0].question, modal_inputs=tasks[0].omni_modal_input, backends=env.backends.cards()
        )
        d = OraclePolicy(tasks[0], agent).decide(state)
        assert isinstance(d, Delegate)
        audio = [st.tools for st in d.subtasks if st.tools[0] == "video_extract_audio"]
        assert len(audio) == 1 and PERCEPTIONS_BY_TOOL[audio[0][1]] == "audio"
        assert _oracle_accuracy(tasks, env) >= 0.95
    finally:
        tools.close()


def test_oracle_reads_no_values_or_answers(tasks: list[Task], env: Environment) -> None:
    """Blanking every recorded value and the gold answer changes nothing: values come from tool runs."""
    task = next(t for t in tasks if len(t.solution_program or []) >= 5)
    blind = task.model_copy(
        update={
            "answer": "?",
            "solution_program": [s.model_copy(update={"value": None}) for s in task.solution_program or []],
        }
    )
    a = run_task_sync(task, "orchestra", oracle_for(task, "orchestra", env.agent), env)
    b = run_task_sync(blind, "orchestra", oracle_for(blind, "orchestra", env.agent), env)
    assert a.answer == b.answer == task.answer
    assert [s.raw_output for s in a.steps] == [s.raw_output for s in b.steps]


def test_oracle_decision_structure(tasks: list[Task], env: Environment) -> None:
    task = next(
        t for t in tasks if len(t.solution_program or []) == 5
    )  # perceive, search, browse, perceive, compute
    state = OrchestraState(
        question=task.question, modal_inputs=task.omni_modal_input, backends=env.backends.cards()
    )
    d = OraclePolicy(task, env.agent, mode="dag").decide(state)
    assert isinstance(d, Delegate)
    by_id = {st.id: st for st in d.subtasks}
    assert [st.depends_on for st in d.subtasks] == [[], ["E1"], ["E2"], [], ["E3", "E4"]]
    assert by_id["E2"].goal.endswith('"#E1"') and by_id["E3"].goal.startswith("browse #E2 ")
    assert by_id["E5"].goal.startswith("compute ") and by_id["E5"].tools == ["code_executor"]
    assert by_id["E1"].modalities and by_id["E1"].modalities[0].startswith("M")
    assert by_id["E2"].backend == "web_expert" and by_id["E5"].backend == "code_expert"
    waves = OraclePolicy(task, env.agent, mode="waves").decide(state)
    assert isinstance(waves, Delegate) and [st.id for st in waves.subtasks] == ["E1", "E2"]
    assert [st.goal for st in waves.subtasks] == [by_id["E1"].goal, by_id["E4"].goal]


def test_oracle_redelegates_a_failed_step_then_gives_up(tasks: list[Task], env: Environment) -> None:
    """With the only able backend failing every time, the oracle retries once, then finishes 'unknown'."""
    from orchestra.backends.base import BackendRegistry
    from orchestra.backends.builtin import BuiltinExpert

    task = next(t for t in tasks if t.solution_program and len(t.solution_program) == 3)
    agent = AgentParams(max_retries=0)
    broken = BackendRegistry([BuiltinExpert(n, b.skills) for n, b in ((b.name, b) for b in env.backends)])
    e2 = Environment(tools=env.tools, backends=broken, agent=agent, media_root=Path("/nonexistent"))
    traj = run_task_sync(task, "orchestra", OraclePolicy(task, agent), e2)
    assert traj.answer == "unknown"
    assert isinstance(traj.steps[-1].decision, Finish) and len(traj.steps) == 3
    assert all(e.status != "ok" for e in evidence_of(traj) if e.id in ("E1", "E4"))
