"""The lookahead value on a small-world task (two branches, five steps): a run resumed from a recorded
state goes on as the run it came from, and a decision is worth the outcome it leads to less the
turns and calls it costs. And DAPO's dynamic sampling: groups without reward spread are guided by a
reference decision or replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_expert import _state_after

from orchestra.agent.decision import render_decision
from orchestra.agent.expert import expert_decision
from orchestra.agent.policies import OraclePolicy
from orchestra.agent.runtime import Environment
from orchestra.agent.systems import run_task_sync
from orchestra.schemas import Delegate, Finish, Task, read_tasks_json
from orchestra.training.lookahead import CALL_COST, TURN_COST, ScriptThen, finish_after, lookahead_reward
from orchestra.training.rewards import REJECTED


@pytest.fixture(scope="module")
def task(small_world: Path) -> Task:
    return next(t for t in read_tasks_json(small_world / "tasks.json") if len(t.solution_program or []) == 5)


def _value(text: str, state, task: Task, env: Environment) -> float:  # type: ignore[no-untyped-def]
    return lookahead_reward(text, state, task, "json", env, env.agent)


def test_a_run_resumed_from_a_state_goes_on_as_the_run_it_came_from(
    task: Task, world_env: Environment
) -> None:
    fresh = _state_after(task, world_env, [])
    dag = expert_decision(fresh, task.solution_program or [], agent=world_env.agent, escalate=False)
    assert isinstance(dag, Delegate)
    first_wave = render_decision(Delegate(subtasks=[dag.subtasks[0], dag.subtasks[3]]), "json")
    expert = OraclePolicy(task, world_env.agent)
    whole = run_task_sync(task, "orchestra", ScriptThen([first_wave], "json", expert), world_env)
    assert whole.answer == task.answer and len(whole.steps) == 3  # the first wave, the rest, the finish
    mid = _state_after(task, world_env, [first_wave])
    rest = run_task_sync(task, "orchestra", expert, world_env, start=mid)
    assert rest.answer == whole.answer
    assert [s.index for s in rest.steps] == [1, 2]
    assert [s.decision for s in rest.steps] == [s.decision for s in whole.steps[1:]]
    assert [r["value"] for r in rest.steps[0].results] == [r["value"] for r in whole.steps[1].results]


def test_a_decision_is_worth_its_outcome_less_the_turns_and_calls_it_costs(
    task: Task, world_env: Environment
) -> None:
    fresh = _state_after(task, world_env, [])
    dag = expert_decision(fresh, task.solution_program or [], agent=world_env.agent, escalate=False)
    assert isinstance(dag, Delegate) and len(dag.subtasks) == 5
    whole = finish_after(render_decision(dag, "json"), fresh, task, "json", OraclePolicy(task), world_env)
    assert whole.right and whole.turns == 2 and whole.calls == 5  # the plan, then the finish
    assert whole.value == pytest.approx(1 - 2 * TURN_COST - 5 * CALL_COST)
    first_wave = render_decision(Delegate(subtasks=[dag.subtasks[0], dag.subtasks[3]]), "json")
    wrong_finish = render_decision(Finish(answer="not " + task.answer), "json")
    values = {
        "plan": _value(render_decision(dag, "json"), fresh, task, world_env),
        "part": _value(first_wave, fresh, task, world_env),
        "garbage": _value("no decision here", fresh, task, world_env),
        "wrong finish": _value(wrong_finish, fresh, task, world_env),
    }
    assert values["plan"] == pytest.approx(whole.value)
    assert values["plan"] > values["part"] > values["wrong finish"]
    # run, text the runtime rejects is a lost turn and then the expert's plan, worth as much as a part
    # of the plan, and a wrong finish loses the task at the cost of one turn; the reward pays both
    # the floor (a policy, not the expert, writes the next decision; a lost task is lost)
    run = finish_after("no decision here", fresh, task, "json", OraclePolicy(task), world_env).value
    assert run == pytest.approx(values["plan"] - TURN_COST) == pytest.approx(values["part"])
    lost = finish_after(wrong_finish, fresh, task, "json", OraclePolicy(task), world_env)
    assert not lost.right and lost.value == pytest.approx(-TURN_COST)
    assert values["garbage"] == values["wrong finish"] == REJECTED


def test_dynamic_sampling_guides_or_replaces_groups_whose_rewards_all_tie() -> None:
    from functools import partial

    import torch

    from orchestra.training.dynamic import _fill, _guide, merge_groups, spread_groups

    def batch(advantages: list[float], prompt_w: int, completion_w: int) -> dict[str, torch.Tensor]:
        n = len(advantages)
        return {
            "prompt_ids": torch.full((n, prompt_w), 5),
            "prompt_mask": torch.ones(n, prompt_w, dtype=torch.long),
            "completion_ids": torch.full((n, completion_w), 7),
            "completion_mask": torch.ones(n, completion_w, dtype=torch.long),
            "advantages": torch.tensor(advantages),
            "num_items_in_batch": torch.tensor(n * completion_w),
        }

    first = batch([1.0, -1.0, 0.0, 0.0], 3, 4)  # two groups of 2: the second has no spread
    assert spread_groups(first["advantages"], 2) == [True, False]
    asked: list[list[dict[str, str]]] = []

    def score(rows: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        asked.append(rows)
        return batch([0.0, 0.0] if len(asked) == 1 else [0.5, -0.5], 2, 6)

    reserve = [{"prompt": "a", "sample_id": "a"}, {"prompt": "b", "sample_id": "b"}]
    out, stats = _fill(first, score, reserve, step=3, rounds=3, n=2, pad_id=0)
    assert len(asked) == 2 and all(len(r) == 2 and r[0] == r[1] for r in asked)  # one group a round
    assert out["advantages"].tolist() == [1.0, -1.0, 0.5, -0.5]
    assert out["prompt_ids"].tolist()[2] == [0, 5, 5]  # left-padded prompt
    assert out["completion_ids"].tolist()[0] == [7, 7, 7, 7, 0, 0]  # right-padded completion
    assert int(out["num_items_in_batch"]) == 2 * 4 + 2 * 6
    assert stats == {
        "dynamic/no_signal_drawn": 0.5,
        "dynamic/signal_trained": 1.0,
        "dynamic/guided": 0.0,
        "dynamic/groups_drawn": 4.0,
    }
    flat, stats = _fill(first, lambda rows: batch([0.0, 0.0], 3, 4), reserve, step=3, rounds=1, n=2, pad_id=0)
    assert flat["advantages"].tolist() == [1.0, -1.0, 0.0, 0.0]  # nothing better: the batch keeps its size
    assert stats["dynamic/signal_trained"] == 0.5
    assert merge_groups([(first, 1), (first, 0)], 2, 0)["advantages"].tolist() == [0.0, 0.0, 1.0, -1.0]

    # guided: the group without spread is scored again with the reference as its last sample
    rows = [{"prompt": "p", "sample_id": "s0"}] * 2 + [{"prompt": "q", "sample_id": "s1"}] * 2
    forced: list[tuple[list[dict[str, str]], list[list[int]]]] = []

    def force(ref_on_top: bool) -> Any:
        def scored(rs: list[dict[str, str]], ids: list[list[int]]) -> dict[str, torch.Tensor]:
            forced.append((rs, ids))
            return batch([-1.0, 1.0] if ref_on_top else [1.0, -1.0], 3, 4)

        return scored

    refs = {"s1": [9, 2]}
    for on_top in (True, False):
        asked.clear()
        guided = partial(_guide, first, rows, force=force(on_top), guides=refs.get, n=2)
        out, stats = _fill(first, score, reserve, step=3, rounds=1, n=2, pad_id=0, guided=guided)
        assert forced[-1] == ([rows[2], rows[3]], [[7, 7, 7, 7], [9, 2]])  # drawn kept, reference last
        if on_top:  # kept: nothing resampled
            assert not asked and out["advantages"].tolist() == [1.0, -1.0, -1.0, 1.0]
            assert stats["dynamic/guided"] == 0.5 and stats["dynamic/signal_trained"] == 1.0
            assert stats["dynamic/no_signal_drawn"] == 0.5 and stats["dynamic/groups_drawn"] == 2.0
        else:  # the reference below a drawn decision is not trained on: the group is resampled
            assert len(asked) == 1 and stats["dynamic/guided"] == 0.0
