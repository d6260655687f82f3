"""The stateless expert on states other policies reached: scripted off-expert runs, then its label."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestra.agent.decision import Action, render_decision
from orchestra.agent.expert import ExpertError, expert_decision, progress
from orchestra.agent.policies import ScriptedPolicy, oracle_for
from orchestra.agent.runtime import Environment
from orchestra.agent.state import OrchestraState
from orchestra.agent.systems import run_task_sync
from orchestra.schemas import Delegate, Finish, MaestroSearch, SubTask, Task, read_tasks_json


@pytest.fixture(scope="module")
def task(small_world: Path) -> Task:
    """perceive (video caption) -> search -> browse, perceive (beeps), compute: two branches."""
    return next(t for t in read_tasks_json(small_world / "tasks.json") if len(t.solution_program or []) == 5)


def _fresh(task: Task, env: Environment) -> OrchestraState:
    return OrchestraState(
        question=task.question, modal_inputs=task.omni_modal_input, backends=env.backends.cards()
    )


def _renumber(d: Delegate, offset: int) -> Delegate:
    def n(i: str) -> str:
        return f"E{int(i[1:]) + offset}"

    subs = []
    for st in d.subtasks:
        goal = st.goal
        for dep in sorted(st.depends_on, key=lambda x: -int(x[1:])):
            goal = goal.replace(f"#{dep}", f"#{n(dep)}")
        subs.append(
            st.model_copy(update={"id": n(st.id), "goal": goal, "depends_on": [n(x) for x in st.depends_on]})
        )
    return Delegate(subtasks=subs)


def _without_tool(d: Delegate, node: str) -> Delegate:
    """The same DAG, but ``node`` gets a tool it cannot use: its own goal fails (a real failed attempt)."""
    return Delegate(
        subtasks=[
            st.model_copy(update={"tools": ["web_search"]}) if st.id == node else st for st in d.subtasks
        ]
    )


def _state_after(
    task: Task, env: Environment, script: list[Action | str], system: str = "orchestra"
) -> OrchestraState:
    """Run ``script`` (then a filler that never gets used) and return the state before the next decision."""
    fmt = "maestro" if system == "maestro" else "json"
    filler: Action = Finish(answer="stop")
    traj = run_task_sync(task, system, ScriptedPolicy([*script, filler], fmt=fmt), env)  # type: ignore[arg-type]
    state = traj.steps[len(script)].state
    assert state is not None
    return OrchestraState.model_validate(state)


@dataclass(frozen=True)
class Case:
    name: str
    script: Callable[[Delegate, Task, Environment], list[Action | str]]
    expect: Callable[[Action, Delegate], None]
    system: str = "orchestra"
    mode: str = "dag"


def _fresh_expect(a: Action, dag: Delegate) -> None:
    assert a == dag


def _branch_failed(a: Action, dag: Delegate) -> None:
    # E4 (the beeps) failed and E5 was skipped: redo the beeps as E6, then compute from E3 and E6
    assert isinstance(a, Delegate)
    assert [st.id for st in a.subtasks] == ["E6", "E7"]
    assert a.subtasks[0].goal == dag.subtasks[3].goal and a.subtasks[0].tools == dag.subtasks[3].tools
    assert a.subtasks[1].depends_on == ["E3", "E6"] and a.subtasks[1].goal == "compute #E3 + #E6"


def _renumbered(a: Action, dag: Delegate) -> None:
    assert a == Finish(answer="#E15")


def _wrong_first(a: Action, dag: Delegate) -> None:
    # a sub-task the program does not need is ignored; the whole DAG follows with ids after it
    assert a == _renumber(dag, 1)


def _all_done(a: Action, dag: Delegate) -> None:
    assert a == Finish(answer="#E5")


def _maestro(a: Action, dag: Delegate) -> None:
    # two searches done (caption, wiki search): the third is the browse of the found page
    assert isinstance(a, MaestroSearch)
    assert a.query == dag.subtasks[2].goal and a.skill == "browse" and a.model == "web_expert"


def _gave_up(a: Action, dag: Delegate) -> None:
    assert a == Finish(answer="unknown")


def _wave_two(a: Action, dag: Delegate) -> None:
    # waves mode after a run of only the first wave: the search that reads E1 is next, with a new id
    assert isinstance(a, Delegate) and [st.id for st in a.subtasks] == ["E3"]
    assert a.subtasks[0].goal == dag.subtasks[1].goal == 'search the wiki for the page titled "#E1"'
    assert a.subtasks[0].depends_on == ["E1"]


def _first_wave(dag: Delegate) -> Delegate:
    return Delegate(subtasks=[dag.subtasks[0], dag.subtasks[3].model_copy(update={"id": "E2"})])


CASES = [
    Case("fresh state", lambda dag, t, e: [], _fresh_expect),
    Case("one branch failed", lambda dag, t, e: [_without_tool(dag, "E4")], _branch_failed),
    Case("evidence ids renumbered", lambda dag, t, e: [_renumber(dag, 10)], _renumbered),
    Case(
        "a wrong sub-task already done",
        lambda dag, t, e: [
            Delegate(subtasks=[SubTask(id="E1", goal="compute 6 * 7", tools=["code_executor"])])
        ],
        _wrong_first,
    ),
    Case("everything done", lambda dag, t, e: [dag], _all_done),
    Case(
        "a Maestro history",
        lambda dag, t, e: [
            MaestroSearch(model="video_expert", skill="video_temporal", query=dag.subtasks[0].goal),
            MaestroSearch(model="web_expert", skill="search", query=dag.subtasks[1].goal),
        ],
        _maestro,
        system="maestro",
        mode="steps",
    ),
    Case(
        "the same step failed twice",
        lambda dag, t, e: [_without_tool(dag, "E4"), _without_tool(_renumber(dag, 5), "E9")],
        _gave_up,
    ),
    Case("partial evidence, waves", lambda dag, t, e: [_first_wave(dag)], _wave_two, mode="waves"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_expert_labels_off_expert_states(case: Case, task: Task, world_env: Environment) -> None:
    dag = expert_decision(_fresh(task, world_env), task.solution_program or [], agent=world_env.agent)
    assert isinstance(dag, Delegate) and [st.depends_on for st in dag.subtasks] == [
        [],
        ["E1"],
        ["E2"],
        [],
        ["E3", "E4"],
    ]
    state = _state_after(task, world_env, case.script(dag, task, world_env), case.system)
    fmt = "maestro" if case.system == "maestro" else "json"
    # the situations are about structure: escalation of unsure readings has its own test below
    kw = {"mode": case.mode, "fmt": fmt, "agent": world_env.agent, "escalate": False}
    got = expert_decision(state, task.solution_program or [], **kw)  # type: ignore[arg-type]
    case.expect(got, dag)
    again = expert_decision(state, task.solution_program or [], **kw)  # type: ignore[arg-type]
    assert render_decision(again, fmt) == render_decision(got, fmt)  # a function of the state alone


def test_progress_reads_values_not_ids(task: Task, world_env: Environment) -> None:
    dag = expert_decision(_fresh(task, world_env), task.solution_program or [])
    assert isinstance(dag, Delegate)
    state = _state_after(task, world_env, [_renumber(dag, 10)])
    prog = progress(state, task.solution_program or [])
    assert prog.done == {"v1": "E11", "v2": "E12", "v3": "E13", "v4": "E14", "v5": "E15"}
    blind = task.model_copy(
        update={
            "solution_program": [s.model_copy(update={"value": None}) for s in task.solution_program or []]
        }
    )
    assert progress(state, blind.solution_program or []) == prog  # recorded values are never read


def test_oracle_is_a_thin_loop_over_the_expert(task: Task, world_env: Environment) -> None:
    oracle = oracle_for(task, "orchestra", world_env.agent)
    first = run_task_sync(task, "orchestra", oracle, world_env)
    second = run_task_sync(task, "orchestra", oracle, world_env)  # no state kept between runs
    assert first.answer == second.answer == task.answer
    for step in first.steps:
        assert step.state is not None and step.decision is not None
        label = expert_decision(
            OrchestraState.model_validate(step.state), task.solution_program or [], agent=world_env.agent
        )
        assert label == step.decision


def test_expert_needs_an_able_backend(task: Task, world_env: Environment) -> None:
    state = _fresh(task, world_env).model_copy(
        update={"backends": [c for c in world_env.backends.cards() if c.name == "audio_expert"]}
    )
    with pytest.raises(ExpertError, match="skill"):
        expert_decision(state, task.solution_program or [])


def _set(state: OrchestraState, eid: str, **upd: object) -> OrchestraState:
    ctx = [e.model_copy(update=upd) if e.id == eid else e for e in state.context]
    return state.model_copy(update={"context": ctx})


def test_a_low_confidence_result_is_escalated_to_a_stronger_expert(
    task: Task, world_env: Environment
) -> None:
    from orchestra.agent.memory import Evidence

    dag = expert_decision(_fresh(task, world_env), task.solution_program or [], agent=world_env.agent)
    assert isinstance(dag, Delegate)
    done = _state_after(task, world_env, [dag])
    sure_all = [
        e.model_copy(update={"confidence": None if e.confidence is None else 1.0}) for e in done.context
    ]
    done = done.model_copy(update={"context": sure_all})  # every reading sure, but the one this test sets
    program = task.solution_program or []
    unsure = _set(done, "E4", backend="audio_fast", confidence=0.3)  # the beeps, read by the fast expert
    up = expert_decision(unsure, program, agent=world_env.agent)
    assert isinstance(up, Delegate) and [st.id for st in up.subtasks] == ["E6", "E7"]
    assert up.subtasks[0].goal == dag.subtasks[3].goal and up.subtasks[0].backend == "audio_expert"
    assert up.subtasks[1].depends_on == ["E3", "E6"]  # its dependant follows it
    # no escalation: the same state is finished on the unsure value
    assert expert_decision(unsure, program, agent=world_env.agent, escalate=False) == Finish(answer="#E5")
    e4 = next(e for e in unsure.context if e.id == "E4")
    e5 = next(e for e in unsure.context if e.id == "E5")
    sure = Evidence(**{**e4.model_dump(), "id": "E6", "backend": "audio_expert", "confidence": 0.95})
    again = Evidence(**{**e5.model_dump(), "id": "E7", "depends_on": ["E3", "E6"]})
    after = unsure.model_copy(update={"context": [*unsure.context, sure, again]})
    assert expert_decision(after, program, agent=world_env.agent) == Finish(answer="#E7")
    # the strongest expert was unsure too: the surest result stands (no stronger expert is left)
    both_unsure = after.model_copy(
        update={"context": [*unsure.context, sure.model_copy(update={"confidence": 0.4}), again]}
    )
    assert expert_decision(both_unsure, program, agent=world_env.agent) == Finish(answer="#E7")
    # a failure on the fast expert goes to the stronger one too
    failed = _set(done, "E4", backend="audio_fast", status="failed", value=None, error="no tones")
    retry = expert_decision(failed, program, agent=world_env.agent)
    assert isinstance(retry, Delegate) and retry.subtasks[0].backend == "audio_expert"


def test_an_equally_rated_untried_expert_still_takes_an_unsure_reading() -> None:
    """Calibration can rate a fast and a careful expert the same on a skill; an unsure fast
    reading still goes to the careful one, and once both ran the surest reading stands."""
    from orchestra.agent.memory import Evidence
    from orchestra.backends.base import BackendCard
    from orchestra.schemas import ModalInput, PerceiveStep

    cards = [
        BackendCard(
            name="fast", kind="builtin", skills={"counting": 1.0}, price_per_call=0.001, latency_s=0.1
        ),
        BackendCard(
            name="careful", kind="builtin", skills={"counting": 1.0}, price_per_call=0.003, latency_s=0.3
        ),
    ]
    program = [
        PerceiveStep(out="v1", value=None, input_id="img", perception="count_shapes", args={"color": "red"})
    ]
    goal = "count the shapes of colour red and type any in #M1"
    e1 = Evidence(id="E1", goal=goal, status="ok", value=2, backend="fast", confidence=0.0)
    state = OrchestraState(
        question="How many red shapes?",
        modal_inputs=[ModalInput(type="image", id="img", path="a.png")],
        context=[e1],
        backends=cards,
    )
    up = expert_decision(state, program)
    assert isinstance(up, Delegate) and up.subtasks[0].backend == "careful" and up.subtasks[0].goal == goal
    e2 = Evidence(id="E2", goal=goal, status="ok", value=3, backend="careful", confidence=0.4)
    assert expert_decision(state.model_copy(update={"context": [e1, e2]}), program) == Finish(answer="#E2")
