"""The four systems on a real world task: answers, the recorded DAG and timings, accounting, isolation."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestra.agent.decision import MaestroSearch, parse_decision
from orchestra.agent.policies import ScriptedPolicy, oracle_for
from orchestra.agent.runtime import Environment
from orchestra.agent.state import OrchestraState, render_state
from orchestra.agent.systems import evidence_of, run_task_sync
from orchestra.backends.base import Backend, BackendRegistry, SubResult, SubTaskInput
from orchestra.backends.goals import PERCEPTIONS, GoalError, match_field, parse_goal, perception_goal
from orchestra.schemas import (
    ComputeStep,
    Delegate,
    Finish,
    ModalInput,
    PerceiveStep,
    SubTask,
    Task,
    Trajectory,
    read_tasks_json,
)
from orchestra.text import format_value
from orchestra.tools.base import Tool


@pytest.fixture(scope="module")
def env(world_env: Environment) -> Environment:
    return world_env


@pytest.fixture(scope="module")
def branchy(small_world: Path) -> Task:
    """A two-branch audio task made from world files: a Morse-named lookup plus a beep count, summed."""
    tasks = read_tasks_json(small_world / "tasks.json")
    media = [json.loads(x) for x in (small_world / "truth" / "media.jsonl").read_text().splitlines()]
    base = next(
        t
        for t in tasks
        if t.solution_program
        and isinstance(t.solution_program[0], PerceiveStep)
        and t.solution_program[0].perception == "morse_text"
        and str(t.solution_program[2].value).isdigit()
    )
    beeps = next(m for m in media if m["kind"] == "beeps")
    morse_in = next(m for m in base.omni_modal_input if m.id == base.solution_program[0].input_id)
    program = list(base.solution_program[:3]) + [
        PerceiveStep(out="v4", value=None, input_id=beeps["id"], perception="count_beeps"),
        ComputeStep(out="v5", value=None, expression="v3 + v4"),
    ]
    answer = str(int(base.solution_program[2].value) + int(beeps["facts"]["count"]))
    return Task(
        id="branchy",
        question="The audio spells a name in Morse code; add the wiki figure to the number of beeps.",
        omni_modal_input=[morse_in, ModalInput(type="audio", id=beeps["id"], path=beeps["path"])],
        answer=answer,
        solution_program=program,
    )


def _run(task: Task, system: str, env: Environment) -> Trajectory:
    """The oracle without escalation (these tests are about the systems' structure; test_expert and
    bench/routing.py cover escalation)."""
    sure = env.agent.model_copy(update={"escalation_confidence": 0.0})
    return run_task_sync(task, system, oracle_for(task, system, sure), env)  # type: ignore[arg-type]


@pytest.mark.parametrize("system", ["orchestra", "linear", "react", "maestro"])
def test_every_system_answers_the_branchy_task(system: str, branchy: Task, env: Environment) -> None:
    traj = _run(branchy, system, env)
    assert traj.answer == branchy.answer, [s.error for s in traj.steps]
    ev = evidence_of(traj)
    assert [e.status for e in ev] == ["ok"] * 5
    n_decisions = {"orchestra": 2, "linear": 2, "react": 6, "maestro": 6}[system]
    assert len(traj.steps) == n_decisions
    if system == "react":
        assert {e.backend for e in ev} == {"react_agent"}
    if system == "maestro":
        assert traj.steps[0].raw_output.startswith("<search> ")
        assert isinstance(parse_decision(traj.steps[0].raw_output, fmt="maestro"), MaestroSearch)
        assert "<answer>" in traj.steps[0].state_messages[0]["content"]
        assert all(isinstance(s.decision, MaestroSearch) for s in traj.steps[:-1])  # stored as themselves
        assert Trajectory.model_validate_json(traj.model_dump_json()) == traj


def test_orchestra_overlaps_branches_and_linear_does_not(branchy: Task, env: Environment) -> None:
    orch = {e.id: e for e in evidence_of(_run(branchy, "orchestra", env))}
    lin = {e.id: e for e in evidence_of(_run(branchy, "linear", env))}
    # E1 (Morse) and E4 (beeps) have no path between them
    assert orch["E4"].depends_on == [] and orch["E5"].depends_on == ["E3", "E4"]
    assert orch["E4"].start_s < orch["E1"].end_s  # ran at the same time
    spans = sorted((e.start_s, e.end_s) for e in lin.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # one at a time


def test_trajectory_records_state_dag_timings_and_accounting(branchy: Task, env: Environment) -> None:
    traj = _run(branchy, "orchestra", env)
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert again == traj
    first = traj.steps[0]
    state = OrchestraState(
        question=branchy.question,
        modal_inputs=branchy.omni_modal_input,
        backends=env.backends.cards(),
        tools=[t for t in _cards(env)],
        turn=0,
        max_turns=env.max_turns,
        threshold=env.agent.sufficiency_threshold,
        unsure_below=env.agent.escalation_confidence,
    )
    budget, ev_budget = env.agent.state_tokens, env.agent.evidence_tokens
    assert first.state_messages == render_state(state, budget, evidence_tokens=ev_budget)
    assert OrchestraState.model_validate(first.state) == state  # the structured state, stored as it was
    assert isinstance(first.decision, Delegate) and isinstance(traj.steps[1].decision, Finish)
    assert "#E1" in traj.steps[1].state_messages[1]["content"]  # the evidence was in the next state
    for r in first.results:
        assert 0 <= r["start_s"] <= r["end_s"] <= traj.latency_s
    acc = traj.accounting
    n_calls = sum(len(e.tool_calls) for e in evidence_of(traj))
    assert sum(u["calls"] for u in acc["tool"].values()) == n_calls >= 5
    assert set(acc["backend"]) >= {"web_expert", "code_expert"}
    assert set(acc["backend"]) & {"audio_fast", "audio_expert"}
    assert acc["policy"]["oracle"]["calls"] == 2
    assert traj.tokens == acc["total"]["input_tokens"] + acc["total"]["output_tokens"] > 0
    assert traj.cost == pytest.approx(acc["total"]["cost"]) and traj.cost > 0
    assert 0 < acc["critical_path_s"] <= traj.latency_s


def _cards(env: Environment):  # type: ignore[no-untyped-def]
    from orchestra.agent.state import ToolCard

    return [ToolCard.from_tool(t) for t in env.tools]


class _Mutator(Backend):
    """Mutates everything it was handed, then reports what it saw first."""

    async def run(self, task: SubTaskInput, tools: Sequence[Tool]) -> SubResult:
        seen = repr((sorted(task.modal_inputs), [d.value for d in task.dependencies.values()]))
        await asyncio.sleep(0.05)
        for m in task.modal_inputs.values():
            m.path = "/mutated"
        for d in task.dependencies.values():
            if isinstance(d.value, list):
                d.value.append("mutated")
        task.modal_inputs.clear()
        return SubResult(value=["from " + task.subtask.id], claim=seen)


def test_parallel_sub_agents_share_nothing_mutable(branchy: Task, env: Environment) -> None:
    pool = BackendRegistry([_Mutator("mut", {"reasoning": 1.0})])
    e2 = Environment(tools=env.tools, backends=pool, agent=env.agent, media_root=env.media_root)
    nodes = [
        SubTask(id="E1", goal="first #M1", backend="mut"),
        SubTask(id="E2", goal="second #M1 #M2", backend="mut"),
        SubTask(id="E3", goal="uses #E1", backend="mut", depends_on=["E1"]),
        SubTask(id="E4", goal="also uses #E1", backend="mut", depends_on=["E1"]),
    ]
    traj = run_task_sync(
        branchy, "orchestra", ScriptedPolicy([Delegate(subtasks=nodes), Finish(answer="#E4")]), e2
    )
    ev = {e.id: e for e in evidence_of(traj)}
    assert ev["E2"].claim == "(['M1', 'M2'], [])" and ev["E1"].claim == "(['M1'], [])"
    assert ev["E3"].claim == ev["E4"].claim == "([], [['from E1']])"  # E3's mutation never reached E4
    assert ev["E1"].value == ["from E1"]
    assert branchy.omni_modal_input[0].path != "/mutated"


def test_a_redo_line_reruns_a_result_and_what_depends_on_it(branchy: Task, env: Environment) -> None:
    pool = BackendRegistry([_Mutator("mut", {"reasoning": 1.0}), _Mutator("mut2", {"reasoning": 1.0})])
    e2 = Environment(tools=env.tools, backends=pool, agent=env.agent, media_root=env.media_root)
    plan = Delegate(
        subtasks=[
            SubTask(id="E1", goal="first #M1", backend="mut", modalities=["M1"]),
            SubTask(id="E2", goal="uses #E1", backend="mut", depends_on=["E1"]),
        ]
    )
    script = [plan, "redo E1 mut2", Finish(answer="#E4")]
    traj = run_task_sync(branchy, "orchestra", ScriptedPolicy(script, fmt="lines"), e2)
    ev = {e.id: e for e in evidence_of(traj)}
    # E1 again on mut2 (E3, its modal input kept), E2 re-issued on E3 (E4): the tree ids E2/E21
    # would collide with the state's E2, so the ids after the largest
    assert (ev["E3"].backend, ev["E3"].goal, ev["E3"].modalities) == ("mut2", ev["E1"].goal, ["M1"])
    assert ev["E4"].planned_goal == "uses #E3" and ev["E4"].depends_on == ["E3"]
    assert ev["E4"].claim == "([], [['from E3']])" and traj.answer == format_value(["from E4"])


def test_invalid_and_failed_decisions_are_recorded(branchy: Task, env: Environment) -> None:
    wrong = Delegate(
        subtasks=[
            SubTask(
                id="E1", goal="decode the morse text in #M1", tools=["audio_morse"], backend="vision_expert"
            )
        ]
    )
    script = ["this is not a decision", wrong, Finish(answer="gave up")]
    traj = run_task_sync(branchy, "orchestra", ScriptedPolicy(script), env)
    assert traj.steps[0].error.startswith("bad_json") and traj.steps[0].decision is None
    assert "turn 0: invalid decision" in traj.steps[1].state_messages[1]["content"]
    (e1,) = evidence_of(traj)
    assert e1.status == "failed" and "no 'audio_signal' skill" in e1.error
    assert traj.answer == "gave up"


def test_no_finish_within_max_turns_is_an_error(branchy: Task, env: Environment) -> None:
    e2 = Environment(
        tools=env.tools, backends=env.backends, agent=env.agent, media_root=env.media_root, max_turns=2
    )
    traj = run_task_sync(branchy, "orchestra", ScriptedPolicy(["garbage", "more garbage"]), e2)
    assert traj.answer is None and traj.error == "no finish within 2 turns"


def test_goal_grammar_round_trips_every_perception() -> None:
    for name, spec in PERCEPTIONS.items():
        args = {k: "red" for k in re.findall(r"\{(\w+)\}", spec.phrase)}
        goal = perception_goal(name, args, "#M2")
        parsed = parse_goal(goal)
        assert parsed.perception is spec and parsed.modal == "M2" and parsed.meta["args"] == args
    assert parse_goal('search the wiki for the page titled "New Vuga"').args == {"query": "New Vuga"}
    assert parse_goal("compute abs(3 - 10)").args == {"code": "abs(3 - 10)"}
    with pytest.raises(GoalError):
        parse_goal("make me a sandwich")
    with pytest.raises(GoalError):
        parse_goal("compute 3 +")


def test_field_matching_on_page_facts() -> None:
    page = (
        "X\nprose\n\nFacts\nType: dish\nCalories per serving: 420\nPreparation time (min): 35\nOrigin: Vuga"
    )
    assert match_field(page, "prep_minutes") == ("Preparation time (min)", "35")
    assert match_field(page, "calories") == ("Calories per serving", "420")
    assert match_field(page, "origin") == ("Origin", "Vuga")
    with pytest.raises(GoalError):
        match_field(page, "population")


def test_maestro_routes_by_skill_and_the_skill_picks_the_sub_routine(branchy: Task, env: Environment) -> None:
    script = [
        "<search> vision_expert@@ocr: decode the morse text in #M1 </search>",  # wrong Level-1 skill
        "<search> audio_expert@@audio_signal: decode the morse text in #M1 </search>",
        "<answer>#E2</answer>",
    ]
    traj = run_task_sync(branchy, "maestro", ScriptedPolicy(script, fmt="maestro"), env)
    e1, e2 = evidence_of(traj)
    assert e1.status == "failed" and "skill 'ocr' has no sub-routine" in e1.error
    assert e2.ok and e2.tool_calls[0].tool == "audio_morse"  # the skill's tools, picked inside the skill
    assert traj.answer == str(branchy.solution_program[0].value)


def test_answer_cli_prints_answer_tree_and_json(small_world: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestra.agent.cli import app

    task = next(
        t
        for t in read_tasks_json(small_world / "tasks.json")
        if {m.type for m in t.omni_modal_input} == {"audio"}
    )
    base = [
        "answer",
        "--task",
        str(task.id),
        "--world",
        str(small_world),
        "--params",
        str(tmp_path / "none.yaml"),
    ]
    out = CliRunner().invoke(app, base)
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0] == task.answer and "turn 0: delegate" in out.output
    out = CliRunner().invoke(app, [*base, "--system", "maestro", "--json", "--out", str(tmp_path / "t.json")])
    assert out.exit_code == 0, out.output
    traj = Trajectory.model_validate_json(out.output)
    assert traj.system == "maestro" and traj.answer == task.answer
    assert Trajectory.model_validate_json((tmp_path / "t.json").read_text()) == traj
    script = tmp_path / "script.txt"
    script.write_text('{"kind": "finish", "answer": "42"}\n')
    q = [
        "answer",
        "-q",
        "What is 6 times 7?",
        "--policy",
        f"script:{script}",
        "--params",
        str(tmp_path / "x.yaml"),
    ]
    out = CliRunner().invoke(app, q)
    assert out.exit_code == 0 and out.output.startswith("42\n"), out.output
    bad = CliRunner().invoke(app, ["answer", "-q", "?", "--input", str(tmp_path / "nope.gif")])
    assert bad.exit_code == 2 and "not a readable" in bad.output


def test_sufficient_evidence_ends_the_loop_when_the_policy_does_not(branchy: Task, env: Environment) -> None:
    compute = Delegate(subtasks=[SubTask(id="E1", goal="compute 6 * 7", tools=["code_executor"])])
    script = [compute, "garbage instead of a finish", "more garbage"]

    def run(threshold: float) -> Trajectory:
        agent = env.agent.model_copy(update={"sufficiency_threshold": threshold})
        e2 = Environment(
            tools=env.tools, backends=env.backends, agent=agent, media_root=env.media_root, max_turns=3
        )
        return run_task_sync(branchy, "orchestra", ScriptedPolicy(list(script)), e2)

    low = run(0.05)
    assert low.answer == "42" and low.error is None
    assert low.accounting["stopped_by"] == "sufficiency" and low.accounting["sufficiency"] >= 0.05
    assert len(low.steps) == 2 and low.steps[1].error is not None
    assert "Evidence sufficiency:" in low.steps[1].state_messages[1]["content"]
    high = run(1.0)
    assert high.answer is None and high.error == "no finish within 3 turns"
    assert high.accounting["stopped_by"] == "max_turns"


def test_answer_inputs_are_named_relative_to_the_folder_they_share(tmp_path: Path) -> None:
    """``orchestra answer --input``: the files the user names, as paths under their common folder (a
    task's media paths are relative to a media root, never absolute)."""
    from orchestra.agent.cli import _the_task
    from orchestra.io import media_file

    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "c").mkdir(parents=True)
    png, wav = tmp_path / "a" / "x.png", tmp_path / "b" / "c" / "y.wav"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    wav.write_bytes(b"RIFF")
    task, root = _the_task("q?", [png, wav], None, None)
    assert root == tmp_path.resolve()
    assert [m.path for m in task.omni_modal_input] == ["a/x.png", "b/c/y.wav"]
    assert [media_file(root, m.path) for m in task.omni_modal_input] == [png.resolve(), wav.resolve()]
    one, root = _the_task("q?", [png], None, None)
    assert root == png.parent.resolve() and one.omni_modal_input[0].path == "x.png"
