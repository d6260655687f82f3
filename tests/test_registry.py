"""The expert registry file: the shipped pool, adding experts and skills without code, calibration."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestra.agent.expert import expert_decision
from orchestra.agent.policies import OraclePolicy
from orchestra.agent.runtime import Environment
from orchestra.agent.state import OrchestraState
from orchestra.agent.systems import evidence_of, run_task_sync
from orchestra.backends.base import BackendError
from orchestra.backends.pool import backend_pool, builtin_backends
from orchestra.backends.registry import default_registry_path, expert_specs, load_registry, write_registry
from orchestra.config import AgentParams, ProviderSpec, WorldParams
from orchestra.evaluation.calibrate import calibrate, calibrated_registry
from orchestra.schemas import Delegate, PerceiveStep, Task, read_tasks_json

PERCEPTION_SKILLS = ("ocr", "counting", "chart", "audio_signal", "video_temporal")


def test_the_shipped_pool_has_a_fast_and_a_careful_expert_per_perception_skill() -> None:
    reg = load_registry()
    for skill in PERCEPTION_SKILLS:
        able = {n: s for n, s in reg.experts.items() if s.skills.get(skill, 0) > 0 and s.kind == "builtin"}
        modes = {s.mode: (s.skills[skill], s.price.per_call) for s in able.values()}
        assert {"fast", "careful"} <= set(modes), (skill, able)
        (fast_level, fast_price), (careful_level, careful_price) = modes["fast"], modes["careful"]
        assert careful_level >= fast_level and careful_price > fast_price, (skill, modes)
    assert set(reg.skills) >= set(PERCEPTION_SKILLS) and reg.skills["ocr"].routines["read_number"]
    assert sorted(builtin_backends(AgentParams()).names()) == sorted(reg.experts)


def _with(tmp_path: Path, **experts: dict) -> Path:
    data = yaml.safe_load(default_registry_path().read_text())
    data["experts"].update(experts)
    path = tmp_path / "experts.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_an_expert_added_in_the_file_alone_is_selected_when_it_is_the_better_match(
    tmp_path: Path, small_world: Path, world_env: Environment
) -> None:
    careful = load_registry().experts["vision_expert"]
    pro = {
        "mode": "careful",
        "description": "reads images carefully, on a cheaper machine",
        "skills": {"ocr": 0.995, "counting": 0.995, "chart": 0.99},
        "price": {"per_call": careful.price.per_call / 4},
        "latency": {"base_s": careful.latency.base_s},
    }
    agent = AgentParams(registry=str(_with(tmp_path, vision_pro=pro)))
    pool = builtin_backends(agent)
    assert "vision_pro" in pool.names()
    task: Task = next(
        t
        for t in read_tasks_json(small_world / "tasks.json")
        if any(isinstance(s, PerceiveStep) and s.perception == "read_text" for s in t.solution_program or [])
    )
    state = OrchestraState(question=task.question, modal_inputs=task.omni_modal_input, backends=pool.cards())
    first = expert_decision(state, task.solution_program or [], agent=agent)
    assert isinstance(first, Delegate)
    ocr = [st for st in first.subtasks if st.tools == ["image_ocr"]]
    assert ocr and all(st.backend == "vision_pro" for st in ocr)  # the cost-aware match picks it
    env = Environment(tools=world_env.tools, backends=pool, agent=agent, media_root=world_env.media_root)
    traj = run_task_sync(task, "orchestra", OraclePolicy(task, agent), env)
    assert "vision_pro" in {e.backend for e in evidence_of(traj)} and traj.answer == task.answer


def test_a_new_skill_and_an_openai_expert_need_no_code(tmp_path: Path) -> None:
    data = yaml.safe_load(default_registry_path().read_text())
    data["skills"]["legal"] = {"description": "reads contracts", "keywords": ["contract", "clause"]}
    data["experts"]["counsel"] = {"kind": "openai", "provider": "gpt", "skills": {"legal": 0.9}}
    path = tmp_path / "experts.yaml"
    path.write_text(yaml.safe_dump(data))
    agent = AgentParams(registry=str(path))
    providers = {"gpt": ProviderSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")}
    pool = backend_pool(agent, providers)
    assert pool.get("counsel").skill_names() == ["legal"]
    del data["skills"]["legal"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BackendError, match=r"unknown skills \['legal'\]; declare them under skills"):
        load_registry(path)
    path.write_text("experts: [unclosed")
    with pytest.raises(BackendError, match="not valid YAML"):
        load_registry(path)
    with pytest.raises(BackendError, match="cannot read"):
        load_registry(tmp_path / "missing.yaml")


def test_params_override_the_registry_by_name() -> None:
    base = load_registry().experts["web_expert"]
    agent = AgentParams(backends={"web_expert": base.model_copy(update={"description": "mine"})})
    assert expert_specs(agent)["web_expert"].description == "mine"
    assert set(expert_specs(agent)) == set(load_registry().experts)


def test_calibration_measures_accuracy_latency_and_price(tmp_path: Path) -> None:
    agent = AgentParams()
    reg = load_registry()
    world = WorldParams(seed=4242, n_seeds=6, n_entities=60)
    items = calibrate(agent, reg, world)
    assert items and {i.expert for i in items} >= {"web_expert", "code_expert"}
    new = calibrated_registry(reg, items, world, price_per_s=0.01)
    for name, spec in new.experts.items():
        for skill, m in spec.measured.items():
            mine = [i for i in items if i.expert == name and i.skill == skill]
            assert m.n == len(mine) and m.accuracy == round(sum(i.correct for i in mine) / len(mine), 3)
            assert spec.skills[skill] == m.accuracy and m.p50_s > 0
        if spec.measured:
            assert spec.price.per_call == pytest.approx(
                max(1e-6, round(0.01 * spec.latency.base_s, 6)), rel=1e-3
            )
    assert new.calibration["world_seed"] == 4242 and new.calibration["items"] == len(items)
    out = tmp_path / "calibrated.yaml"
    write_registry(out, new, "header line")
    assert out.read_text().startswith("# header line\n") and load_registry(out) == new


def test_maestro_level_two_picks_the_routine_inside_the_skill_by_keyword(
    small_world: Path, world_env: Environment
) -> None:
    from orchestra.agent.policies import ScriptedPolicy
    from orchestra.agent.refs import modal_key
    from orchestra.backends.goals import GoalError, goal_by_routine
    from orchestra.schemas import Finish, MaestroSearch

    routines = load_registry().routines()
    assert goal_by_routine("how many red circles are in #M2", "counting", routines["counting"]).meta[
        "args"
    ] == {
        "color": "red",
        "shape": "circle",
    }
    assert goal_by_routine("what number is on the sign in #M1", "ocr", routines["ocr"]).perception.name == (
        "read_number"
    )
    with pytest.raises(GoalError, match="no 'ocr' routine matches"):
        goal_by_routine("sing me a song in #M1", "ocr", routines["ocr"])
    with pytest.raises(GoalError, match="names no modal input"):
        goal_by_routine("count the beeps", "audio_signal", routines["audio_signal"])
    task = next(
        t
        for t in read_tasks_json(small_world / "tasks.json")
        if any(
            isinstance(s, PerceiveStep) and s.perception == "count_beeps" for s in t.solution_program or []
        )
    )
    step = next(
        s
        for s in task.solution_program or []
        if isinstance(s, PerceiveStep) and s.perception == "count_beeps"
    )
    key = modal_key(next(i for i, m in enumerate(task.omni_modal_input) if m.id == step.input_id))
    query = f"how many beeps can you hear in #{key}?"  # not a grammar phrase: Level-2 routing by keyword
    script = [MaestroSearch(model="audio_expert", skill="audio_signal", query=query), Finish(answer="#E1")]
    traj = run_task_sync(task, "maestro", ScriptedPolicy(script, fmt="maestro"), world_env)
    (e1,) = evidence_of(traj)
    assert e1.ok and e1.tool_calls[0].tool == "audio_tones" and traj.answer == str(step.value)
